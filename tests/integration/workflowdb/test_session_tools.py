"""Session-scoped tools over real HTTP: POST /api/v1/tools/{name} with a session token.

Authority belongs to the calling session: a run and an unrelated session calling at the
same moment each act with their own registry and their own DB access, a step resolves to
its run, and nothing falls back to a table shared between sessions.
"""

from __future__ import annotations

import asyncio
import shlex
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from reviewbot.config import ReviewerRule
from reviewbot.runtime.reviewers.runner import review_in_run
from reviewbot.runtime.reviewers.sandbox import probe
from reviewbot.runtime.reviewers.sessions import SessionManager
from reviewbot.runtime.reviewers.tools import ToolDispatcher, run_tools
from reviewbot.server.tools import SESSIONS, TOOLS_ROUTE, register_tool_routes
from reviewbot.server.tools_socket import RunToolsSockets
from reviewbot.store.database import Database
from reviewbot.store.sessions import tool_calls
from reviewbot.store.tokens import revoke_token
from reviewbot.workflowdb.access import DBAccess
from reviewbot.workflowdb.bootstrap import open_store
from reviewbot.workflowdb.migrations import apply_workflow_db_migration
from reviewbot.workflowdb.paths import WorkflowPaths
from tests.integration.server_support import make_settings, running_server
from tests.integration.tools_support import SOCKET_CLIENT
from tests.support.clock import FakeClock
from tests.support.store_fixtures import AUTO_ID

PAIRS = 100
INSERT = "INSERT INTO notes (pair, writer) VALUES (?, ?)"
OWNERSHIP = "caller does not own this tool session"
SANDBOX = probe("on")  # what review_in_run runs reviewers in by default


class Api:
    """A client for the tools route of a server on loopback."""

    def __init__(self, server: TestServer, http: aiohttp.ClientSession, sessions: SessionManager):
        self.server = server
        self.http = http
        self.sessions = sessions

    @property
    def base_url(self) -> str:
        return str(self.server.make_url("")).rstrip("/")

    async def call(
        self,
        token: str | None,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        body: Any = None,
        raw: bytes | None = None,
    ) -> tuple[int, dict[str, Any]]:
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        url = self.base_url + TOOLS_ROUTE.replace("{name}", name)
        if raw is not None:
            kwargs: dict[str, Any] = {"data": raw}
        else:
            kwargs = {"json": body if body is not None else {"arguments": arguments or {}}}
        async with self.http.post(url, headers=headers, **kwargs) as resp:
            return resp.status, await resp.json()


def add_notes_table(paths: WorkflowPaths, db: Database) -> None:
    """A table of the users' own, added through the managed migration route."""
    key = AUTO_ID["postgresql" if paths.database_url else "sqlite"]
    (paths.migrations_dir / "notes.sql").write_text(
        f"CREATE TABLE IF NOT EXISTS notes (id {key}, pair INTEGER NOT NULL, writer TEXT NOT NULL);"
    )
    apply_workflow_db_migration(
        "notes.sql", paths=paths, access=DBAccess.READ_WRITE, applied_by="test", db=db
    )


@pytest.fixture
def store(workflow_paths: WorkflowPaths) -> Iterator[tuple[WorkflowPaths, Database]]:
    """The workflow folder and its store, on each store kind."""
    paths = workflow_paths
    db = open_store(paths)
    add_notes_table(paths, db)
    yield paths, db
    db.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_000_000.0)


@pytest.fixture
async def api(store: tuple[WorkflowPaths, Database], clock: FakeClock) -> AsyncIterator[Api]:
    _, db = store
    app = web.Application()
    sessions = register_tool_routes(app, sessions=SessionManager(clock=clock), audit=lambda: db)
    assert app[SESSIONS] is sessions
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as http:
            yield Api(server, http, sessions)
    finally:
        await server.close()


