"""Every process that runs a review gives its reviewers their session tools, network off.

The same pull request, the same reviewer, under each kind of process that can claim its
review: a real ``reviewbot serve``, a real ``reviewbot mcp --stdio`` driven by the official
MCP client, and a real ``reviewbot review``. The reviewer runs in the real sandbox (bubblewrap)
with its network off; it calls ``record_finding`` over the run's tools socket and prints a
finding built from the tool's answer, so the posted review shows both. Then what a hostile
reviewer (or another local user) would try against the sockets: another run's socket and
tools, the socket's permissions, a huge body and one that never ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import socket
import stat
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from reviewbot.config import Settings
from reviewbot.core.sandbox import TOOLS_FOLDER, TOOLS_SOCKET
from reviewbot.runtime.reviewers.runner import (
    ReviewerLimits,
    review_in_run,
    run_external_reviewers,
)
from reviewbot.runtime.reviewers.runs import start_run
from reviewbot.runtime.reviewers.sandbox import Sandbox, probe
from reviewbot.runtime.reviewers.tools import run_tools
from reviewbot.server.tools_socket import FOLDER_PREFIX, RunToolsSockets, service_tools_sockets
from reviewbot.service import Parts, Service, build_service
from reviewbot.sim import SimServer, Simulator
from reviewbot.store.tokens import create_token
from reviewbot.workflowdb.access import DBAccess
from reviewbot.workflowdb.bootstrap import open_store
from reviewbot.workflowdb.paths import WorkflowPaths
from tests.integration.mcp_support import mcp_stdio, ok
from tests.integration.process_support import START_S, clean_env, serve_process
from tests.integration.review_support import BOT, CHANGES, REPO, SECRET, prepare_sim, wait_for
from tests.integration.runtime.reviewers.test_sandbox_serve import (
    NOBODY,
    python_for_nobody,
    workdir,
)
from tests.integration.tools_support import SOCKET_CLIENT
from tests.support.store_fixtures import seeded

STATE = probe("on")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not STATE.enforced, reason=f"the reviewer sandbox cannot run here: {STATE.reason}"
    ),
]

FORGE = "gitea"
NOW = 1767225600.0  # 2026-01-01T00:00:00Z, when the test's tokens were made
REVIEW_S = 90.0  # a bound on the wait for a review on a loaded machine, never a speed check

# Tries the forge simulator's address (its argv[1], host:port) to show it has no network,
# records an error finding through the tools of its run and prints a warning that carries
# the tool's answer: both must be in the review.
TOOLS_REVIEWER = (
    SOCKET_CLIENT
    + """
import sys
host, _, port = sys.argv[1].rpartition(":")
try:
    socket.create_connection((host, int(port)), timeout=5).close()
    network = "reached the host's loopback"
except OSError:
    network = "no network"
recorded = tool("record_finding", path="lib/db.py", line=7,
                message="query built by string formatting", severity="error")
print(json.dumps([{"path": "lib/db.py", "line": 1, "severity": "warning",
                   "message": "run holds %d recorded finding(s); %s" % (
                       recorded["findings"], network)}]))
