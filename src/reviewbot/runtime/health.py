"""Readiness: the checks behind ``GET /readyz`` and ``reviewbot doctor``, each named.

``store_writable`` (a real write commits), ``workers_alive`` (the pool is at full size),
``queue_age`` (the oldest delivery waiting to be gated is younger than
``ready_max_queue_age_s``), ``forge_<name>`` (one live request is answered within its rate
limits; ``unreachable: URL`` when no answer came) and ``sandbox`` (external reviewers can be
contained: failing with ``sandbox_unavailable`` and the probe's reason when some repository
has reviewers and the sandbox cannot run, since none of them would).

``/readyz`` needs no token and the status page checks readiness on every load, while each
forge probe is one request on the bot's own forge credentials and rate limit. So the server
asks through :class:`ForgeProbes`: one probe per forge at a time, its answer reused for
``PROBE_TTL_S``, however many callers ask.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from reviewbot.config import Settings
from reviewbot.core.clock import Clock
from reviewbot.core.reasons import ReasonCode
from reviewbot.core.redact import url_for_display
from reviewbot.forges.base import Forge
from reviewbot.forges.errors import ForgeError, reason_for
from reviewbot.runtime.ingestion.workers import WorkerPool
from reviewbot.runtime.reuse import Reused
from reviewbot.runtime.reviewers.sandbox import SandboxState
from reviewbot.store import journal
from reviewbot.store.database import Database

FORGE_TIMEOUT_S = 5.0
PROBE_TTL_S = 10.0  # about a load balancer's probe interval


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


async def readiness(
    settings: Settings,
    db: Database | None,
    forges: Mapping[str, Forge],
    clock: Clock,
    pool: WorkerPool | None = None,
    *,
    expect_workers: bool = True,
    queue_age: bool = True,
    probes: ForgeProbes | None = None,
    sandbox: SandboxState | None = None,
) -> list[Check]:
    """Every check, failing or not; ``pool`` ``None`` with ``expect_workers`` fails it.
    Without ``probes`` every forge is asked now (``reviewbot doctor``). ``sandbox`` is the
    reviewer sandbox's probed state (``None``: this process runs no reviewer)."""
    checks = [await _store(db, clock)]
    if expect_workers:
        checks.append(_workers(pool))
    if queue_age:
        checks.append(await _queue_age(settings, db, clock))
    for name, forge in sorted(forges.items()):
        checks.append(await (probes.check(name, forge) if probes else _forge(name, forge)))
    if sandbox is not None:
        checks.append(sandbox_check(settings, sandbox))
    return checks


def sandbox_check(settings: Settings, state: SandboxState) -> Check:
    """Whether the configured reviewers can run contained (see the module's text)."""
    tables = [settings.defaults, *settings.repos.values()]
    with_reviewers = sum(1 for rules in tables if rules is not None and rules.reviewers)
    if state.enforced:
        uid = state.describe()["host_uid"]
        return Check("sandbox", True, f"reviewers run under {state.bwrap} as host uid {uid}")
    if state.mode == "off":
        return Check("sandbox", True, 'off: reviewers run without the sandbox (sandbox = "off")')
    if not with_reviewers:
        return Check(
            "sandbox", True, f"unavailable, and no repository has reviewers: {state.reason}"
        )
    return Check(
        "sandbox",
        False,
        f"sandbox_unavailable: {state.reason}; the reviewers of {with_reviewers} "
        f"repository table{'s' if with_reviewers != 1 else ''} will not run",
    )


class ForgeProbes:
    """The forges' last probe answers, each reused for ``ttl_s`` (see the module's text)."""

    def __init__(self, clock: Clock, ttl_s: float = PROBE_TTL_S) -> None:
        self._answers: Reused[Check] = Reused(clock, ttl_s)

    async def check(self, name: str, forge: Forge) -> Check:
        return await self._answers.get(name, lambda: _forge(name, forge))


async def _store(db: Database | None, clock: Clock) -> Check:
    if db is None:
        return Check("store_writable", False, "the store is not open")
    try:
        await db.run(journal.probe_write, db, clock())
    except Exception as exc:
        return Check("store_writable", False, f"a write failed: {exc}")
    return Check("store_writable", True, "a write committed")


def _workers(pool: WorkerPool | None) -> Check:
    if pool is None:
        return Check("workers_alive", False, "no worker pool runs in this process")
    alive = pool.alive()
    detail = f"{alive} of {pool.size} workers alive, {pool.restarts} restarts"
    return Check("workers_alive", alive == pool.size, detail)


async def _queue_age(settings: Settings, db: Database | None, clock: Clock) -> Check:
    limit = settings.ready_max_queue_age_s
    if db is None:
        return Check("queue_age", False, "the store is not open")
    try:
        oldest = await db.run(journal.oldest_queued, db)
    except Exception as exc:
        return Check("queue_age", False, f"the queue could not be read: {exc}")
    if oldest is None:
        return Check("queue_age", True, "nothing is waiting to be gated")
    age = clock() - oldest
    detail = f"the oldest waiting delivery is {age:.0f} s old (limit {limit:.0f} s)"
    return Check("queue_age", age <= limit, detail)


async def _forge(name: str, forge: Forge) -> Check:
    """One live request to the forge, even when ``bot_login`` is configured."""
    check = f"forge_{name}"
    url = url_for_display(forge.url)
    try:
        login = await asyncio.wait_for(forge.probe(), FORGE_TIMEOUT_S)
    except TimeoutError:
        return Check(check, False, f"unreachable: {url} (no answer within {FORGE_TIMEOUT_S:g} s)")
    except ForgeError as exc:  # rate limited, refused, unreachable: the forge says why
        reason = reason_for(exc)
        if reason is ReasonCode.FORGE_UNREACHABLE:
            return Check(check, False, f"unreachable: {url} ({exc})")
        return Check(check, False, f"{reason.value}: {exc} ({url})")
    except Exception as exc:
        return Check(check, False, f"{type(exc).__name__}: {exc} ({url})")
    return Check(check, True, f"answers as {login} ({url})")
