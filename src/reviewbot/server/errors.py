"""The error model of the HTTP face: every error answers ``{"error": CODE, "detail": TEXT}``
plus its extra fields, and this module is the only place that turns a code into a status.

Below the server, errors carry a ``code`` (:class:`reviewbot.core.errors.ReviewbotError`);
a :class:`~reviewbot.core.errors.Refused` whose code is not in :data:`STATUS` is a 409, and an
error with no code of its own (the root's ``error``) is an internal failure: a 500 whose
detail is never shown.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from reviewbot.core.errors import Refused, ReviewbotError
from reviewbot.store.database import is_transient

log = logging.getLogger(__name__)

STATUS: dict[str, int] = {
    "bad_request": 400,
    "invalid_request": 400,
    "invalid_arguments": 400,
    "invalid_body": 400,
    "bad_body": 400,
    "unparseable": 400,
    "delivery_unresolved": 400,
    "forge_not_configured": 400,
    "statement_refused": 400,
    "migration_refused": 400,
    "session_error": 400,
    "unauthorized": 401,
    "signature_invalid": 401,
    "invalid_session_token": 401,
    "forbidden": 403,
    "missing_scope": 403,
    "repo_not_allowed": 403,
    "csrf_failed": 403,
    "permission_denied": 403,
    "forge_auth_failed": 403,
    "not_session_owner": 403,
    "protected_table": 403,
    "not_worker_owner": 403,
    "worker_name_reserved": 403,
    "not_found": 404,
    "repo_not_configured": 404,
    "not_queued": 404,
    "session_not_found": 404,
    "pr_not_found": 404,
    "branch_not_found": 404,
    "app_not_installed": 404,
    "head_unknown": 404,
    "forge_url_wrong": 404,
    "worker_unproven": 404,
    "wrong_role": 404,
    "unknown_forge": 404,
    "method_not_allowed": 405,
    "body_timeout": 408,
    "unknown_event": 400,
    "wrong_endpoint": 400,
    "body_too_large": 413,
    "too_large": 413,
    "rate_limited": 429,
    "statement_failed": 422,
    "query_timeout": 422,
    "query_too_large": 422,
    "internal_error": 500,
    "forge_error": 502,
    "forge_unavailable": 503,
    "forge_unreachable": 503,
    "server_busy": 503,
    "store_unavailable": 503,
    "tools_role_missing": 503,
    "not_ready": 503,
}

# Where one code means another status on one route: acquiring a lease for a worker nobody
# registered is forbidden (a heartbeat of it is not found).
ROUTE_STATUS: dict[tuple[str, str], int] = {
    ("/api/v1/leases/acquire", "worker_unproven"): 403,
}

_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "body_too_large",
}


class Conflict(Refused):
    """A refusal that is a 409 whatever its code (a merge refused for its reasons)."""


def status_of(exc: ReviewbotError, path: str = "") -> int:
    if isinstance(exc, Conflict):
        return 409
    routed = ROUTE_STATUS.get((path, exc.code))
    if routed is not None:
        return routed
    if exc.code in STATUS:
        return STATUS[exc.code]
    return 409 if isinstance(exc, Refused) else 500


def error_response(exc: ReviewbotError, path: str = "") -> web.Response:
    if exc.code == ReviewbotError.code:
        # No code of its own (a configuration or store failure deep down): a failure of the
        # server, answered like any unexpected one, never with its text.
        log.error("unhandled error on %s", path or "a request", exc_info=exc)
        exc = ReviewbotError("the server failed; see its log", code="internal_error")
    response = web.json_response(exc.to_json(), status=status_of(exc, path))
    retry_after = exc.extra.get("retry_after_s")
    if retry_after is not None:  # a refusal that says when to come back says it in HTTP too
        response.headers["Retry-After"] = str(retry_after)
    return response


def refused(code: str, detail: str, **extra: Any) -> Refused:
    """A refusal raised by a handler (the middleware answers it)."""
    return Refused(detail, code=code, **extra)


OnError = Callable[[web.Request, ReviewbotError], None]


def errors_middleware(on_error: OnError | None = None) -> Any:
    """The middleware; ``on_error`` sees every answered error first (metrics)."""

    @web.middleware
    async def middleware(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        try:
            return await handler(request)
        except ReviewbotError as exc:
            if on_error is not None:
                on_error(request, exc)
            return error_response(exc, request.path)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            code = _HTTP_CODES.get(exc.status, "http_error")
            return web.json_response({"error": code, "detail": exc.reason}, status=exc.status)
        except (asyncio.CancelledError, ConnectionResetError):
            raise
        except Exception as exc:
            if is_transient(exc):
                # Disk full, I/O error, busy: nothing was stored, and it may clear; the
                # sender is told to come back (a forge redelivers a 5xx).
                log.warning("store error on %s %s: %s", request.method, request.path, exc)
                busy = ReviewbotError(
                    f"the store failed ({exc}); try again", code="store_unavailable"
                )
                if on_error is not None:
                    on_error(request, busy)
                return error_response(busy, request.path)
            log.exception("unhandled error on %s %s", request.method, request.path)
            failed = ReviewbotError("the server failed; see its log", code="internal_error")
            return error_response(failed)

    return middleware
