"""The HTTP server: webhooks and the API in front of the delivery journal and the worker pool.

The acknowledgement path of a forge webhook does only what cannot wait: bound the body,
check the HMAC over the raw bytes, take the delivery id from the headers, and commit the
delivery to the journal (group commit, ``synchronous=FULL``). Parsing, forge reads and the
gate run in the worker pool.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from reviewbot.config import Settings
from reviewbot.core.models import Trigger
from reviewbot.core.reasons import ReasonCode
from reviewbot.forges.base import Forge
from reviewbot.ingress.api import api_trigger, parse_review_request
from reviewbot.ingress.errors import TriggerError
from reviewbot.ingress.headers import (
    GITEA_EVENT_HEADERS,
    GITEA_EVENT_TYPE_HEADERS,
    GITHUB_EVENT,
    KEPT_HEADERS,
    first_header,
    forge_of_headers,
)
from reviewbot.ingress.identity import delivery_identity
from reviewbot.ingress.signatures import is_form, verify_delivery
from reviewbot.runtime.gate_runner import (
    Clock,
    EligibleHook,
    GateRunner,
    iso,
    parse_stored_delivery,
    utc_now,
)
from reviewbot.runtime.tools import api_token_callers, register_tool_routes
from reviewbot.runtime.workers import WorkerPool
from reviewbot.store import decisions as decision_store
from reviewbot.store import journal as journal_store
from reviewbot.store.database import SQLiteDatabase
from reviewbot.store.journal import GroupCommitJournal, NewDelivery, StoredDelivery
from reviewbot.store.reviews import ReviewStore
from reviewbot.store.tokens import TokenInfo, lookup_token
from reviewbot.workflowdb.paths import WorkflowPaths

log = logging.getLogger(__name__)

FORGE_SOURCES = ("github", "gitea")


class ApiError(Exception):
    """An HTTP error with the JSON body ``{"error": code, "detail": detail}``."""

    def __init__(self, status: int, code: str, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.extra = extra


def error_response(status: int, code: str, detail: str, **extra: Any) -> web.Response:
    return web.json_response({"error": code, "detail": detail, **extra}, status=status)


class Metrics:
    """Counters of what the server accepted and refused (a fresh registry per application)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.refused = Counter(
            "reviewbot_deliveries_refused",
            "Deliveries refused before anything was stored",
            ["source", "reason"],
            registry=self.registry,
        )
        self.accepted = Counter(
            "reviewbot_deliveries_accepted",
            "Deliveries committed to the journal",
            ["source"],
            registry=self.registry,
        )
        self.duplicates = Counter(
            "reviewbot_deliveries_duplicate",
            "Deliveries whose id was already in the journal",
            ["source"],
            registry=self.registry,
        )


@dataclass
class ServerState:
    settings: Settings
    clock: Clock
    metrics: Metrics
    secrets: dict[str, bytes | None]
    forges: dict[str, Forge]
    on_eligible: EligibleHook | None
    run_workers: bool
    shutdown_grace_s: float
    db: SQLiteDatabase | None = None
    journal: GroupCommitJournal | None = None
    runner: GateRunner | None = None
    pool: WorkerPool | None = None
    owns_db: bool = False
    owns_forges: bool = False
    extra_cleanup: list[Callable[[], Awaitable[None]]] = field(default_factory=list)


STATE = web.AppKey("reviewbot", ServerState)


