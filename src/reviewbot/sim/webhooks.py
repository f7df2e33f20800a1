"""Webhook deliveries: payloads shaped like the forges' own, signed as they sign, sent over HTTP."""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from dataclasses import replace
from typing import Any

import aiohttp

from reviewbot.sim.clock import forge_time
from reviewbot.sim.core import SimCore
from reviewbot.sim.errors import ScenarioError
from reviewbot.sim.git import ZERO_SHA
from reviewbot.sim.gitea_json import GiteaJson
from reviewbot.sim.github_json import GitHubJson
from reviewbot.sim.records import Delivery
from reviewbot.sim.state import RefMove, SimPull, SimRepo, SimReview

__all__ = ["Delivery"]  # where callers have always found it; it lives in records

GITHUB_USER_AGENT = "GitHub-Hookshot/sim"
GITEA_USER_AGENT = "Go-http-client/1.1"
SEND_TIMEOUT = 10.0

# Gitea's fine event type -> the coarse X-Gitea-Event value (modules/webhook/type.go).
GITEA_EVENTS = {
    "pull_request": "pull_request",
    "pull_request_sync": "pull_request",
    "pull_request_assign": "pull_request",
    "pull_request_label": "pull_request",
    "pull_request_milestone": "pull_request",
    "pull_request_review_request": "pull_request",
    "pull_request_review_approved": "pull_request_approved",
    "pull_request_review_rejected": "pull_request_rejected",
    "pull_request_review_comment": "pull_request_comment",
    "pull_request_comment": "issue_comment",
    "issue_comment": "issue_comment",
    "status": "status",
    "push": "push",
}
GITEA_REVIEW_TYPES = {
    "APPROVED": "pull_request_review_approved",
    "REQUEST_CHANGES": "pull_request_review_rejected",
    "COMMENT": "pull_request_review_comment",
}


def github_signature_headers(secret: str | None, body: bytes) -> dict[str, str]:
    """``X-Hub-Signature-256: sha256=<hex>`` and the legacy SHA-1 header; none without a secret."""
    if not secret:
        return {}
    key = secret.encode()
    return {
        "X-Hub-Signature-256": "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest(),
        "X-Hub-Signature": "sha1=" + hmac.new(key, body, hashlib.sha1).hexdigest(),
    }


def gitea_signature_headers(secret: str | None, body: bytes) -> dict[str, str]:
    """Gitea always sends the headers: empty signatures when the hook has no secret."""
    key = (secret or "").encode()
    sha256 = hmac.new(key, body, hashlib.sha256).hexdigest() if secret else ""
    sha1 = hmac.new(key, body, hashlib.sha1).hexdigest() if secret else ""
    return {
        "X-Gitea-Signature": sha256,
        "X-Gogs-Signature": sha256,
        "X-Hub-Signature-256": f"sha256={sha256}",
        "X-Hub-Signature": f"sha1={sha1}",
    }


def github_headers(event: str, delivery_id: str, secret: str | None, body: bytes) -> dict[str, str]:
    headers = {
        "Content-Type": "application/json",
        "User-Agent": GITHUB_USER_AGENT,
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery_id,
        "X-GitHub-Hook-ID": "1",
        "X-GitHub-Hook-Installation-Target-Type": "repository",
        "X-GitHub-Hook-Installation-Target-ID": "1",
    }
    headers.update(github_signature_headers(secret, body))
    return headers


def gitea_headers(
    event_type: str, delivery_id: str, secret: str | None, body: bytes
) -> dict[str, str]:
    event = GITEA_EVENTS.get(event_type, event_type)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": GITEA_USER_AGENT,
        "X-Gitea-Delivery": delivery_id,
        "X-Gitea-Event": event,
        "X-Gitea-Event-Type": event_type,
        "X-Gitea-Hook-Installation-Target-Type": "repository",
        "X-Gogs-Delivery": delivery_id,
        "X-Gogs-Event": event,
        "X-Gogs-Event-Type": event_type,
        "X-GitHub-Delivery": delivery_id,
        "X-GitHub-Event": event,
        "X-GitHub-Event-Type": event_type,
        "X-GitHub-Hook-Installation-Target-Type": "repository",
    }
    headers.update(gitea_signature_headers(secret, body))
    return headers