def notes(db: Database) -> list[tuple[int, str]]:
    with db.read() as tx:
        return [(r["pair"], r["writer"]) for r in tx.all("SELECT pair, writer FROM notes")]


# -- the lesson: concurrent sessions never borrow each other's authority --------------------


async def test_run_and_unrelated_session_each_write_with_their_own_authority(
    api: Api, store: tuple[WorkflowPaths, Database]
) -> None:
    paths, db = store
    s = api.sessions
    run = s.open_run("run-A", db_access=DBAccess.READ_WRITE, tools=run_tools(paths, s))
    chat = s.open_run("chat-1", db_access=DBAccess.READ, tools=run_tools(paths, s))
    run_token = s.issue_token(run.id, ttl_s=600)
    chat_token = s.issue_token(chat.id, ttl_s=600)

    async def pair(i: int) -> tuple[tuple[int, dict[str, Any]], tuple[int, dict[str, Any]]]:
        by_run, by_chat = await asyncio.gather(
            api.call(run_token, "mutate_workflow_db", {"sql": INSERT, "params": [i, "run-A"]}),
            api.call(chat_token, "mutate_workflow_db", {"sql": INSERT, "params": [i, "chat-1"]}),
        )
        return by_run, by_chat

    answers = await asyncio.gather(*(pair(i) for i in range(PAIRS)))

    for (run_status, run_body), (chat_status, chat_body) in answers:
        assert run_status == 200, run_body
        assert run_body["session"] == "run-A" and run_body["owner"] == "run-A"
        assert run_body["result"]["rowcount"] == 1
        assert chat_status == 403, chat_body
        assert chat_body["error"] == "permission_denied"
        assert "'chat-1'" in chat_body["detail"]
        assert "requires read-write DB access" in chat_body["detail"]
    assert sorted(notes(db)) == [(i, "run-A") for i in range(PAIRS)]

    run_calls = tool_calls(db, session_id="run-A")
    chat_calls = tool_calls(db, session_id="chat-1")
    assert len(run_calls) == PAIRS and len(chat_calls) == PAIRS
    assert {(c.owner_session_id, c.run_id, c.tool, c.outcome) for c in run_calls} == {
        ("run-A", "run-A", "mutate_workflow_db", "ok")
    }
    assert {(c.owner_session_id, c.run_id, c.outcome) for c in chat_calls} == {
        ("chat-1", "chat-1", "permission_denied")
    }


async def test_two_writers_at_once_are_each_attributed_to_themselves(
    api: Api, store: tuple[WorkflowPaths, Database]
) -> None:
    paths, db = store
    s = api.sessions
    tokens = {}
    for sid in ("run-B", "chat-2"):
        s.open_run(sid, db_access=DBAccess.READ_WRITE, tools=run_tools(paths, s))
        tokens[sid] = s.issue_token(sid, ttl_s=600)

    calls = [
        (sid, api.call(tokens[sid], "mutate_workflow_db", {"sql": INSERT, "params": [i, sid]}))
        for i in range(PAIRS)
        for sid in ("run-B", "chat-2")
    ]
    answers = await asyncio.gather(*(c for _, c in calls))

    for (sid, _), (status, body) in zip(calls, answers, strict=True):
        assert status == 200, body
        assert (body["session"], body["owner"]) == (sid, sid)
    rows = notes(db)
    assert sorted(p for p, w in rows if w == "run-B") == list(range(PAIRS))
    assert sorted(p for p, w in rows if w == "chat-2") == list(range(PAIRS))
    for sid in ("run-B", "chat-2"):
        recorded = tool_calls(db, session_id=sid)
        assert len(recorded) == PAIRS
        assert {(c.owner_session_id, c.outcome) for c in recorded} == {(sid, "ok")}