def create_app(
    settings: Settings,
    *,
    forges: Mapping[str, Forge] | None = None,
    db: SQLiteDatabase | None = None,
    on_eligible: EligibleHook | None = None,
    clock: Clock = utc_now,
    run_workers: bool = True,
    shutdown_grace_s: float = 10.0,
) -> web.Application:
    """The application. ``forges`` defaults to the configured ones (``make_forge``);
    ``run_workers=False`` only journals (deliveries wait for a process with workers)."""
    app = web.Application(client_max_size=settings.max_body_bytes, middlewares=[_errors_middleware])
    app[STATE] = ServerState(
        settings=settings,
        clock=clock,
        metrics=Metrics(),
        secrets={
            "github": _secret(settings.github.webhook_secret),
            "gitea": _secret(settings.gitea.webhook_secret),
        },
        forges=dict(forges) if forges is not None else {},
        on_eligible=on_eligible,
        run_workers=run_workers,
        shutdown_grace_s=shutdown_grace_s,
        db=db,
        owns_forges=forges is None,
    )
    app.router.add_post("/webhooks/github", github_webhook)
    app.router.add_post("/webhooks/gitea", gitea_webhook)
    app.router.add_post("/webhooks/crew", crew_webhook)
    app.router.add_post("/api/v1/reviews", api_reviews)
    app.router.add_get("/api/v1/deliveries/{delivery_id}", api_delivery)
    app.router.add_get("/api/v1/decisions", api_decisions)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    register_tool_routes(  # app[SESSIONS]: the sessions of runs
        app,
        audit=lambda: app[STATE].db,
        api_tokens=api_token_callers(settings, lambda: app[STATE].db),
    )
    app.on_startup.append(_startup)
    app.on_cleanup.append(_cleanup)
    from reviewbot.api.leases import register_lease_api  # it imports this module

    register_lease_api(app)  # workers, leases, merges; started after _startup
    return app


def _secret(value: Any) -> bytes | None:
    if value is None:
        return None
    text = value.get_secret_value()
    return text.encode("utf-8") if text else None


# --- start and stop ----------------------------------------------------------------------


def configured_forges(settings: Settings) -> dict[str, Forge]:
    from reviewbot.forges.factory import make_forge

    found: dict[str, Forge] = {}
    if settings.github.configured:
        found["github"] = make_forge(settings, "github")
    if settings.gitea.configured:
        found["gitea"] = make_forge(settings, "gitea")
    return found


async def _startup(app: web.Application) -> None:
    st = app[STATE]
    if st.db is None:
        from reviewbot.store.bootstrap import open_store

        st.db = await asyncio.to_thread(open_store, st.settings)
        st.owns_db = True
    if st.owns_forges:
        st.forges = configured_forges(st.settings)
    for forge in FORGE_SOURCES:
        # Only a configured forge lacks its secret; the rest get "no forge configured".
        if st.secrets[forge] is None and forge in st.forges:
            log.warning(
                "no webhook secret for %s: /webhooks/%s refuses every delivery "
                "(set REVIEWBOT_%s__WEBHOOK_SECRET)",
                forge,
                forge,
                forge.upper(),
            )
    st.runner = GateRunner(
        st.db, st.settings, st.forges, clock=st.clock, on_eligible=st.on_eligible
    )
    # With workers running, their connections checkpoint the WAL (they commit after every
    # batch); the journal writer then never pays for a checkpoint on an acknowledgement.
    st.journal = GroupCommitJournal(
        WorkflowPaths.from_settings(st.settings).db_file, checkpoints=not st.run_workers
    ).start()
    if st.run_workers:
        st.pool = WorkerPool(
            st.db,
            st.runner.process_batch,
            size=st.settings.workers,
            ingress_busy=st.journal.busy,
        )
        st.journal.on_commit = st.pool.submit
        await st.pool.start()


async def _cleanup(app: web.Application) -> None:
    st = app[STATE]
    if st.pool is not None:
        await st.pool.stop(st.shutdown_grace_s)
    if st.runner is not None:
        await st.runner.aclose()
    if st.journal is not None:
        await asyncio.to_thread(st.journal.close)
    if st.owns_forges:
        for forge in st.forges.values():
            try:
                await forge.aclose()
            except Exception:
                log.exception("closing the %s client failed", forge.name)
    for extra in st.extra_cleanup:
        await extra()
    if st.owns_db and st.db is not None:
        st.db.close()


# --- middleware --------------------------------------------------------------------------

_STATUS_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "body_too_large",
}