def encode(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, indent=2).encode()


# ---------------------------------------------------------------------- GitHub payloads
class GitHubPayloads:
    def __init__(self, sim: SimCore) -> None:
        self.sim = sim
        self.json = GitHubJson(sim)

    def _envelope(self, repo: SimRepo, sender: str) -> dict[str, Any]:
        body: dict[str, Any] = {
            "repository": self.json.repository(repo),
            "sender": self.json.user(sender),
        }
        for installation in self.sim.installations.values():
            if repo.full_name.lower() in installation.repos:
                body["installation"] = self.json.installation_lite(installation)
                break
        return body

    def pull_request(
        self, repo: SimRepo, pull: SimPull, action: str, sender: str, before: str | None = None
    ) -> dict[str, Any]:
        payload: dict[str, Any] = {"action": action, "number": pull.number}
        if action == "synchronize":
            previous = pull.commits[-2] if len(pull.commits) > 1 else pull.base_sha
            payload["before"] = before or previous
            payload["after"] = pull.head_sha
        payload["pull_request"] = self.json.pull(repo, pull)
        payload.update(self._envelope(repo, sender))
        return payload

    def pull_request_review(
        self, repo: SimRepo, pull: SimPull, review: SimReview, action: str
    ) -> dict[str, Any]:
        rendered = self.json.review(repo, pull, review)
        rendered["state"] = review.state.lower()
        rendered.setdefault("submitted_at", None)
        rendered["body"] = review.body or None
        payload: dict[str, Any] = {
            "action": action,
            "review": rendered,
            "pull_request": self.json.pull(repo, pull, simple=True),
        }
        payload.update(self._envelope(repo, review.user))
        return payload

    def status(self, repo: SimRepo, status_id: int) -> dict[str, Any]:
        status = next((s for s in repo.statuses if s.id == status_id), None)
        if status is None:
            raise ScenarioError(f"no status {status_id}")
        commit = repo.commits.get(status.sha)
        rendered_commit = (
            self.json.commit(repo, commit) if commit is not None else {"sha": status.sha}
        )
        rendered_commit.pop("node_id", None)
        commit_body: dict[str, Any] = {
            "sha": status.sha,
            "node_id": f"C_{status.sha[:12]}",
            "commit": rendered_commit.get("commit", {}),
            "url": rendered_commit.get("url", ""),
            "html_url": rendered_commit.get("html_url", ""),
            "comments_url": rendered_commit.get("comments_url", ""),
            "author": rendered_commit.get("author"),
            "committer": rendered_commit.get("committer"),
            "parents": rendered_commit.get("parents", []),
        }
        branches = [
            {
                "name": name,
                "commit": {
                    "sha": sha,
                    "url": f"{self.json.api}/repos/{repo.full_name}/commits/{sha}",
                },
                "protected": name in repo.protections,
            }
            for name, sha in repo.branches.items()
            if sha == status.sha
        ]
        payload: dict[str, Any] = {
            "id": status.id,
            "sha": status.sha,
            "name": repo.full_name,
            "target_url": status.target_url,
            "avatar_url": None,
            "context": status.context,
            "description": status.description,
            "state": status.state,
            "commit": commit_body,
            "branches": branches,
            "created_at": self.json.simple_status(repo, status)["created_at"],
            "updated_at": self.json.simple_status(repo, status)["updated_at"],
        }
        payload.update(self._envelope(repo, status.creator))
        return payload

    def _suite(self, repo: SimRepo, suite_id: int) -> dict[str, Any]:
        suite = next(s for s in repo.check_suites if s.id == suite_id)
        return self.json.check_suite(repo, suite)

    def check_run(self, repo: SimRepo, run_id: int, action: str) -> dict[str, Any]:
        run = next((r for r in repo.check_runs if r.id == run_id), None)
        if run is None:
            raise ScenarioError(f"no check run {run_id}")
        rendered = self.json.check_run(repo, run)
        suite = self._suite(repo, run.suite_id)
        for key in (
            "repository",
            "head_commit",
            "latest_check_runs_count",
            "check_runs_url",
            "rerequestable",
            "runs_rerequestable",
        ):
            suite.pop(key, None)
        rendered["check_suite"] = suite
        if rendered["details_url"] is None:
            rendered["details_url"] = rendered["html_url"]
        payload: dict[str, Any] = {"action": action, "check_run": rendered}
        payload.update(self._envelope(repo, repo.owner))
        return payload

    def check_suite(self, repo: SimRepo, sha: str, action: str) -> dict[str, Any]:
        suite = next((s for s in repo.check_suites if s.sha == sha), None)
        if suite is None:
            raise ScenarioError(f"no check suite for {sha}")
        rendered = self.json.check_suite(repo, suite)
        rendered.pop("repository", None)
        payload: dict[str, Any] = {"action": action, "check_suite": rendered}
        payload.update(self._envelope(repo, repo.owner))
        return payload

    def issue_comment(
        self, repo: SimRepo, pull: SimPull, comment_id: int, action: str
    ) -> dict[str, Any]:
        comment = next((c for c in pull.comments if c.id == comment_id), None)
        if comment is None:
            raise ScenarioError(f"no comment {comment_id}")
        api = f"{self.json.api}/repos/{repo.full_name}"
        pr = self.json.pull(repo, pull, simple=True)
        issue = {
            "url": f"{api}/issues/{pull.number}",
            "repository_url": api,
            "labels_url": f"{api}/issues/{pull.number}/labels{{/name}}",
            "comments_url": f"{api}/issues/{pull.number}/comments",
            "events_url": f"{api}/issues/{pull.number}/events",
            "html_url": pr["html_url"],
            "id": pull.id,
            "node_id": pr["node_id"],
            "number": pull.number,
            "title": pull.title,
            "user": pr["user"],
            "labels": pr["labels"],
            "state": pull.state,
            "locked": False,
            "assignee": None,
            "assignees": [],
            "milestone": None,
            "comments": len(pull.comments),
            "created_at": pr["created_at"],
            "updated_at": pr["updated_at"],
            "closed_at": pr["closed_at"],
            "author_association": pr["author_association"],
            "active_lock_reason": None,
            "draft": pull.draft,
            "pull_request": {
                "url": pr["url"],
                "html_url": pr["html_url"],
                "diff_url": pr["diff_url"],
                "patch_url": pr["patch_url"],
                "merged_at": pr["merged_at"],
            },
            "body": pull.body or None,
            "reactions": self.json.issue_comment(repo, comment)["reactions"],
            "performed_via_github_app": None,
        }
        payload: dict[str, Any] = {
            "action": action,
            "issue": issue,
            "comment": self.json.issue_comment(repo, comment),
        }
        payload.update(self._envelope(repo, comment.user))
        return payload