async def test_a_session_without_the_tool_never_falls_back_to_another_sessions_registry(
    api: Api, store: tuple[WorkflowPaths, Database]
) -> None:
    paths, db = store
    s = api.sessions
    s.open_run("run-C", db_access=DBAccess.READ_WRITE, tools=run_tools(paths, s))
    s.open_run("chat-3", db_access=DBAccess.READ_WRITE)  # registered nothing
    run_token = s.issue_token("run-C", ttl_s=600)
    chat_token = s.issue_token("chat-3", ttl_s=600)

    answers = await asyncio.gather(
        *(
            api.call(token, "mutate_workflow_db", {"sql": INSERT, "params": [i, sid]})
            for i in range(PAIRS)
            for sid, token in (("run-C", run_token), ("chat-3", chat_token))
        )
    )

    refused = [body for status, body in answers if status == 403]
    assert len(refused) == PAIRS
    for body in refused:
        assert body["error"] == "not_session_owner"
        assert body["detail"].startswith(OWNERSHIP)
        assert "'chat-3'" in body["detail"] and "'mutate_workflow_db'" in body["detail"]
    assert sorted(notes(db)) == [(i, "run-C") for i in range(PAIRS)]


# -- steps of a run ---------------------------------------------------------------------------


async def test_a_step_resolves_to_its_run(api: Api, store: tuple[WorkflowPaths, Database]) -> None:
    paths, db = store
    s = api.sessions
    s.open_run("run-D", db_access=DBAccess.READ_WRITE, tools=run_tools(paths, s))
    step = s.open_child("run-D", "reviewer-1")
    token = s.issue_token(step.id, ttl_s=60)

    status, body = await api.call(token, "mutate_workflow_db", {"sql": INSERT, "params": [1, "x"]})
    assert status == 200, body
    assert (body["session"], body["owner"]) == ("run-D/reviewer-1", "run-D")

    status, body = await api.call(token, "query_workflow_db", {"sql": "SELECT count(*) FROM notes"})
    assert status == 200 and body["result"]["rows"] == [[1]]

    finding = {"path": "src/a.py", "line": 4, "message": "shadowed name", "severity": "error"}
    status, body = await api.call(token, "record_finding", finding)
    assert status == 200 and body["result"] == {"recorded": True, "run": "run-D", "findings": 1}
    (recorded,) = s.findings("run-D")
    assert (recorded.path, recorded.line, recorded.source) == ("src/a.py", 4, "run-D/reviewer-1")

    (call, *_) = tool_calls(db, session_id="run-D/reviewer-1")
    assert (call.owner_session_id, call.run_id, call.tool) == (
        "run-D",
        "run-D",
        "mutate_workflow_db",
    )


async def test_a_step_with_lower_access_cannot_write_through_its_runs_tools(
    api: Api, store: tuple[WorkflowPaths, Database]
) -> None:
    paths, db = store
    s = api.sessions
    s.open_run("run-E", db_access=DBAccess.READ_WRITE, tools=run_tools(paths, s))
    step = s.open_child("run-E", "reviewer-1", db_access=DBAccess.READ)
    token = s.issue_token(step.id, ttl_s=60)

    status, body = await api.call(token, "mutate_workflow_db", {"sql": INSERT, "params": [1, "x"]})
    assert status == 403
    assert body == {
        "error": "permission_denied",
        "detail": "mutate_workflow_db requires read-write DB access; "
        "session 'run-E/reviewer-1' has read DB access",
    }
    assert notes(db) == []
    status, _ = await api.call(token, "query_workflow_db", {"sql": "SELECT 1"})
    assert status == 200


async def test_a_step_of_a_run_without_the_tool_is_refused_naming_both(api: Api) -> None:
    s = api.sessions
    s.open_run("run-F", db_access=DBAccess.READ_WRITE)
    step = s.open_child("run-F", "reviewer-1")
    token = s.issue_token(step.id, ttl_s=60)

    status, body = await api.call(token, "mutate_workflow_db", {"sql": "SELECT 1"})
    assert status == 403
    assert body == {
        "error": "not_session_owner",
        "detail": f"{OWNERSHIP}: tool 'mutate_workflow_db' is registered neither for caller "
        "session 'run-F/reviewer-1' nor for its owner run 'run-F'",
    }


