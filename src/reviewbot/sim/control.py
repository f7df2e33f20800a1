"""The ``/_sim`` control API: the scenario API as JSON over HTTP, for demos and other processes.

Every ``POST /_sim/ACTION`` takes a JSON object and answers 201 (``deliver``: 200) with JSON;
a missing or ill-typed field is a 400 ``{"error": "bad_request", "detail": ...}``.

=====================  ====================================================================
action                 fields (``?`` optional)
=====================  ====================================================================
``users``              forge, login, token?, bot? -> ``{token}``
``repos``              forge, repo (OWNER/NAME), default_branch?, private?,
                       allow_manual_merge? (Gitea's setting; off as Gitea creates one)
``pulls``              forge, repo, author, base?, head_ref? (a pushed branch: the PR is
                       opened on it), title?, body?, draft?, labels?, head_sha? -> the PR
``push``               forge, repo, number, sha? -> ``{sha}`` (the new head)
``statuses``           forge, repo, sha (or number: the PR's head), context, state,
                       target_url?, description? -> ``{id, sha}``
``check-runs``         repo, sha (or number), name, status?, conclusion?, details_url?
                       (GitHub)
``required-checks``    forge, repo, branch, contexts (Gitea: glob patterns)
``reviews``            forge, repo, number, reviewer, state, commit_sha?, body?
``comments``           forge, repo, number, user, body
``mergeable``          forge, repo, number, mergeable
``webhooks``           forge, url, secret?
``apps``               bot_login? -> ``{app_id, private_key_pem}`` (GitHub App)
``installations``      app_id, repo -> ``{installation_id}``
``faults``             forge?, method?, path?, status?, times?, retry_after?, delay?,
                       timeout?, secondary_rate_limit?, apply_then_fail?
``deliver``            kind (pull_request, pull_request_review, status, check_run,
                       check_suite, issue_comment, raw), forge?, and the kind's fields
``ci``                 forge, repo, context?, duration?, branches?, failure_rate?,
                       flake_rate?, conflicts? (lists of paths), seed?, since?, check_run?,
                       webhooks? (``sim/ci.py``)
``ci-retry``           forge, repo, sha (or number) -> ``{sha, attempt, due}``
``clock``              advance (seconds; a manual clock) -> ``{now, finished}``
=====================  ====================================================================

Reads: ``GET /_sim`` (health and repositories), ``GET /_sim/pulls/FORGE/OWNER/NAME/NUMBER``,
``GET /_sim/requests[?forge=]`` (the request log), ``GET /_sim/deliveries``; resets:
``DELETE /_sim/requests``, ``DELETE /_sim/faults``. docs/simulator.md has an example of each
(a test runs them), so a change here goes there too.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from reviewbot.sim.errors import ScenarioError
from reviewbot.sim.records import RequestRecord
from reviewbot.sim.simulator import Simulator
from reviewbot.sim.state import SimPull
from reviewbot.sim.webhooks import Delivery

Body = dict[str, Any]


def pull_summary(pull: SimPull, mergeable: bool | None = None) -> Body:
    return {
        "forge": pull.forge,
        "repo": pull.repo,
        "number": pull.number,
        "title": pull.title,
        "author": pull.author,
        "base": pull.base,
        "head_ref": pull.head_ref,
        "head_sha": pull.head_sha,
        "state": pull.state,
        "draft": pull.draft,
        "labels": list(pull.labels),
        "mergeable": pull.mergeable if mergeable is None else mergeable,
        "merged": pull.merged,
        "merge_commit_sha": pull.merge_commit_sha,
        "reviews": [
            {
                "id": r.id,
                "user": r.user,
                "state": r.state,
                "commit_id": r.commit_id,
                "body": r.body,
                "dismissed": r.dismissed,
            }
            for r in pull.reviews
        ],
        "comments": [{"id": c.id, "user": c.user, "body": c.body} for c in pull.comments],
    }


def delivery_summary(delivery: Delivery) -> Body:
    return {
        "forge": delivery.forge,
        "event": delivery.event,
        "event_type": delivery.event_type,
        "id": delivery.id,
        "url": delivery.url,
        "status": delivery.status,
        "error": delivery.error,
        "headers": {k: v for k, v in delivery.headers.items() if "signature" not in k.lower()},
    }


def record_summary(record: RequestRecord) -> Body:
    return {
        "forge": record.forge,
        "method": record.method,
        "path": record.path,
        "query": record.query,
        "status": record.status,
        "operation_id": record.operation_id,
        "body": record.body,
        "fault": record.fault,
    }


def _need(body: Body, name: str, kind: type | tuple[type, ...] = str) -> Any:
    value = body.get(name)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise ScenarioError(f"field {name!r} is required ({getattr(kind, '__name__', kind)})")
    return value


def _opt(body: Body, name: str, kind: type | tuple[type, ...], default: Any = None) -> Any:
    value = body.get(name, default)
    if value is not None and not isinstance(value, kind):
        raise ScenarioError(f"field {name!r} must be {getattr(kind, '__name__', kind)}")
    return value


Action = Callable[[Simulator, Body], Awaitable[Any]]


async def _users(sim: Simulator, b: Body) -> Any:
    token = sim.add_user(
        _need(b, "forge"),
        _need(b, "login"),
        _opt(b, "token", str),
        bool(b.get("bot")),
        permissions=_permission_set(b),
    )
    return {"token": token}


def _permission_set(b: Body) -> dict[str, str] | None:
    found = _opt(b, "permissions", dict)
    if found is None:
        return None
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in found.items()):
        raise ScenarioError("permissions: an object of permission name -> read|write")
    return {str(k): str(v) for k, v in found.items()}


async def _permissions(sim: Simulator, b: Body) -> Any:
    """A user's role on a repository (both forges), or an installation's permission set."""
    installation = _opt(b, "installation_id", int)
    if installation is not None:
        granted = _permission_set(b) or {}
        sim.set_installation_permissions(installation, granted)
        return {"installation_id": installation, "permissions": granted}
    sim.set_permission(_need(b, "forge"), _need(b, "repo"), _need(b, "login"), _need(b, "role"))
    return {"login": b["login"], "role": b["role"]}


async def _rulesets(sim: Simulator, b: Body) -> Any:
    ruleset = sim.add_ruleset(
        _need(b, "repo"),
        [str(p) for p in _opt(b, "include", list, ["~DEFAULT_BRANCH"])],
        [str(c) for c in _opt(b, "contexts", list, [])],
        name=_opt(b, "name", str, "ruleset"),
        required_approvals=_opt(b, "required_approvals", int),
        enforcement=_opt(b, "enforcement", str, "active"),
    )
    return {"id": ruleset.id}


async def _repos(sim: Simulator, b: Body) -> Any:
    repo = sim.create_repo(
        _need(b, "forge"),
        _need(b, "repo"),
        _opt(b, "default_branch", str, "main"),
        bool(b.get("private")),
    )
    repo.allow_manual_merge = bool(b.get("allow_manual_merge"))
    return {
        "repo": repo.full_name,
        "default_branch": repo.default_branch,
        "head": repo.branches[repo.default_branch],
    }


async def _pulls(sim: Simulator, b: Body) -> Any:
    pull = sim.open_pr(
        _need(b, "forge"),
        _need(b, "repo"),
        author=_need(b, "author"),
        base=_opt(b, "base", str, "main"),
        head_ref=_opt(b, "head_ref", str, "feature"),
        title=_opt(b, "title", str, "Change"),
        body=_opt(b, "body", str, ""),
        draft=bool(b.get("draft")),
        labels=tuple(_opt(b, "labels", list, [])),
        head_sha=_opt(b, "head_sha", str),
    )
    return pull_summary(pull, sim.pull_mergeable(sim.repo(pull.forge, pull.repo), pull))


async def _push(sim: Simulator, b: Body) -> Any:
    sha = sim.push(
        _need(b, "forge"), _need(b, "repo"), _need(b, "number", int), _opt(b, "sha", str)
    )
    return {"sha": sha}


def _commit(sim: Simulator, b: Body, forge: str) -> str:
    """The commit a result is for: ``sha``, or ``number`` for that PR's current head."""
    if "sha" not in b and "number" in b:
        return sim.pull(forge, _need(b, "repo"), _need(b, "number", int)).head_sha
    return str(_need(b, "sha"))