@web.middleware
async def _errors_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Every error answers ``{"error": CODE, "detail": TEXT}``; nothing leaks a traceback."""
    try:
        return await handler(request)
    except ApiError as exc:
        return error_response(exc.status, exc.code, exc.detail, **exc.extra)
    except web.HTTPRequestEntityTooLarge:
        return _too_large(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = _STATUS_CODES.get(exc.status, "http_error")
        return error_response(exc.status, code, exc.reason)
    except (asyncio.CancelledError, ConnectionResetError):
        raise
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.path)
        return error_response(500, "internal_error", "the server failed; see its log")


def _too_large(request: web.Request) -> web.Response:
    st = request.app[STATE]
    st.metrics.refused.labels(_source_of(request), "too_large").inc()
    return error_response(
        413,
        "body_too_large",
        f"the body is larger than the limit of {st.settings.max_body_bytes} bytes",
    )


def _source_of(request: web.Request) -> str:
    return request.path.rstrip("/").rsplit("/", 1)[-1]


# --- forge webhooks: the acknowledgement path --------------------------------------------


async def github_webhook(request: web.Request) -> web.Response:
    return await _forge_webhook(request, "github")


async def gitea_webhook(request: web.Request) -> web.Response:
    return await _forge_webhook(request, "gitea")


async def _read_body(request: web.Request) -> bytes:
    limit = request.app[STATE].settings.max_body_bytes
    length = request.content_length
    if length is not None and length > limit:
        raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=length)
    return await request.read()  # client_max_size bounds a body without a length too


def _kept(headers: Mapping[str, str]) -> dict[str, str]:
    """The headers a journal keeps; aiohttp's headers are already case-insensitive."""
    return {name: value for name in KEPT_HEADERS if (value := headers.get(name)) is not None}


def event_of(forge: str, headers: Mapping[str, str]) -> str:
    """The event name the forge put in its headers (Gitea: the fine one)."""
    if forge == "github":
        event = headers.get(GITHUB_EVENT)
    else:
        event = first_header(headers, (*GITEA_EVENT_TYPE_HEADERS, *GITEA_EVENT_HEADERS))
    return (event or "").strip()[:100]


def looks_like_json_object(body: bytes, content_type: str | None) -> bool:
    """A cheap shape check (no parse): a JSON object starts with ``{`` and ends with ``}``.

    It catches truncated and non-JSON bodies at once; anything subtler is found by the
    worker's parse and recorded the same way.
    """
    if is_form(content_type):
        return body.startswith(b"payload=")
    text = body.strip()
    return text.startswith(b"{") and text.endswith(b"}")


async def _forge_webhook(request: web.Request, forge: str) -> web.Response:
    st = request.app[STATE]
    sender = forge_of_headers(request.headers)
    if sender is not None and sender != forge:
        # Before the signature: the other forge's secret would only say "wrong signature".
        st.metrics.refused.labels(forge, "wrong_endpoint").inc()
        raise ApiError(
            400,
            ReasonCode.WRONG_ENDPOINT.value,
            f"this is a {sender} webhook sent to /webhooks/{forge}; point it at /webhooks/{sender}",
        )
    secret = st.secrets[forge]
    if secret is None:
        st.metrics.refused.labels(forge, "no_secret").inc()
        raise ApiError(
            401,
            "signature_invalid",
            f"no webhook secret is configured for {forge}, so every delivery is refused "
            f"(set REVIEWBOT_{forge.upper()}__WEBHOOK_SECRET)",
        )
    body = await _read_body(request)
    headers = request.headers
    if not verify_delivery(forge, secret, headers, body):
        st.metrics.refused.labels(forge, "bad_signature").inc()
        raise ApiError(401, "signature_invalid", "missing, empty or wrong webhook signature")
    delivery_id = delivery_identity(forge, headers, body) or ""
    event = event_of(forge, headers)
    assert st.journal is not None
    new = await st.journal.append(
        NewDelivery(
            delivery_id=delivery_id,
            source=forge,
            body=body,
            received_at=iso(st.clock()),
            forge=forge,
            event=event or None,
            headers=_kept(headers),
        )
    )
    if not new:
        st.metrics.duplicates.labels(forge).inc()
        return web.json_response({"delivery_id": delivery_id, "status": "duplicate"}, status=200)
    st.metrics.accepted.labels(forge).inc()
    if not looks_like_json_object(body, headers.get("Content-Type")):
        # Stored all the same: the worker records delivery_unresolved with the parse error.
        raise ApiError(
            400,
            "unparseable",
            "the body is not a JSON object; recorded as delivery_unresolved",
            delivery_id=delivery_id,
        )
    status = 200 if event == "ping" else 202
    return web.json_response({"delivery_id": delivery_id, "status": "queued"}, status=status)