"""
)

EXPECTED_COMMENTS = [
    ("lib/db.py", 1, "**warning**: run holds 1 recorded finding(s); no network"),
    ("lib/db.py", 7, "**error**: query built by string formatting"),
]


def forge_address(sim_server: SimServer) -> str:
    return sim_server.gitea_url.split("://", 1)[1].split("/", 1)[0]


def reviewer_env(
    tmp_path: Path,
    sim_server: SimServer,
    tokens: dict[str, str],
    *,
    python: str = sys.executable,
    seed: bool = True,
) -> dict[str, str]:
    """A configuration whose repository has the tools reviewer (network off, the default),
    and the environment every process kind below runs with. ``seed``: start from a copy of
    the migrated template store (owned by this process's user)."""
    script = tmp_path / "reviewers" / "tools_reviewer.py"
    script.parent.mkdir()
    script.write_text(TOOLS_REVIEWER)
    command = shlex.join([python, str(script), forge_address(sim_server)])
    config = tmp_path / "reviewbot.toml"
    config.write_text(
        f'[repos."{FORGE}:{REPO}"]\nrequired_checks = ["ci/test"]\n'
        f"reviewers = [{json.dumps(command)}]\n"
    )
    return clean_env(
        {
            "REVIEWBOT_CONFIG": str(config),
            "REVIEWBOT_DATA_DIR": str(seeded(tmp_path / "data") if seed else tmp_path / "data"),
            "REVIEWBOT_GITEA__URL": sim_server.gitea_url,
            "REVIEWBOT_GITEA__TOKEN": tokens[FORGE],
            "REVIEWBOT_GITEA__WEBHOOK_SECRET": SECRET,
            "REVIEWBOT_GITEA__BOT_LOGIN": BOT,
            "REVIEWBOT_WORKERS": "2",
            # A new Python process per test on a busy machine; no test here is about expiry.
            "REVIEWBOT_LEASES__LEASE_S": "600",
        }
    )


def green_pr(sim: Simulator) -> Any:
    pr = sim.open_pr(FORGE, REPO, author="alice")
    sim.set_status(FORGE, REPO, pr.head_sha, "ci/test", "success")
    return pr


def bot_reviews(sim: Simulator, number: int) -> list[Any]:
    return [r for r in sim.pull(FORGE, REPO, number).reviews if r.user == BOT]


def assert_the_tools_shaped_the_review(sim: Simulator, pr: Any, log: str = "") -> None:
    (review,) = bot_reviews(sim, pr.number)
    assert (review.state, review.commit_id) == (CHANGES[FORGE], pr.head_sha), log
    assert sorted((c.path, c.line, c.body) for c in review.comments) == EXPECTED_COMMENTS


async def wait_for_review(sim: Simulator, number: int) -> None:
    await wait_for(lambda: bot_reviews(sim, number), "the bot's review", limit_s=REVIEW_S)


# -- each kind of process -----------------------------------------------------------------


async def test_under_serve_a_reviewer_without_network_reaches_its_tools(
    tmp_path: Path, sim: Simulator, sim_server: SimServer
) -> None:
    env = reviewer_env(tmp_path, sim_server, prepare_sim(sim))
    pr = green_pr(sim)
    async with serve_process(cwd=tmp_path, env=env, start_s=START_S) as bot:
        sim.set_webhook(FORGE, url=f"{bot.base}/webhooks/{FORGE}", secret=SECRET)
        await sim.deliver_pull_request(FORGE, REPO, pr.number, action="opened")
        await wait_for_review(sim, pr.number)
        log = await bot.stop()
    assert_the_tools_shaped_the_review(sim, pr, log)


async def test_under_an_unprivileged_serve_a_reviewer_without_network_reaches_its_tools(
    tmp_path: Path, sim: Simulator, sim_server: SimServer
) -> None:
    """The serve runs as uid 65534, not root: the socket is that user's, as its reviewers are."""
    python, extra = python_for_nobody()
    tokens = prepare_sim(sim)
    with workdir(tmp_path, NOBODY) as base:
        env = {**reviewer_env(base, sim_server, tokens, python=python, seed=False), **extra}
        for path in base.rglob("*"):
            os.chown(path, NOBODY, NOBODY)
        pr = green_pr(sim)
        async with serve_process(
            cwd=base, env=env, start_s=START_S, user=NOBODY, python=python
        ) as bot:
            sim.set_webhook(FORGE, url=f"{bot.base}/webhooks/{FORGE}", secret=SECRET)
            await sim.deliver_pull_request(FORGE, REPO, pr.number, action="opened")
            await wait_for_review(sim, pr.number)
            log = await bot.stop()
    assert_the_tools_shaped_the_review(sim, pr, log)


async def test_under_mcp_stdio_a_reviewer_without_network_reaches_its_tools(
    tmp_path: Path, sim: Simulator, sim_server: SimServer
) -> None:
    env = reviewer_env(tmp_path, sim_server, prepare_sim(sim))
    db = open_store(WorkflowPaths(Path(env["REVIEWBOT_DATA_DIR"])))
    try:
        token, _ = create_token(db, name="agent", scopes="review,read", repo=None, now=NOW)
    finally:
        db.close()
    pr = green_pr(sim)
    stdio_env = {**env, "REVIEWBOT_TOKEN": token}
    async with mcp_stdio(stdio_env) as client:
        ok(await client.call_tool("review_pr", {"forge": FORGE, "repo": REPO, "number": pr.number}))
        await wait_for_review(sim, pr.number)
    assert_the_tools_shaped_the_review(sim, pr)


async def test_under_reviewbot_review_a_reviewer_without_network_reaches_its_tools(
    tmp_path: Path, sim: Simulator, sim_server: SimServer
) -> None:
    env = reviewer_env(tmp_path, sim_server, prepare_sim(sim))
    pr = green_pr(sim)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "reviewbot", "review", f"{FORGE}:{REPO}#{pr.number}", "--json",
        cwd=tmp_path, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), REVIEW_S)
    assert proc.returncode == 0, err.decode()
    result = json.loads(out)
    assert result["decision"]["reason_code"] == "reviewer_findings", result
    assert_the_tools_shaped_the_review(sim, pr, err.decode())


