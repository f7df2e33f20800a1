"""Rate limits on the write paths: each call of a token (or a reviewer's session) takes one
token from its bucket for the route's class (:mod:`reviewbot.core.quota`); an empty bucket
is refused ``429 rate_limited`` with ``Retry-After`` (over MCP: a tool error with the same
code). The buckets are the service's, kept in this process: with several replicas behind a
load balancer, a caller gets each replica's limit.

Which calls count is read off the scope they need (:data:`WRITE_SCOPES`), on the REST
routes (``auth.authenticate``) and the MCP tools alike, so a new write path is limited the
day it is added; the workflow-DB tools (``POST /api/v1/tools/{name}``, their MCP twins)
count against ``tools``, whatever the statement."""

from __future__ import annotations

from reviewbot.core.errors import Refused
from reviewbot.core.quota import RouteClass, retry_after_s
from reviewbot.service import Service
from reviewbot.store.tokens import TokenInfo

# The scope of every write path, and the class its calls count against.
WRITE_SCOPES: dict[str, RouteClass] = {
    "review": RouteClass.REVIEW,
    "lease": RouteClass.LEASE,
    "merge": RouteClass.MERGE,
}


def token_caller(info: TokenInfo) -> str:
    """A token's bucket key and its name in a refusal (by id: a name may be reused)."""
    return f"token {info.name!r} (id {info.id})"


def session_caller(session_id: str) -> str:
    return f"session {session_id}"


def admit(service: Service, caller: str, route: RouteClass) -> None:
    """Take one call of ``caller`` on ``route``, or refuse it ``rate_limited``."""
    wait = service.quota.take(caller, route, service.clock())
    if wait is None:
        return
    rate = service.quota.rate(route)
    assert rate is not None
    seconds = retry_after_s(wait)
    raise Refused(
        f"{caller} made more {route.value} calls than this server allows ({rate.burst} at "
        f"once, then {rate.per_s:g} a second); try again in {seconds} s",
        code="rate_limited",
        retry_after_s=seconds,
    )