async def _statuses(sim: Simulator, b: Body) -> Any:
    forge = _need(b, "forge")
    status = sim.set_status(
        forge,
        _need(b, "repo"),
        _commit(sim, b, forge),
        _need(b, "context"),
        _need(b, "state"),
        target_url=_opt(b, "target_url", str),
        description=_opt(b, "description", str),
    )
    return {"id": status.id, "sha": status.sha}


async def _check_runs(sim: Simulator, b: Body) -> Any:
    run = sim.set_check_run(
        _need(b, "repo"),
        _commit(sim, b, "github"),
        _need(b, "name"),
        status=_opt(b, "status", str, "completed"),
        conclusion=_opt(b, "conclusion", str, "success"),
        details_url=_opt(b, "details_url", str),
    )
    return {"id": run.id}


async def _required_checks(sim: Simulator, b: Body) -> Any:
    contexts = _need(b, "contexts", list)
    sim.require_checks(
        _need(b, "forge"), _need(b, "repo"), _need(b, "branch"), [str(c) for c in contexts]
    )
    return {"contexts": contexts}


async def _reviews(sim: Simulator, b: Body) -> Any:
    review = sim.submit_review(
        _need(b, "forge"),
        _need(b, "repo"),
        _need(b, "number", int),
        _need(b, "reviewer"),
        _need(b, "state"),
        commit_sha=_opt(b, "commit_sha", str),
        body=_opt(b, "body", str, ""),
    )
    return {"id": review.id, "state": review.state, "commit_id": review.commit_id}