# --- bearer tokens -----------------------------------------------------------------------


def authenticate(request: web.Request, scope: str) -> TokenInfo:
    """The calling token, which must be active and hold ``scope`` (401 / 403 otherwise)."""
    st = request.app[STATE]
    auth = request.headers.get("Authorization", "")
    kind, _, token = auth.partition(" ")
    if kind.lower() != "bearer" or not token.strip():
        raise ApiError(401, "unauthorized", "send Authorization: Bearer <token>")
    assert st.db is not None
    info = lookup_token(st.db, token.strip())
    if info is None:
        raise ApiError(401, "unauthorized", "unknown token")
    if not info.active:
        raise ApiError(401, "unauthorized", f"token {info.name!r} was revoked")
    if scope not in info.scopes:
        raise ApiError(
            403,
            "missing_scope",
            f"this call needs scope {scope!r}; token {info.name!r} has "
            f"{', '.join(info.scopes) or 'none'}",
            scope=scope,
        )
    return info


def check_binding(info: TokenInfo, forge: str | None, repo: str | None) -> None:
    if not info.allows_repo(forge, repo):
        target = f"{forge}:{repo}" if forge and repo else "an unnamed repository"
        raise ApiError(
            403,
            "repo_not_allowed",
            f"token {info.name!r} is bound to {info.repo}, not {target}",
        )


async def _journal_and_answer(
    request: web.Request,
    delivery: NewDelivery,
    trigger: Trigger | None,
    problem: TriggerError | None,
) -> web.Response:
    st = request.app[STATE]
    assert st.journal is not None
    new = await st.journal.append(delivery)
    if not new:
        st.metrics.duplicates.labels(delivery.source).inc()
        return web.json_response(
            {"delivery_id": delivery.delivery_id, "status": "duplicate"}, status=200
        )
    st.metrics.accepted.labels(delivery.source).inc()
    if problem is not None:
        raise ApiError(400, "delivery_unresolved", problem.detail, delivery_id=delivery.delivery_id)
    return web.json_response({"delivery_id": delivery.delivery_id, "status": "queued"}, status=202)


def _preview(
    delivery: NewDelivery, configured_forges: tuple[str, ...]
) -> tuple[Trigger | None, TriggerError | None]:
    """Parse a (small, authenticated) Crew or API body now, to answer with its problem."""
    stored = StoredDelivery(
        delivery_id=delivery.delivery_id,
        source=delivery.source,
        forge=delivery.forge,
        event=delivery.event,
        headers=dict(delivery.headers),
        body=delivery.body,
        received_at=delivery.received_at,
        status=journal_store.QUEUED,
        attempts=0,
        error=None,
        finished_at=None,
    )
    try:
        return parse_stored_delivery(stored, configured_forges), None
    except TriggerError as exc:
        return None, exc


# --- Crew and API entry paths ------------------------------------------------------------


async def crew_webhook(request: web.Request) -> web.Response:
    st = request.app[STATE]
    info = authenticate(request, "review")
    body = await _read_body(request)
    delivery_id = delivery_identity("crew", request.headers, body) or ""
    delivery = NewDelivery(
        delivery_id=delivery_id,
        source="crew",
        body=body,
        received_at=iso(st.clock()),
        event="crew",
        headers={"Content-Type": request.headers.get("Content-Type", "")},
    )
    trigger, problem = _preview(delivery, tuple(st.forges))
    if trigger is not None:
        check_binding(info, trigger.forge, trigger.repo_full_name)
    elif info.repo is not None:
        raise ApiError(
            403,
            "repo_not_allowed",
            f"token {info.name!r} is bound to {info.repo} and the delivery names no "
            f"readable repository: {problem.detail if problem else ''}",
        )
    return await _journal_and_answer(request, delivery, trigger, problem)


