"""Sessions, tokens and registries without HTTP: resolution order and lifetimes."""

from __future__ import annotations

from typing import Any

import pytest

from reviewbot.core.findings import Finding, Severity
from reviewbot.runtime.reviewers.sessions import (
    MAX_FINDING_BYTES_PER_RUN,
    NotSessionOwner,
    SessionError,
    SessionExists,
    SessionManager,
    SessionNotFound,
    SessionTokenInvalid,
    Tool,
    ToolCall,
)
from reviewbot.workflowdb.access import DBAccess


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def tool(name: str, tag: str) -> Tool:
    async def handler(call: ToolCall) -> Any:
        return tag

    return Tool(name, handler)


def test_own_registry_first_then_the_run_never_a_sibling() -> None:
    s = SessionManager()
    s.open_run("run", db_access=DBAccess.READ_WRITE, tools=[tool("a", "run"), tool("b", "run")])
    step = s.open_child("run", "step", tools=[tool("a", "step")])
    sibling = s.open_child("run", "other", tools=[tool("c", "sibling")])
    other_run = s.open_run("other-run", db_access=DBAccess.READ_WRITE, tools=[tool("c", "x")])

    assert s.resolve(step, "a")[1].id == "run/step"  # its own tool wins
    assert s.resolve(step, "b")[1].id == "run"  # then its run's
    with pytest.raises(NotSessionOwner, match="'run/step' nor for its owner run 'run'"):
        s.resolve(step, "c")  # a sibling's or another run's tools are never reached
    assert s.resolve(sibling, "c")[1].id == "run/other"
    with pytest.raises(NotSessionOwner, match="caller does not own this tool session"):
        s.resolve(other_run, "a")


def test_a_step_cannot_have_more_access_than_its_run() -> None:
    s = SessionManager()
    s.open_run("run", db_access=DBAccess.READ)
    assert s.open_child("run", "a").db_access is DBAccess.READ
    assert s.open_child("run", "b", db_access=DBAccess.READ_WRITE).db_access is DBAccess.READ
    assert s.open_child("run", "c", db_access=DBAccess.NONE).db_access is DBAccess.NONE


def test_a_call_uses_the_lower_of_caller_and_owner_access() -> None:
    s = SessionManager()
    run = s.open_run("run", db_access=DBAccess.READ_WRITE)
    step = s.open_child("run", "s", db_access=DBAccess.READ)
    assert ToolCall(step, run, {}).db_access is DBAccess.READ
    assert ToolCall(run, run, {}).db_access is DBAccess.READ_WRITE


def test_session_ids_are_unique_while_live_and_steps_need_a_live_run() -> None:
    s = SessionManager()
    s.open_run("run", db_access=DBAccess.READ)
    with pytest.raises(SessionExists):
        s.open_run("run", db_access=DBAccess.READ)
    s.open_child("run", "a")
    with pytest.raises(SessionError, match="only a run can have steps"):
        s.open_child("run/a", "b")
    s.end("run")
    with pytest.raises(SessionNotFound):
        s.open_child("run", "a")
    s.open_run("run", db_access=DBAccess.READ)  # the id is free again once the run ended


def test_tokens_are_stored_hashed_and_expire() -> None:
    clock = Clock()
    s = SessionManager(clock=clock, new_secret=lambda: "fixed-secret")
    s.open_run("run", db_access=DBAccess.READ)
    token = s.issue_token("run", ttl_s=10)
    assert token == "rbs_fixed-secret"
    assert "rbs_fixed-secret" not in repr(vars(s))  # only the hash is kept
    assert s.authenticate(token).id == "run"
    clock.now += 10
    with pytest.raises(SessionTokenInvalid, match="expired"):
        s.authenticate(token)
    with pytest.raises(SessionTokenInvalid):
        s.authenticate("rbt_not_a_session_token")


def test_ending_a_run_revokes_its_steps_and_returns_its_findings() -> None:
    s = SessionManager()
    s.open_run("run", db_access=DBAccess.READ_WRITE, tools=[tool("a", "run")])
    step = s.open_child("run", "step")
    token = s.issue_token(step.id, ttl_s=60)
    finding = Finding("a.py", 1, "m", Severity.ERROR, step.id)
    assert s.record_finding("run", finding) == 1

    assert s.end("run") == [finding]
    assert s.live_sessions() == []
    with pytest.raises(SessionTokenInvalid):
        s.authenticate(token)
    with pytest.raises(SessionTokenInvalid, match="has ended"):
        s.resolve(step, "a")
    with pytest.raises(SessionNotFound):
        s.record_finding("run", finding)


def test_a_run_refuses_findings_past_its_byte_bound() -> None:
    s = SessionManager()
    s.open_run("run", db_access=DBAccess.READ_WRITE)
    big = Finding("a.py", 1, "m" * 9996, Severity.WARNING)  # 10000 bytes with its path
    for n in range(MAX_FINDING_BYTES_PER_RUN // 10000):
        assert s.record_finding("run", big) == n + 1
    with pytest.raises(SessionError, match="bytes of findings"):
        s.record_finding("run", big)


def test_expired_tokens_are_pruned() -> None:
    clock = Clock()
    s = SessionManager(clock=clock)
    s.open_run("run", db_access=DBAccess.READ)
    s.issue_token("run", ttl_s=5)
    keep = s.issue_token("run", ttl_s=50)
    clock.now += 6
    assert s.prune_expired() == 1
    assert s.authenticate(keep).id == "run"
    assert s.revoke_tokens("run") == 1
    with pytest.raises(SessionTokenInvalid):
        s.authenticate(keep)