async def test_an_unknown_tool_is_refused_with_the_ownership_error(
    api: Api, store: tuple[WorkflowPaths, Database]
) -> None:
    paths, db = store
    s = api.sessions
    s.open_run("run-G", db_access=DBAccess.READ_WRITE, tools=run_tools(paths, s))
    token = s.issue_token("run-G", ttl_s=60)
    status, body = await api.call(token, "drop_workflow_db", {"file": "x.sql"})
    assert status == 403
    assert body["error"] == "not_session_owner"
    assert "'run-G'" in body["detail"] and "'drop_workflow_db'" in body["detail"]
    (call,) = tool_calls(db, session_id="run-G")
    assert (call.outcome, call.owner_session_id) == ("not_session_owner", None)


# -- tokens -----------------------------------------------------------------------------------


async def test_tokens_of_an_ended_run_and_its_steps_are_refused(
    api: Api, store: tuple[WorkflowPaths, Database]
) -> None:
    paths, _ = store
    s = api.sessions
    s.open_run("run-H", db_access=DBAccess.READ_WRITE, tools=run_tools(paths, s))
    run_token = s.issue_token("run-H", ttl_s=600)
    step_token = s.issue_token(s.open_child("run-H", "reviewer-1").id, ttl_s=600)
    status, _ = await api.call(step_token, "query_workflow_db", {"sql": "SELECT 1"})
    assert status == 200

    s.end("run-H")

    for token in (run_token, step_token):
        status, body = await api.call(token, "query_workflow_db", {"sql": "SELECT 1"})
        assert status == 401
        assert body["error"] == "invalid_session_token"
    assert s.live_sessions() == [] and s.tool_names("run-H") == []


async def test_an_expired_token_is_refused(
    api: Api, store: tuple[WorkflowPaths, Database], clock: FakeClock
) -> None:
    paths, _ = store
    s = api.sessions
    s.open_run("run-I", db_access=DBAccess.READ_WRITE, tools=run_tools(paths, s))
    token = s.issue_token("run-I", ttl_s=30)
    clock.now += 29
    assert (await api.call(token, "query_workflow_db", {"sql": "SELECT 1"}))[0] == 200
    clock.now += 1
    status, body = await api.call(token, "query_workflow_db", {"sql": "SELECT 1"})
    assert status == 401
    assert "expired" in body["detail"]


@pytest.mark.parametrize("token", [None, "rbt_an_api_token", "rbs_made_up"])
async def test_calls_without_a_live_session_token_are_refused(api: Api, token: str | None) -> None:
    status, body = await api.call(token, "query_workflow_db", {"sql": "SELECT 1"})
    assert status == 401
    assert body["error"] in ("unauthorized", "invalid_session_token")


# -- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_kw", "status", "code"),
    [
        ({"raw": b"{not json"}, 400, "invalid_body"),
        ({"body": {"args": {}}}, 400, "invalid_body"),
        ({"body": {"arguments": []}}, 400, "invalid_body"),
        ({"body": {"arguments": {}}}, 400, "invalid_arguments"),
        ({"body": {"arguments": {"sql": "SELECT 1", "extra": 1}}}, 400, "invalid_arguments"),
        ({"body": {"arguments": {"sql": "DROP TABLE notes"}}}, 400, "statement_refused"),
        ({"body": {"arguments": {"sql": "CREATE TABLE t (a)"}}}, 400, "statement_refused"),
        (
            {"body": {"arguments": {"sql": "INSERT INTO nowhere VALUES (1)"}}},
            422,
            "statement_failed",
        ),
        ({"raw": b'{"arguments": {"sql": "' + b"x" * 1_100_000 + b'"}}'}, 413, "too_large"),
    ],
)
async def test_bad_requests_get_a_clear_error_and_change_nothing(
    api: Api,
    store: tuple[WorkflowPaths, Database],
    request_kw: dict[str, Any],
    status: int,
    code: str,
) -> None:
    paths, db = store
    s = api.sessions
    s.open_run("run-J", db_access=DBAccess.READ_WRITE, tools=run_tools(paths, s))
    token = s.issue_token("run-J", ttl_s=60)
    got_status, body = await api.call(token, "mutate_workflow_db", **request_kw)
    assert (got_status, body["error"]) == (status, code), body
    assert body["detail"]
    assert notes(db) == []
    status_after, _ = await api.call(token, "query_workflow_db", {"sql": "SELECT * FROM notes"})
    assert status_after == 200  # the session is still usable