async def _comments(sim: Simulator, b: Body) -> Any:
    comment = sim.add_comment(
        _need(b, "forge"),
        _need(b, "repo"),
        _need(b, "number", int),
        _need(b, "user"),
        _need(b, "body"),
    )
    return {"id": comment.id}


async def _mergeable(sim: Simulator, b: Body) -> Any:
    sim.set_mergeable(
        _need(b, "forge"), _need(b, "repo"), _need(b, "number", int), _need(b, "mergeable", bool)
    )
    return {"mergeable": b["mergeable"]}


async def _webhooks(sim: Simulator, b: Body) -> Any:
    sim.set_webhook(_need(b, "forge"), _need(b, "url"), _opt(b, "secret", str))
    return {"url": b["url"]}


async def _apps(sim: Simulator, b: Body) -> Any:
    app_id, pem = sim.create_github_app(_opt(b, "bot_login", str, "reviewbot[bot]"))
    return {"app_id": app_id, "private_key_pem": pem}


async def _installations(sim: Simulator, b: Body) -> Any:
    return {"installation_id": sim.install_app(_need(b, "app_id", int), _need(b, "repo"))}


async def _faults(sim: Simulator, b: Body) -> Any:
    rule = sim.faults.add(
        forge=_opt(b, "forge", str),
        method=_opt(b, "method", str),
        path=_opt(b, "path", str),
        status=_opt(b, "status", int),
        times=_opt(b, "times", int, 1),
        retry_after=_opt(b, "retry_after", (int, float)),
        delay=float(_opt(b, "delay", (int, float), 0.0)),
        timeout=_opt(b, "timeout", (bool, int, float), False),
        secondary_rate_limit=bool(b.get("secondary_rate_limit")),
        apply_then_fail=bool(b.get("apply_then_fail")),
    )
    return {"rule": len(sim.faults.rules) - 1, "path": rule.path}


async def _deliver(sim: Simulator, b: Body) -> Any:
    kind = _need(b, "kind")
    forge = _opt(b, "forge", str, "github")
    if kind == "pull_request":
        d = await sim.deliver_pull_request(
            forge, _need(b, "repo"), _need(b, "number", int), _opt(b, "action", str, "opened")
        )
    elif kind == "pull_request_review":
        d = await sim.deliver_pull_request_review(
            forge, _need(b, "repo"), _need(b, "number", int), _opt(b, "review_id", int)
        )
    elif kind == "status":
        d = await sim.deliver_status(forge, _need(b, "repo"), _opt(b, "status_id", int))
    elif kind == "check_run":
        d = await sim.deliver_check_run(
            _need(b, "repo"), _opt(b, "check_run_id", int), _opt(b, "action", str, "completed")
        )
    elif kind == "check_suite":
        d = await sim.deliver_check_suite(
            _need(b, "repo"), _need(b, "sha"), _opt(b, "action", str, "completed")
        )
    elif kind == "issue_comment":
        d = await sim.deliver_issue_comment(
            forge, _need(b, "repo"), _need(b, "number", int), _opt(b, "comment_id", int)
        )
    elif kind == "raw":
        d = await sim.deliver_raw(
            forge,
            _need(b, "event"),
            _need(b, "payload", dict),
            event_type=_opt(b, "event_type", str),
        )
    else:
        raise ScenarioError(f"unknown delivery kind {kind!r}")
    return delivery_summary(d)