# ---------------------------------------------------------------------- Gitea payloads
class GiteaPayloads:
    """Gitea's payload structs reuse its API structs (``PullRequestPayload`` etc.)."""

    def __init__(self, sim: SimCore) -> None:
        self.sim = sim
        self.json = GiteaJson(sim)

    def pull_request(
        self,
        repo: SimRepo,
        pull: SimPull,
        action: str,
        sender: str,
        review: SimReview | None = None,
    ) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "action": action,
            "number": pull.number,
            "pull_request": self.json.pull(repo, pull),
            "requested_reviewer": None,
            "repository": self.json.repository(repo),
            "sender": self.json.user(sender),
            "commit_id": "",
            "review": None,
        }
        if review is not None:
            payload["review"] = {"type": GITEA_REVIEW_TYPES[review.state], "content": review.body}
        return payload

    def status(self, repo: SimRepo, status_id: int) -> dict[str, Any]:
        status = next((s for s in repo.statuses if s.id == status_id), None)
        if status is None:
            raise ScenarioError(f"no status {status_id}")
        commit = repo.commits.get(status.sha)
        rendered = self.json.status(repo, status)
        return {
            "commit": self.json.payload_commit(repo, commit) if commit is not None else None,
            "context": status.context,
            "created_at": rendered["created_at"],
            "description": rendered["description"],
            "id": status.id,
            "repository": self.json.repository(repo),
            "sender": self.json.user(status.creator),
            "sha": status.sha,
            "state": status.state,
            "target_url": rendered["target_url"],
            "updated_at": rendered["updated_at"],
        }

    def issue_comment(
        self, repo: SimRepo, pull: SimPull, comment_id: int, action: str
    ) -> dict[str, Any]:
        comment = next((c for c in pull.comments if c.id == comment_id), None)
        if comment is None:
            raise ScenarioError(f"no comment {comment_id}")
        rendered_pull = self.json.pull(repo, pull)
        issue = {
            "id": pull.id,
            "url": f"{self.json.api}/repos/{repo.full_name}/issues/{pull.number}",
            "html_url": rendered_pull["html_url"],
            "number": pull.number,
            "user": rendered_pull["user"],
            "original_author": "",
            "original_author_id": 0,
            "title": pull.title,
            "body": pull.body,
            "ref": "",
            "assets": [],
            "labels": rendered_pull["labels"],
            "milestone": None,
            "assignee": None,
            "assignees": None,
            "state": pull.state,
            "is_locked": False,
            "comments": len(pull.comments),
            "created_at": rendered_pull["created_at"],
            "updated_at": rendered_pull["updated_at"],
            "closed_at": rendered_pull["closed_at"],
            "due_date": None,
            "pull_request": {
                "merged": pull.merged,
                "merged_at": rendered_pull["merged_at"],
                "draft": pull.draft,
                "html_url": rendered_pull["html_url"],
            },
            "repository": {
                "id": repo.id,
                "name": repo.name,
                "owner": repo.owner,
                "full_name": repo.full_name,
            },
            "pin_order": 0,
        }
        return {
            "action": action,
            "issue": issue,
            "pull_request": rendered_pull,
            "comment": self.json.comment(repo, comment),
            "repository": self.json.repository(repo),
            "sender": self.json.user(comment.user),
            "is_pull": True,
        }


