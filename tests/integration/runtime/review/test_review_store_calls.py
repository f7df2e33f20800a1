"""What one review costs the store: the calls the event loop hands to the store threads.

Each call is a hop to a store thread and back (a queue, a wake-up, a future); the review of
a PR makes the ones it needs and no more. Real server in process, simulator over HTTP, real
SQLite.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from reviewbot.store.database import StoreExecutor
from tests.integration.review_support import APPROVED, REPO, running_bot

# The parts of the review path: the pipeline, the drainer and the leases it takes, and
# the stores they read and write (the drainer's idle poll aside).
REVIEW_PATH = ("ReviewPipeline.", "OutboxDrainer.", "StoreReviewerLeases.", "ReviewStore.")
POLLS = frozenset({"OutboxStore.due", "OutboxStore.next_due_at"})


def review_path(name: str) -> bool:
    return name.startswith(REVIEW_PATH) or (name.startswith("OutboxStore.") and name not in POLLS)


async def test_one_review_hands_the_store_six_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: Counter[str] = Counter()
    original = StoreExecutor.run

    async def counted(self: StoreExecutor, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        target = fn.func if isinstance(fn, functools.partial) else fn
        calls[getattr(target, "__qualname__", repr(target))] += 1
        return await original(self, fn, *args, **kw)

    monkeypatch.setattr(StoreExecutor, "run", counted)
    async with running_bot(tmp_path) as bot:
        pr = bot.sim.open_pr("github", REPO, author="alice")
        bot.sim.set_status("github", REPO, pr.head_sha, "ci/test", "success")
        await bot.settle()
        calls.clear()
        await bot.sim.deliver_pull_request("github", REPO, pr.number, action="opened")
        await bot.settle()
        reviews = bot.bot_reviews("github", pr.number)
        assert [r.state for r in reviews] == [APPROVED["github"]]
    review = {name: n for name, n in calls.items() if review_path(name)}
    # The latest verdict (repeat? needs an evaluation?) in one call; older heads superseded
    # and the reviewer lease taken in one; the verdict and its outbox row; the row read and
    # its attempt begun in one; the row finished; the rows read back and the lease given
    # back in one.
    assert sum(review.values()) == 6, review