# -- what a reviewer or another local user tries against the sockets -----------------------


@asynccontextmanager
async def tools_service(tmp_path: Path) -> AsyncIterator[Service]:
    """A service with its store and tools only (what every process kind has), a short body
    read deadline."""
    settings = Settings(data_dir=seeded(tmp_path / "data"), body_read_timeout_s=1.0)
    async with build_service(settings, parts=Parts(0)) as service:
        yield service


def open_run(service: Service, run_id: str) -> str:
    """A run with the standard tools and one step; the step's token."""
    sessions = service.sessions
    paths = WorkflowPaths.from_settings(service.settings)
    sessions.open_run(run_id, db_access=DBAccess.READ, tools=run_tools(paths, sessions))
    step = sessions.open_child(run_id, "step-1")
    return sessions.issue_token(step.id, ttl_s=600)


def post(path: Path, request: bytes, *, then: bytes = b"") -> tuple[int, dict[str, Any]]:
    """One raw HTTP request on the Unix socket ``path`` (``then``: more body, sent after the
    first bytes); the status and the JSON answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(30)
        sock.connect(str(path))
        sock.sendall(request)
        if then:  # the server may refuse before it has read it all
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                sock.sendall(then)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
            if b"\r\n\r\n" in answer and answer.endswith(b"}"):
                break
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def request_head(token: str, extra: str) -> bytes:
    return (
        "POST /api/v1/tools/query_workflow_db HTTP/1.1\r\nHost: localhost\r\n"
        f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n{extra}\r\n"
    ).encode()


def query(path: Path, token: str) -> tuple[int, dict[str, Any]]:
    body = json.dumps({"arguments": {"sql": "SELECT 41 + 1 AS answer"}}).encode()
    return post(path, request_head(token, f"Content-Length: {len(body)}\r\n") + body)


async def test_a_runs_socket_is_private_and_serves_that_run_only(tmp_path: Path) -> None:
    async with tools_service(tmp_path) as service:
        sockets = service_tools_sockets(service)
        mine, other = open_run(service, "run-a"), open_run(service, "run-b")
        async with sockets("run-a") as a_socket, sockets("run-b") as b_socket:
            # Its folder and the socket: the reviewers' host user's alone.
            owner = STATE.drop_to.uid if STATE.drop_to is not None else os.geteuid()
            for path, mode in ((a_socket.parent, 0o700), (a_socket, 0o600)):
                st = path.lstat()
                assert (stat.S_IMODE(st.st_mode), st.st_uid) == (mode, owner), path
            assert stat.S_ISSOCK(a_socket.lstat().st_mode) and a_socket.name == TOOLS_SOCKET
            assert a_socket.parent != b_socket.parent

            status, answer = await asyncio.to_thread(query, a_socket, mine)
            assert status == 200 and answer["result"]["rows"] == [[42]], answer
            assert answer["session"] == "run-a/step-1" and answer["owner"] == "run-a"
            # Another run's token on this run's socket is unknown here, and the other way.
            for path, token in ((a_socket, other), (b_socket, mine)):
                status, answer = await asyncio.to_thread(query, path, token)
                assert (status, answer["error"]) == (401, "invalid_session_token"), answer
            # An API token or none: refused as on the server's route.
            status, answer = await asyncio.to_thread(query, a_socket, "rbt_not-a-session")
            assert (status, answer["error"]) == (401, "unauthorized")
        assert not a_socket.parent.exists()  # gone with the run


@pytest.mark.skipif(os.geteuid() != 0, reason="running a client as another user needs root")
async def test_another_local_user_cannot_connect_to_a_runs_socket(tmp_path: Path) -> None:
    async with tools_service(tmp_path) as service, service_tools_sockets(service)("run-a") as path:
        connect = f"import socket; socket.socket(socket.AF_UNIX).connect({str(path)!r})"
        done = await asyncio.to_thread(
            subprocess.run,
            ["/usr/bin/python3", "-I", "-c", connect],
            user=12345, group=12345, extra_groups=[], capture_output=True, text=True,
            timeout=60, check=False,
        )  # fmt: skip
    assert done.returncode != 0 and "PermissionError" in done.stderr, done.stderr


async def test_a_huge_or_never_ending_body_on_a_runs_socket_is_refused(tmp_path: Path) -> None:
    async with tools_service(tmp_path) as service:
        token = open_run(service, "run-a")
        async with service_tools_sockets(service)("run-a") as path:
            # Declared larger than 1 MiB: refused before any of it is read.
            huge = request_head(token, f"Content-Length: {4 * 1024 * 1024}\r\n")
            status, answer = await asyncio.to_thread(post, path, huge)
            assert (status, answer["error"]) == (413, "too_large"), answer
            # Chunked, without a length, past 1 MiB: refused while it arrives.
            chunk = b"x" * 65536
            stream = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(24))
            head = request_head(token, "Transfer-Encoding: chunked\r\n")
            status, answer = await asyncio.to_thread(post, path, head, then=stream)
            assert (status, answer["error"]) == (413, "too_large"), answer
            # A body that never ends: refused at the read deadline, not held open.
            stalled = request_head(token, "Content-Length: 1000\r\n") + b'{"arguments": '
            status, answer = await asyncio.to_thread(post, path, stalled)
            assert (status, answer["error"]) == (408, "body_timeout"), answer


# Run A's reviewer, given run B's socket (its host path) and run B's token: what it reaches.
PROBING_REVIEWER = (
    SOCKET_CLIENT
    + """