async def api_reviews(request: web.Request) -> web.Response:
    """A review requested by an agent or a script: validated now, gated by a worker."""
    st = request.app[STATE]
    info = authenticate(request, "review")
    body = await _read_body(request)
    delivery_id = f"api:{uuid.uuid4().hex}"
    try:
        trigger = api_trigger(
            parse_review_request(body),
            delivery_id=delivery_id,
            configured_forges=tuple(st.forges),
            sender=info.name,
        )
    except TriggerError as exc:
        raise ApiError(400, "invalid_request", exc.detail) from None
    check_binding(info, trigger.forge, trigger.repo_full_name)
    delivery = NewDelivery(
        delivery_id=delivery_id,
        source="api",
        body=body,
        received_at=iso(st.clock()),
        forge=trigger.forge,
        event=trigger.event,
        headers={"X-Reviewbot-Token": info.name},
    )
    return await _journal_and_answer(request, delivery, trigger, None)


# --- reading deliveries and decisions ----------------------------------------------------


async def api_delivery(request: web.Request) -> web.Response:
    st = request.app[STATE]
    info = authenticate(request, "read")
    assert st.db is not None
    delivery_id = request.match_info["delivery_id"]
    stored = await asyncio.to_thread(journal_store.get_delivery, st.db, delivery_id)
    if stored is None:
        raise ApiError(404, "not_found", f"no delivery {delivery_id!r}")
    rows = await asyncio.to_thread(decision_store.for_delivery, st.db, delivery_id)
    if info.repo is not None:
        if not rows:  # not gated yet: nothing shows it belongs to the bound repository
            check_binding(info, None, None)
        for row in rows:
            check_binding(info, row.forge, row.repo)
    return web.json_response(delivery_json(stored, [r.to_json() for r in rows]))


def delivery_json(stored: StoredDelivery, rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "delivery_id": stored.delivery_id,
        "source": stored.source,
        "forge": stored.forge,
        "event": stored.event,
        "status": stored.status,
        "received_at": stored.received_at,
        "finished_at": stored.finished_at,
        "attempts": stored.attempts,
        "error": stored.error,
        "decisions": rows,
    }


async def api_decisions(request: web.Request) -> web.Response:
    st = request.app[STATE]
    info = authenticate(request, "read")
    forge = request.query.get("forge") or None
    repo = request.query.get("repo") or None
    number_text = request.query.get("number") or None
    number: int | None = None
    if number_text is not None:
        if not number_text.isdigit():
            raise ApiError(400, "invalid_request", f"number: {number_text!r} is not a number")
        number = int(number_text)
    if info.repo is not None:
        bound_forge, _, bound_repo = info.repo.partition(":")
        forge = forge or bound_forge
        repo = repo or bound_repo
        check_binding(info, forge, repo)
    db = st.db
    assert db is not None
    rows = await asyncio.to_thread(
        lambda: decision_store.for_pull(db, forge=forge, repo=repo, number=number)
    )
    answer: dict[str, Any] = {"decisions": [r.to_json() for r in rows]}
    if forge and repo and number is not None:
        # For one PR, also its review verdicts: what the checks said and what was posted.
        reviews = ReviewStore(db, time.time)
        verdicts = await asyncio.to_thread(reviews.decisions, forge, repo, number)
        answer["reviews"] = [v.to_json() for v in verdicts]
    return web.json_response(answer)


async def healthz(request: web.Request) -> web.Response:
    st = request.app[STATE]
    try:
        assert st.db is not None
        counts = await asyncio.to_thread(journal_store.count_by_status, st.db)
    except Exception as exc:
        raise ApiError(503, "store_unavailable", str(exc)) from None
    return web.json_response({"status": "ok", "deliveries": counts})


async def metrics(request: web.Request) -> web.Response:
    st = request.app[STATE]
    return web.Response(
        body=generate_latest(st.metrics.registry),
        headers={"Content-Type": CONTENT_TYPE_LATEST},
    )
