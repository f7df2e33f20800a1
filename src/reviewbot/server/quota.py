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

import contextlib
from collections.abc import Iterator

from reviewbot.core.errors import Refused
from reviewbot.core.quota import RouteClass, retry_after_s
from reviewbot.service import Service
from reviewbot.store.tokens import TokenInfo

# Calls one token holds open at once in this process (watches, acquires waiting in a lease's
# line): each looks at the store every few tenths of a second while it waits, so the bucket
# alone (a burst, then a few a second, each held up to max_wait_s) would let one token hold
# hundreds of them.
MAX_OPEN_PER_TOKEN = 4
_open: dict[tuple[int, int], int] = {}  # (service, token id) -> calls held open

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


@contextlib.contextmanager
def held_open(service: Service, info: TokenInfo) -> Iterator[None]:
    """One call ``info`` holds open while it waits (a watch, an acquire waiting in line):
    refused ``rate_limited`` when the token already holds :data:`MAX_OPEN_PER_TOKEN`."""
    key = (id(service), info.id)
    if _open.get(key, 0) >= MAX_OPEN_PER_TOKEN:
        raise Refused(
            f"token {info.name!r} already holds {MAX_OPEN_PER_TOKEN} waiting calls open "
            "(watches, acquires waiting in line): wait for one to answer",
            code="rate_limited",
            retry_after_s=1,
        )
    _open[key] = _open.get(key, 0) + 1
    try:
        yield
    finally:
        _open[key] -= 1
        if not _open[key]:
            del _open[key]