# ---------------------------------------------------------------------- sending
def _target(sim: SimCore, forge: str) -> tuple[str, str | None]:
    target = sim.webhooks.get(forge)
    if target is None:
        raise ScenarioError(f"no webhook configured for {forge} (call set_webhook first)")
    return target.url, target.secret


async def _post(delivery: Delivery) -> Delivery:
    timeout = aiohttp.ClientTimeout(total=SEND_TIMEOUT)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.post(delivery.url, data=delivery.body, headers=delivery.headers) as response,
        ):
            delivery.status = response.status
            delivery.response_body = await response.read()
    except (aiohttp.ClientError, TimeoutError) as exc:
        # Neither forge retries a failed delivery: record the failure and move on.
        delivery.error = f"{type(exc).__name__}: {exc}"
    return delivery


async def send(
    sim: SimCore,
    forge: str,
    event: str,
    payload: dict[str, Any] | bytes,
    *,
    event_type: str | None = None,
    headers_override: dict[str, str] | None = None,
    delivery_id: str | None = None,
) -> Delivery:
    url, secret = _target(sim, forge)
    body = payload if isinstance(payload, bytes) else encode(payload)
    ident = delivery_id or str(uuid.uuid4())
    if forge == "github":
        headers = github_headers(event, ident, secret, body)
        kind = event
    else:
        kind = event_type or event
        headers = gitea_headers(kind, ident, secret, body)
    for name, value in (headers_override or {}).items():
        for existing in [h for h in headers if h.lower() == name.lower()]:
            del headers[existing]
        headers[name] = value
    delivery = Delivery(
        forge=forge,
        event=headers.get("X-GitHub-Event", event)
        if forge == "github"
        else GITEA_EVENTS.get(kind, kind),
        event_type=kind,
        id=ident,
        url=url,
        headers=headers,
        body=body,
        payload=payload if isinstance(payload, dict) else {},
    )
    sim.deliveries.append(delivery)
    return await _post(delivery)


