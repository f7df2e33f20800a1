"""Talking to a real server's session tools and lease API as the DB-tool tests do."""

from __future__ import annotations

from typing import Any

from reviewbot.runtime.reviewers.tools import run_tools
from reviewbot.server.tools import SESSIONS
from reviewbot.workflowdb.access import DBAccess
from reviewbot.workflowdb.paths import WorkflowPaths
from tests.integration.server_support import Running

HEAD = "a" * 40
TARGET = {"forge": "gitea", "repo": "acme/api", "number": 12, "role": "merger"}


def paths_of(srv: Running) -> WorkflowPaths:
    return WorkflowPaths.from_settings(srv.service.settings)


def add_migration(srv: Running, name: str, sql: str) -> None:
    (paths_of(srv).migrations_dir / name).write_text(sql)


_runs = iter(range(1_000_000))


def session(srv: Running, access: DBAccess) -> str:
    """A token of a new run session of the server, with the standard tools."""
    sessions = srv.app[SESSIONS]
    run = sessions.open_run(
        f"run-{next(_runs)}", db_access=access, tools=run_tools(paths_of(srv), sessions)
    )
    return sessions.issue_token(run.id, ttl_s=600)


def rw_session(srv: Running) -> str:
    return session(srv, DBAccess.READ_WRITE)


async def tool(
    srv: Running, token: str, name: str, arguments: dict[str, Any]
) -> tuple[int, dict[str, Any]]:
    async with srv.http.post(
        f"{srv.base}/api/v1/tools/{name}",
        json={"arguments": arguments},
        headers={"Authorization": f"Bearer {token}"},
    ) as resp:
        return resp.status, await resp.json()


async def call(
    srv: Running, method: str, path: str, token: str | None, body: Any = None
) -> tuple[int, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with srv.http.request(method, srv.base + path, json=body, headers=headers) as resp:
        return resp.status, await resp.json()


async def hold_a_lease(srv: Running) -> tuple[str, dict[str, Any]]:
    token = srv.token("lease,read")
    status, worker = await call(
        srv, "POST", "/api/v1/workers", token,
        {"name": "agent", "client": "script", "session_id": "s-1", "role": "merger"},
    )  # fmt: skip
    assert status == 201, worker
    status, lease = await call(
        srv, "POST", "/api/v1/leases/acquire", token,
        {**TARGET, "worker_identity": worker["worker_identity"], "head_sha": HEAD},
    )  # fmt: skip
    assert status == 200, lease
    return token, lease


# What a reviewer puts first to call the session tools of its run over the Unix socket in
# REVIEWBOT_TOOLS_SOCKET, with the standard library only (as docs/external-reviewers.md
# shows): ``tool(name, **arguments)`` returns the result, or exits naming the refusal.
SOCKET_CLIENT = """\
import http.client, json, os, socket


class ToolsConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=30)
        self.socket_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.socket_path)


def call(name, arguments, token=None, path=None):
    connection = ToolsConnection(path or os.environ["REVIEWBOT_TOOLS_SOCKET"])
    connection.request(
        "POST", "/api/v1/tools/" + name, body=json.dumps({"arguments": arguments}),
        headers={"Authorization": "Bearer " + (token or os.environ["REVIEWBOT_SESSION_TOKEN"]),
                 "Content-Type": "application/json"},
    )
    response = connection.getresponse()
    answer = json.load(response)
    connection.close()
    return response.status, answer


def tool(name, **arguments):
    status, answer = call(name, arguments)
    if status != 200:
        raise SystemExit(name + ": " + answer["error"] + ": " + answer["detail"])
    return answer["result"]
"""