async def _ci(sim: Simulator, b: Body) -> Any:
    conflicts = _opt(b, "conflicts", list, [])
    if not all(isinstance(g, list) and all(isinstance(p, str) for p in g) for g in conflicts):
        raise ScenarioError("conflicts: a list of lists of paths")
    config = sim.configure_ci(
        _need(b, "forge"),
        _need(b, "repo"),
        context=_opt(b, "context", str, "ci/test"),
        duration=float(_opt(b, "duration", (int, float), 600.0)),
        branches=[str(p) for p in _opt(b, "branches", list, ["*"])],
        failure_rate=float(_opt(b, "failure_rate", (int, float), 0.0)),
        flake_rate=float(_opt(b, "flake_rate", (int, float), 0.0)),
        conflicts=conflicts,
        seed=_opt(b, "seed", str, ""),
        since=_opt(b, "since", str),
        check_run=bool(b.get("check_run", True)),
        webhooks=bool(b.get("webhooks", True)),
    )
    return {
        "forge": config.forge,
        "repo": config.repo,
        "context": config.context,
        "duration": config.duration,
        "branches": config.branches,
        "since": config.since,
    }


async def _ci_retry(sim: Simulator, b: Body) -> Any:
    forge = _need(b, "forge")
    job = sim.ci.retry(forge, _need(b, "repo"), _commit(sim, b, forge))
    return {"sha": job.sha, "attempt": job.attempt, "due": job.due}


async def _clock(sim: Simulator, b: Body) -> Any:
    results = sim.advance(float(_need(b, "advance", (int, float))))
    return {
        "now": sim.now(),
        "finished": [
            {"sha": r.job.sha, "attempt": r.job.attempt, "state": r.state} for r in results
        ],
    }


POST_ACTIONS: dict[str, Action] = {
    "users": _users,
    "repos": _repos,
    "pulls": _pulls,
    "push": _push,
    "statuses": _statuses,
    "check-runs": _check_runs,
    "required-checks": _required_checks,
    "permissions": _permissions,
    "rulesets": _rulesets,
    "reviews": _reviews,
    "comments": _comments,
    "mergeable": _mergeable,
    "webhooks": _webhooks,
    "apps": _apps,
    "installations": _installations,
    "faults": _faults,
    "deliver": _deliver,
    "ci": _ci,
    "ci-retry": _ci_retry,
    "clock": _clock,
}


SIM_KEY = web.AppKey("sim", Simulator)


def _sim(request: web.Request) -> Simulator:
    return request.app[SIM_KEY]


def _error(status: int, code: str, detail: str) -> web.Response:
    return web.json_response({"error": code, "detail": detail}, status=status)


async def _post(request: web.Request) -> web.Response:
    action = POST_ACTIONS.get(request.match_info["action"])
    if action is None:
        return _error(404, "not_found", f"no control action {request.match_info['action']!r}")
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return _error(400, "bad_request", "body must be a JSON object")
    if not isinstance(body, dict):
        return _error(400, "bad_request", "body must be a JSON object")
    try:
        result = await action(_sim(request), body)
    except ScenarioError as exc:
        return _error(400, "bad_request", str(exc))
    return web.json_response(
        result, status=201 if request.match_info["action"] != "deliver" else 200
    )


async def _get_pull(request: web.Request) -> web.Response:
    m = request.match_info
    try:
        sim = _sim(request)
        pull = sim.pull(m["forge"], f"{m['owner']}/{m['name']}", int(m["number"]))
        mergeable = sim.pull_mergeable(sim.repo(pull.forge, pull.repo), pull)
    except (ScenarioError, ValueError) as exc:
        return _error(404, "not_found", str(exc))
    return web.json_response(pull_summary(pull, mergeable))


async def _get_requests(request: web.Request) -> web.Response:
    sim = _sim(request)
    forge = request.query.get("forge")
    records = [record_summary(r) for r in sim.requests if forge is None or r.forge == forge]
    return web.json_response(records)


async def _delete_requests(request: web.Request) -> web.Response:
    _sim(request).clear_requests()
    return web.Response(status=204)


async def _delete_faults(request: web.Request) -> web.Response:
    _sim(request).faults.clear()
    return web.Response(status=204)


async def _get_deliveries(request: web.Request) -> web.Response:
    return web.json_response([delivery_summary(d) for d in _sim(request).deliveries])


async def _health(request: web.Request) -> web.Response:
    sim = _sim(request)
    return web.json_response(
        {
            "ok": True,
            "github_api_url": sim.github_api_url,
            "gitea_url": sim.gitea_url,
            "repos": {f: sorted(r) for f, r in sim.repos.items()},
        }
    )


def add_control_routes(app: web.Application) -> None:
    app.router.add_get("/_sim", _health)
    app.router.add_get("/_sim/requests", _get_requests)
    app.router.add_delete("/_sim/requests", _delete_requests)
    app.router.add_delete("/_sim/faults", _delete_faults)
    app.router.add_get("/_sim/deliveries", _get_deliveries)
    app.router.add_get("/_sim/pulls/{forge}/{owner}/{name}/{number}", _get_pull)
    app.router.add_post("/_sim/{action}", _post)