async def test_a_large_body_arriving_in_pieces_is_read_whole(
    api: Api, store: tuple[WorkflowPaths, Database]
) -> None:
    paths, _ = store
    s = api.sessions
    s.open_run("run-L", db_access=DBAccess.READ, tools=run_tools(paths, s))
    token = s.issue_token("run-L", ttl_s=60)
    big = "x" * 900_000  # under the 1 MiB limit, far over one network read
    status, body = await api.call(token, "query_workflow_db", {"sql": "SELECT ?", "params": [big]})
    assert status == 200, body
    assert body["result"]["rows"] == [[big]]


# -- end to end: a reviewer process calls back with its own token ------------------------------

CALLING_REVIEWER = (
    SOCKET_CLIENT
    + """
status, wrote = call("mutate_workflow_db", {"sql": "INSERT INTO notes (pair, writer) VALUES (?, ?)",
                                     "params": [7, os.environ["VAR_NUMBER"]]})
assert wrote["session"].endswith("/reviewer-1") and wrote["result"]["rowcount"] == 1
tool("record_finding", path="src/x.py", line=2, message="from the API", severity="error")
print(json.dumps([{"path": "src/y.py", "line": 5, "message": "printed", "severity": "warning"}]))
"""
)


async def test_a_reviewer_process_calls_the_tools_of_its_run(
    api: Api, store: tuple[WorkflowPaths, Database], tmp_path: Path
) -> None:
    paths, db = store
    script = tmp_path / "calling_reviewer.py"
    script.write_text(CALLING_REVIEWER)

    sockets = RunToolsSockets(ToolDispatcher(api.sessions, audit=lambda: db), owner=SANDBOX.drop_to)
    outcome = await review_in_run(
        # No network: the run's tools socket is bound into the reviewer's sandbox.
        [ReviewerRule(command=shlex.join([sys.executable, str(script)]))],
        paths=paths,
        sessions=api.sessions,
        run_id="run-K",
        delivery={"delivery_id": "d-7"},
        db_access=DBAccess.READ_WRITE,
        endpoint=sockets,
        variables={"number": "12"},
    )

    assert outcome.errors == ()
    assert sorted((f.path, f.severity.value, f.source) for f in outcome.findings) == [
        ("src/x.py", "error", "run-K/reviewer-1"),
        ("src/y.py", "warning", "run-K/reviewer-1"),
    ]
    assert notes(db) == [(7, "12")]
    (call, *_) = tool_calls(db, run_id="run-K")
    assert (call.session_id, call.owner_session_id) == ("run-K/reviewer-1", "run-K")
    assert api.sessions.live_sessions() == []  # the run ended with the review
    assert (paths.runs_dir / "run-K" / "delivery.json").is_file()


# -- the real server ------------------------------------------------------------------------