import sys
other_socket, other_token, host, port = sys.argv[1:5]
seen = {"folder": sorted(os.listdir(os.path.dirname(os.environ["REVIEWBOT_TOOLS_SOCKET"]))),
        "socket": os.environ["REVIEWBOT_TOOLS_SOCKET"],
        "tmp": sorted(os.listdir("/tmp"))}
try:
    socket.socket(socket.AF_UNIX).connect(other_socket)
    seen["other_socket"] = "connected"
except OSError as exc:
    seen["other_socket"] = type(exc).__name__
for name, attempt in (
    ("plant", lambda: open(os.path.join(os.path.dirname(seen["socket"]), "planted"), "w")),
    ("unlink", lambda: os.unlink(seen["socket"])),
):
    try:
        attempt()
        seen[name] = "done"
    except OSError as exc:
        seen[name] = type(exc).__name__
status, answer = call("query_workflow_db", {"sql": "SELECT 1"}, token=other_token)
seen["other_token"] = [status, answer.get("error")]
try:
    socket.create_connection((host, int(port)), timeout=5).close()
    seen["network"] = "connected"
except OSError as exc:
    seen["network"] = type(exc).__name__
seen["own"] = tool("query_workflow_db", sql="SELECT 6 * 7")["rows"]
print(json.dumps([{"path": "seen.json", "line": 1, "severity": "info",
                   "message": json.dumps(seen)}]))