async def redeliver(sim: SimCore, delivery: Delivery) -> Delivery:
    """GitHub keeps the delivery id on redelivery; Gitea's manual replay gets a new one."""
    if delivery.forge == "github":
        again = replace(
            delivery, status=None, response_body=b"", error=None, headers=dict(delivery.headers)
        )
        sim.deliveries.append(again)
        return await _post(again)
    ident = str(uuid.uuid4())
    headers = dict(delivery.headers)
    for key in ("X-Gitea-Delivery", "X-Gogs-Delivery", "X-GitHub-Delivery"):
        if key in headers:
            headers[key] = ident
    again = replace(delivery, id=ident, headers=headers, status=None, response_body=b"", error=None)
    sim.deliveries.append(again)
    return await _post(again)


async def deliver_pull_request(
    sim: SimCore,
    forge: str,
    repo: str,
    number: int,
    action: str,
    sender: str | None = None,
    before: str | None = None,
) -> Delivery:
    state = sim.repo(forge, repo)
    pull = sim.pull(forge, repo, number)
    who = sender or pull.author
    if forge == "github":
        payload = GitHubPayloads(sim).pull_request(state, pull, action, who, before)
        return await send(sim, forge, "pull_request", payload)
    gitea_action, event_type = {
        "synchronize": ("synchronized", "pull_request_sync"),
        "synchronized": ("synchronized", "pull_request_sync"),
        "label_updated": ("label_updated", "pull_request_label"),
        "label_cleared": ("label_cleared", "pull_request_label"),
    }.get(action, (action, "pull_request"))
    payload = GiteaPayloads(sim).pull_request(state, pull, gitea_action, who)
    return await send(sim, forge, "pull_request", payload, event_type=event_type)


async def deliver_pull_request_review(
    sim: SimCore,
    forge: str,
    repo: str,
    number: int,
    review_id: int | None,
    action: str = "submitted",
) -> Delivery:
    state = sim.repo(forge, repo)
    pull = sim.pull(forge, repo, number)
    submitted = [r for r in pull.reviews if r.state != "PENDING"]
    review = (
        next((r for r in pull.reviews if r.id == review_id), None)
        if review_id is not None
        else (submitted[-1] if submitted else None)
    )
    if review is None:
        raise ScenarioError(f"no review to deliver on {forge}:{repo}#{number}")
    if forge == "github":
        payload = GitHubPayloads(sim).pull_request_review(state, pull, review, action)
        return await send(sim, forge, "pull_request_review", payload)
    event_type = GITEA_REVIEW_TYPES.get(review.state)
    if event_type is None:
        raise ScenarioError(f"Gitea sends no webhook for a {review.state} review")
    payload = GiteaPayloads(sim).pull_request(state, pull, "reviewed", review.user, review)
    return await send(sim, forge, event_type, payload, event_type=event_type)


async def deliver_status(sim: SimCore, forge: str, repo: str, status_id: int | None) -> Delivery:
    state = sim.repo(forge, repo)
    if status_id is None:
        if not state.statuses:
            raise ScenarioError(f"no status to deliver in {forge}:{repo}")
        status_id = state.statuses[-1].id
    if forge == "github":
        return await send(sim, forge, "status", GitHubPayloads(sim).status(state, status_id))
    payload = GiteaPayloads(sim).status(state, status_id)
    return await send(sim, forge, "status", payload, event_type="status")


async def deliver_check_run(sim: SimCore, repo: str, run_id: int | None, action: str) -> Delivery:
    state = sim.repo("github", repo)
    if run_id is None:
        if not state.check_runs:
            raise ScenarioError(f"no check run to deliver in github:{repo}")
        run_id = state.check_runs[-1].id
    return await send(
        sim, "github", "check_run", GitHubPayloads(sim).check_run(state, run_id, action)
    )


async def deliver_check_suite(sim: SimCore, repo: str, sha: str, action: str) -> Delivery:
    state = sim.repo("github", repo)
    payload = GitHubPayloads(sim).check_suite(state, sha, action)
    return await send(sim, "github", "check_suite", payload)


async def deliver_issue_comment(
    sim: SimCore,
    forge: str,
    repo: str,
    number: int,
    comment_id: int | None,
    action: str = "created",
) -> Delivery:
    state = sim.repo(forge, repo)
    pull = sim.pull(forge, repo, number)
    if comment_id is None:
        if not pull.comments:
            raise ScenarioError(f"no comment to deliver on {forge}:{repo}#{number}")
        comment_id = pull.comments[-1].id
    if forge == "github":
        payload = GitHubPayloads(sim).issue_comment(state, pull, comment_id, action)
        return await send(sim, forge, "issue_comment", payload)
    payload = GiteaPayloads(sim).issue_comment(state, pull, comment_id, action)
    return await send(sim, forge, "issue_comment", payload, event_type="pull_request_comment")


