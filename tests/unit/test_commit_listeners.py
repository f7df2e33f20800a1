"""The registry of commit listeners: registering, removing, handing over once, failing alone."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

import pytest

from reviewbot.core.commit_routes import CommitEvent, CommitResult
from reviewbot.core.models import CheckResult, CheckState, Trigger
from reviewbot.forges.base import Forge
from reviewbot.forges.errors import ForgeError
from reviewbot.runtime.ingestion.listeners import (
    POLL,
    WEBHOOK,
    CommitListeners,
    CommitNotice,
    commit_event,
    trigger_result,
)

SHA, OTHER = "a" * 40, "b" * 40
EVENT = CommitEvent("github", "acme/api", SHA)


def _notice(context: str = "ci", state: str = "success", via: str = WEBHOOK) -> CommitNotice:
    return CommitNotice(EVENT, "status", via, CommitResult(context, state))


class _Forge:
    def __init__(self, results: dict[str, list[CheckResult]]) -> None:
        self.results = results
        self.read: list[str] = []

    async def check_results(self, repo: str, sha: str) -> list[CheckResult]:
        self.read.append(sha)
        if sha not in self.results:
            raise ForgeError("no such commit", status=404, operation="check_results")
        return self.results[sha]


def _forges(forge: _Forge) -> dict[str, Forge]:
    return {"github": cast(Forge, forge)}


async def test_a_listener_hears_a_result_once_whichever_way_it_came() -> None:
    heard: list[CommitNotice] = []
    listeners = CommitListeners()
    listeners.register("queue", heard.append, forge="github", repo="Acme/API", sha=SHA)
    assert await listeners.deliver(_notice()) == ("queue",)
    assert await listeners.deliver(_notice(via=POLL)) == ()
    assert await listeners.deliver(_notice(state="failure")) == ("queue",)
    assert [(n.result.state if n.result else None) for n in heard] == ["success", "failure"]


async def test_a_listener_registered_twice_hears_an_event_once() -> None:
    heard: list[CommitNotice] = []
    listeners = CommitListeners()
    listeners.register("queue", heard.append, forge="github", repo="acme/api", sha=SHA)
    listeners.register("queue", heard.append, forge="github", repo="acme/api", branch="q/*")
    event = CommitEvent("github", "acme/api", SHA, ("q/main",))
    push = CommitNotice(event, "push", WEBHOOK)
    assert await listeners.deliver(push) == ("queue",)
    assert len(heard) == 1


async def test_a_name_is_bound_to_one_listener() -> None:
    listeners = CommitListeners()
    listeners.register("queue", lambda n: None, forge="github", repo="acme/api", sha=SHA)
    with pytest.raises(ValueError, match="another callback"):
        listeners.register("queue", lambda n: None, forge="github", repo="acme/api", sha=OTHER)


async def test_a_removed_registration_hears_nothing_and_forgets_what_it_heard() -> None:
    heard: list[CommitNotice] = []
    listeners = CommitListeners()
    reg = listeners.register("queue", heard.append, forge="github", repo="acme/api", sha=SHA)
    await listeners.deliver(_notice())
    assert listeners.unregister(reg) is True
    assert listeners.unregister(reg) is False
    assert await listeners.deliver(_notice(state="failure")) == ()
    assert listeners.registrations() == ()
    # Registered anew, it starts afresh: what it heard before is offered again.
    listeners.register("queue", heard.append, forge="github", repo="acme/api", sha=SHA)
    assert await listeners.deliver(_notice()) == ("queue",)
    assert len(heard) == 2


async def test_only_the_registrations_matched_earlier_and_still_standing_hear_it() -> None:
    listeners = CommitListeners()
    first = listeners.register("a", lambda n: None, forge="github", repo="acme/api", sha=SHA)
    listeners.register("b", lambda n: None, forge="github", repo="acme/api", sha=SHA)
    assert await listeners.deliver(_notice(), [first]) == ("a",)
    assert listeners.unregister_listener("a") == 1
    assert await listeners.deliver(_notice("lint"), [first]) == ()


async def test_a_failing_listener_is_logged_and_hears_the_result_again_later(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[CommitNotice] = []

    async def flaky(notice: CommitNotice) -> None:
        calls.append(notice)
        if len(calls) == 1:
            raise RuntimeError("queue store unavailable")

    heard: list[CommitNotice] = []
    listeners = CommitListeners()
    listeners.register("flaky", flaky, forge="github", repo="acme/api", sha=SHA)
    listeners.register("steady", heard.append, forge="github", repo="acme/api", sha=SHA)
    with caplog.at_level(logging.ERROR):
        assert await listeners.deliver(_notice()) == ("steady",)
    assert "commit listener flaky failed" in caplog.text
    assert "queue store unavailable" in caplog.text
    assert await listeners.deliver(_notice(via=POLL)) == ("flaky",)
    assert len(calls) == 2 and len(heard) == 1


async def test_a_queue_listener_gets_notices_and_a_full_one_fails_alone() -> None:
    queue: asyncio.Queue[CommitNotice] = asyncio.Queue(maxsize=1)
    listeners = CommitListeners()
    listeners.register("queue", queue, forge="github", repo="acme/api", sha=SHA)
    assert await listeners.deliver(_notice()) == ("queue",)
    assert await listeners.deliver(_notice("lint")) == ()  # full: not heard
    assert queue.get_nowait().result == CommitResult("ci", "success")
    assert await listeners.deliver(_notice("lint")) == ("queue",)


async def test_a_poll_hands_over_the_newest_result_of_each_check_not_yet_heard() -> None:
    forge = _Forge(
        {
            SHA: [
                CheckResult("ci", CheckState.PENDING, updated_at="2026-01-01T00:00:00Z"),
                CheckResult(
                    "ci", CheckState.SUCCESS, "https://ci/1", "status", "2026-01-01T00:05:00Z"
                ),
                CheckResult("lint", CheckState.FAILURE, source="check_run"),
            ]
        }
    )
    heard: list[CommitNotice] = []
    listeners = CommitListeners()
    listeners.register("queue", heard.append, forge="github", repo="acme/api", sha=SHA)
    listeners.register("queue", heard.append, forge="github", repo="acme/api", branch="q/*")
    await listeners.deliver(_notice("lint", "failure"))  # came by webhook
    report = await listeners.poll(_forges(forge))
    assert forge.read == [SHA]  # the branch pattern names no commit to read
    assert report.commits == [f"github:acme/api@{SHA[:12]}"]
    assert report.handed == [f"queue: ci=success at {SHA[:12]}"]
    assert [(n.via, n.kind, n.url) for n in heard[1:]] == [(POLL, "status", "https://ci/1")]
    assert (await listeners.poll(_forges(forge))).handed == []


async def test_a_poll_reports_a_failing_forge_and_reads_the_other_commits() -> None:
    forge = _Forge({OTHER: [CheckResult("ci", CheckState.SUCCESS)]})
    heard: list[CommitNotice] = []
    listeners = CommitListeners()
    listeners.register("queue", heard.append, forge="github", repo="acme/api", sha=SHA)
    listeners.register("queue", heard.append, forge="github", repo="acme/api", sha=OTHER)
    listeners.register("queue", heard.append, forge="gitea", repo="acme/api", sha=SHA)
    report = await listeners.poll(_forges(forge))
    assert report.errors == [
        f"gitea:acme/api@{SHA[:12]}: no gitea connection is configured",
        f"github:acme/api@{SHA[:12]}: check_results: HTTP 404: no such commit",
    ]
    assert report.commits == [f"github:acme/api@{OTHER[:12]}"]
    assert [n.event.sha for n in heard] == [OTHER]


def _trigger(**kw: Any) -> Trigger:
    fields: dict[str, Any] = {
        "source": "github",
        "delivery_id": "d",
        "forge": "github",
        "event": "status",
        "kind": "commit",
        "owner": "Acme",
        "name": "API",
        "commit_sha": SHA,
    }
    fields.update(kw)
    return Trigger(**fields)


def test_a_trigger_names_its_commit_and_its_result_as_a_poll_would() -> None:
    status = _trigger(extra={"context": "ci", "state": "warning"})
    assert commit_event(status) == CommitEvent("github", "acme/api", SHA)
    assert trigger_result(status) == CommitResult("ci", CheckState.FAILURE.value)
    run = _trigger(event="check_run", extra={"check": "build", "conclusion": "stale"})
    assert trigger_result(run) == CommitResult("build", CheckState.PENDING.value)
    odd = _trigger(event="check_run", extra={"check": "build", "conclusion": "new-thing"})
    assert trigger_result(odd) == CommitResult("build", CheckState.ERROR.value)
    suite = _trigger(event="check_suite", extra={"check": "Actions", "conclusion": "success"})
    assert trigger_result(suite) == CommitResult("suite:Actions", "success")
    push = _trigger(event="push", kind="push", branches=("q/main",))
    assert commit_event(push) == CommitEvent("github", "acme/api", SHA, ("q/main",))
    assert trigger_result(push) is None
    assert commit_event(_trigger(kind="pull", number=1)) is None