async def test_the_server_answers_for_the_sessions_of_its_runs(tmp_path: Path) -> None:
    async with running_server(make_settings(tmp_path / "data"), run_workers=False) as server:
        sessions = server.app[SESSIONS]
        paths = WorkflowPaths(tmp_path / "data")
        sessions.open_run("run-S", db_access=DBAccess.READ_WRITE, tools=run_tools(paths, sessions))
        token = sessions.issue_token("run-S", ttl_s=60)
        url = server.base + "/api/v1/tools/query_workflow_db"
        body = {"arguments": {"sql": "SELECT count(*) FROM session_tool_calls"}}

        async with server.http.post(url, json=body) as resp:
            assert resp.status == 401
        async with server.http.post(
            url, json=body, headers={"Authorization": f"Bearer {token}"}
        ) as resp:
            assert resp.status == 200
            answer = await resp.json()
        assert (answer["session"], answer["result"]["rows"]) == ("run-S", [[0]])
        assert [c.session_id for c in tool_calls(server.db)] == ["run-S"]

        sessions.end("run-S")
        async with server.http.post(
            url, json=body, headers={"Authorization": f"Bearer {token}"}
        ) as resp:
            assert resp.status == 401


async def test_api_tokens_call_the_db_tools_as_sessions_of_their_own(tmp_path: Path) -> None:
    async with running_server(make_settings(tmp_path / "data"), run_workers=False) as server:
        sessions = server.app[SESSIONS]
        paths = WorkflowPaths(tmp_path / "data")
        sessions.open_run("run-T", db_access=DBAccess.READ_WRITE, tools=run_tools(paths, sessions))
        writer = server.token("db:write", name="writer")
        reader = server.token("db:read", name="reader")
        plain = server.token("read", name="plain")
        gone = server.token("db:write", name="gone")
        revoke_token(server.db, "gone", now=1_767_225_601.0)
        add_notes_table(paths, server.db)

        async def call(token: str, name: str, args: dict[str, Any]) -> tuple[int, dict[str, Any]]:
            async with server.http.post(
                f"{server.base}/api/v1/tools/{name}",
                json={"arguments": args},
                headers={"Authorization": f"Bearer {token}"},
            ) as resp:
                return resp.status, await resp.json()

        insert = {"sql": INSERT, "params": [1, "writer"]}
        count = {"sql": "SELECT count(*) FROM notes"}

        status, body = await call(writer, "mutate_workflow_db", insert)
        assert status == 200, body
        assert body["session"].startswith("token:writer:") and body["owner"] == body["session"]
        assert (await call(reader, "query_workflow_db", count))[1]["result"]["rows"] == [[1]]

        status, body = await call(reader, "mutate_workflow_db", insert)
        assert (status, body["error"]) == (403, "permission_denied")
        assert "requires read-write DB access" in body["detail"]
        status, body = await call(plain, "query_workflow_db", count)
        assert (status, body["error"]) == (403, "permission_denied")
        status, body = await call(writer, "record_finding", {})  # a run's tool, not theirs
        assert (status, body["error"]) == (403, "not_session_owner")
        assert "'token:writer:" in body["detail"]
        status, body = await call(gone, "query_workflow_db", count)
        assert (status, body["detail"]) == (401, "token 'gone' was revoked")
        assert (await call("rbt_unknown", "query_workflow_db", count))[0] == 401

        # Each call was a session of its own, ended with the call; the run is untouched.
        assert sessions.live_sessions() == ["run-T"]
        outcomes = [(c.session_id.split(":")[1], c.outcome) for c in tool_calls(server.db)]
        assert outcomes == [
            ("writer", "ok"),
            ("reader", "ok"),
            ("reader", "permission_denied"),
            ("plain", "permission_denied"),
            ("writer", "not_session_owner"),
        ]


@pytest.mark.parametrize("name", ["Drop-Table", "x" * 300, "%C3%A9t%C3%A9"])
async def test_odd_tool_names_are_refused_as_not_owned(
    api: Api, store: tuple[WorkflowPaths, Database], name: str
) -> None:
    paths, _ = store
    s = api.sessions
    s.open_run("run-N", db_access=DBAccess.READ_WRITE, tools=run_tools(paths, s))
    token = s.issue_token("run-N", ttl_s=60)
    status, body = await api.call(token, name, {})
    assert (status, body["error"]) == (403, "not_session_owner")
    assert "'run-N'" in body["detail"]