"""
)


async def test_a_reviewer_reaches_its_own_runs_tools_and_nothing_of_another_run(
    tmp_path: Path,
) -> None:
    listener = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    host, port = listener.sockets[0].getsockname()[:2]
    script = tmp_path / "probe.py"
    script.write_text(PROBING_REVIEWER)
    try:
        async with tools_service(tmp_path) as service:
            sockets = service_tools_sockets(service)
            paths = WorkflowPaths.from_settings(service.settings)
            sessions = service.sessions
            other_token = open_run(service, "run-b")
            sessions.open_run("run-a", db_access=DBAccess.READ, tools=run_tools(paths, sessions))
            async with sockets("run-a") as a_socket, sockets("run-b") as b_socket:
                argv = [sys.executable, str(script), str(b_socket), other_token, host, str(port)]
                outcome = await run_external_reviewers(
                    [shlex.join(argv)],
                    run=start_run(paths, "run-a", {"delivery_id": "d-1"}),
                    sessions=sessions,
                    run_session_id="run-a",
                    tools_socket=a_socket,
                    limits=ReviewerLimits(timeout_s=60),
                    sandbox=Sandbox(STATE),
                    paths=paths,
                )
    finally:
        listener.close()
        await listener.wait_closed()
    assert outcome.errors == ()
    (finding,) = outcome.findings
    seen = json.loads(finding.message)
    assert seen["socket"] == str(TOOLS_FOLDER / TOOLS_SOCKET)
    assert seen["folder"] == [TOOLS_SOCKET]  # its own run's socket, nothing else
    # No run's socket folder in its /tmp (only the folders bound to show its own script).
    assert not [name for name in seen["tmp"] if name.startswith(FOLDER_PREFIX)]
    assert seen["other_socket"] == "FileNotFoundError"
    # Its socket's folder is read-only: nothing planted beside it, the socket not removed.
    assert seen["plant"] != "done" and seen["unlink"] != "done", seen
    assert seen["other_token"] == [401, "invalid_session_token"]
    assert seen["network"] != "connected"
    assert seen["own"] == [[42]]


async def test_a_socket_that_cannot_listen_fails_the_run_and_names_why(tmp_path: Path) -> None:
    """A socket path past the kernel's limit (a deep temporary folder): no reviewer runs
    without its tools, each is an error naming the cause, and nothing is left behind."""
    deep = tmp_path / ("d" * 120)
    deep.mkdir()
    async with tools_service(tmp_path) as service:
        assert service.tools is not None
        sockets = RunToolsSockets(service.tools, folder=deep)
        paths = WorkflowPaths.from_settings(service.settings)
        outcome = await review_in_run(
            ["python3 -c 'print([])'"],
            paths=paths,
            sessions=service.sessions,
            run_id="run-deep",
            delivery={"delivery_id": "d-1"},
            db_access=DBAccess.READ,
            endpoint=sockets,
            sandbox=Sandbox(STATE),
        )
    (error,) = outcome.errors
    assert "spawn_failed: the run's tools socket cannot listen" in error, error
    assert list(deep.iterdir()) == [] and service.sessions.live_sessions() == []