async def deliver_raw(
    sim: SimCore,
    forge: str,
    event: str,
    payload: dict[str, Any] | bytes,
    *,
    headers_override: dict[str, str] | None = None,
    event_type: str | None = None,
) -> Delivery:
    return await send(
        sim,
        forge,
        event,
        payload,
        event_type=event_type or event,
        headers_override=headers_override,
    )


# ---------------------------------------------------------------------- push
def _push_commits(sim: SimCore, repo: SimRepo, move: RefMove) -> list[dict[str, Any]]:
    """The commits a push brought (oldest first; GitHub and Gitea list at most 20)."""
    git = sim.git_of(repo)
    if git is None or move.after == ZERO_SHA or not sim.is_real(repo, move.after):
        return []
    if move.before != ZERO_SHA and sim.is_real(repo, move.before):
        shas = git.commits_between(move.before, move.after)
    else:
        shas = [move.after]
    rows: list[dict[str, Any]] = []
    for sha in shas[-20:]:
        commit = sim.record_git_commit(repo, sha)
        parent = commit.parents[0] if commit.parents else None
        changes = git.file_statuses(parent, sha) if parent else []
        user = sim.user(repo.forge, commit.author)
        person = {"name": user.full_name, "email": user.email, "username": user.login}
        rows.append(
            {
                "id": sha,
                "tree_id": commit.tree_sha,
                "distinct": True,
                "message": commit.message,
                "timestamp": forge_time(commit.created_at),
                "url": f"{sim.base_url}/web/{repo.full_name}/commit/{sha}",
                "author": person,
                "committer": person,
                "added": [p for s, p in changes if s == "A"],
                "removed": [p for s, p in changes if s == "D"],
                "modified": [p for s, p in changes if s not in ("A", "D")],
            }
        )
    return rows


def push_payload(sim: SimCore, move: RefMove) -> dict[str, Any]:
    """The ``push`` event: GitHub's ("Webhook events and payloads": push) or Gitea's
    (``modules/structs/hook.go`` ``PushPayload``)."""
    repo = sim.repo(move.forge, move.repo)
    commits = _push_commits(sim, repo, move)
    head = commits[-1] if commits else None
    pusher = sim.user(repo.forge, move.pusher)
    if repo.forge == "github":
        gh = GitHubPayloads(sim)
        for row in commits:
            row["url"] = f"{gh.json.web}/{repo.full_name}/commit/{row['id']}"
        payload: dict[str, Any] = {
            "ref": move.ref,
            "before": move.before,
            "after": move.after,
            "created": move.before == ZERO_SHA,
            "deleted": move.after == ZERO_SHA,
            "forced": move.forced,
            "base_ref": None,
            "compare": f"{gh.json.web}/{repo.full_name}/compare/"
            f"{move.before[:12]}...{move.after[:12]}",
            "commits": commits,
            "head_commit": head,
            "pusher": {"name": pusher.login, "email": pusher.email},
        }
        payload.update(gh._envelope(repo, move.pusher))
        return payload
    gt = GiteaJson(sim)
    for row in commits:
        row.pop("tree_id")
        row.pop("distinct")
        row["url"] = f"{gt.web}/{repo.full_name}/commit/{row['id']}"
        row["verification"] = None
    return {
        "ref": move.ref,
        "before": move.before,
        "after": move.after,
        "compare_url": f"{gt.web}/{repo.full_name}/compare/{move.before}...{move.after}",
        "commits": commits,
        "total_commits": len(commits),
        "head_commit": head,
        "repository": gt.repository(repo),
        "pusher": gt.user(move.pusher),
        "sender": gt.user(move.pusher),
    }


async def deliver_push(sim: SimCore, move: RefMove) -> Delivery:
    return await send(sim, move.forge, "push", push_payload(sim, move), event_type="push")
