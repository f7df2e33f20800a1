"""Git's smart HTTP protocol for the simulated repositories, served by ``git http-backend``.

Each repository is cloned from the ``clone_url`` its forge's JSON gives: GitHub's
``{base}/web/OWNER/NAME.git``, Gitea's ``{base}/gitea/OWNER/NAME.git``. Authentication is
HTTP Basic as both forges take it: GitHub a token as the password with any user name
(``x-access-token`` for an installation token), Gitea a user name and a token as the
password. Fetching needs read access, pushing write access; a push's moved branches become
the simulator's (pull request heads follow) and each sends a ``push`` webhook.

Sources: git-http-backend(1) (the CGI variables), gitprotocol-http(5); GitHub "Authenticating
with GitHub Apps" (``x-access-token``), Gitea ``services/auth/basic.go``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from typing import TYPE_CHECKING

from aiohttp import web

from reviewbot.sim.errors import ApiError
from reviewbot.sim.git import GIT, base_env
from reviewbot.sim.github_auth import identify
from reviewbot.sim.permissions import LEVELS, role_at_least
from reviewbot.sim.state import SimRepo

if TYPE_CHECKING:
    from reviewbot.sim.simulator import Simulator

CHUNK = 64 * 1024
REALMS = {"github": "GitHub", "gitea": "Gitea"}
_LOCKS: dict[int, asyncio.Lock] = {}


def basic_credentials(header: str) -> tuple[str, str] | None:
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user, sep, password = base64.b64decode(value.strip()).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return (user, password) if sep and password else None


def _refuse(forge: str, status: int, text: str) -> web.Response:
    headers = {"WWW-Authenticate": f'Basic realm="{REALMS[forge]}"'} if status == 401 else {}
    return web.Response(status=status, text=text + "\n", headers=headers)


def may_access(sim: Simulator, repo: SimRepo, header: str, write: bool) -> tuple[int, str]:
    """``(0, login)`` when the credentials let the caller fetch (or push, ``write``);
    otherwise the HTTP status to answer and why."""
    credentials = basic_credentials(header)
    if credentials is None:
        return 401, "Authentication required"
    _, token = credentials
    need = "write" if write else "read"
    if repo.forge == "gitea":
        login = sim.login_for_token("gitea", token)
        if login is None:
            return 401, "Authentication failed"
        role = sim.permission(repo, login)
        if role == "none" and repo.private:
            return 404, "Repository not found"
        if write and not role_at_least(role, "write"):
            return 403, "User permission denied for writing."
        return 0, login
    try:
        who = identify(sim, f"token {token}")
    except ApiError:
        return 401, "Invalid username or token. Password authentication is not supported."
    if who.kind == "app":
        return 401, "Invalid username or token."
    if who.kind == "installation":
        installation = sim.installations[who.installation_id or 0]
        if repo.full_name.lower() not in installation.repos:
            return 404, "Repository not found."
        granted = installation.permissions.get("contents", "none")
        if LEVELS.get(granted, 0) < LEVELS[need]:
            return 403, f"Permission to {repo.full_name}.git denied to {who.login}."
        return 0, who.login
    fine = sim.token_permissions(token)
    if fine is not None and LEVELS.get(fine.get("contents", "none"), 0) < LEVELS[need]:
        return 403, f"Permission to {repo.full_name}.git denied to {who.login}."
    role = sim.permission(repo, who.login)
    if role == "none" and repo.private:
        return 404, "Repository not found."
    if write and not role_at_least(role, "write"):
        return 403, f"Permission to {repo.full_name}.git denied to {who.login}."
    return 0, who.login


async def serve_git(request: web.Request, sim: Simulator, forge: str) -> web.StreamResponse:
    owner = request.match_info["owner"]
    name = request.match_info["name"]
    tail = request.match_info["tail"]
    repo = sim.find_repo(forge, owner, name)
    git = sim.git_of(repo) if repo is not None else None
    if repo is None or git is None or sim.git_root is None:
        return _refuse(forge, 404, "Repository not found")
    service = request.query.get("service", "")
    write = tail == "git-receive-pack" or service == "git-receive-pack"
    status, who = may_access(sim, repo, request.headers.get("Authorization", ""), write)
    if status:
        return _refuse(forge, status, who)
    if tail == "git-receive-pack":
        lock = _LOCKS.setdefault(repo.id, asyncio.Lock())
        async with lock:
            before = git.refs()
            response = await _run_backend(request, sim, repo, tail, who)
            after = git.refs()
        _absorb_push(sim, repo, before, after, who)
        return response
    return await _run_backend(request, sim, repo, tail, who)


def _absorb_push(
    sim: Simulator, repo: SimRepo, before: dict[str, str], after: dict[str, str], pusher: str
) -> None:
    """The branches a receive-pack moved, made the simulator's (with their webhooks)."""
    git = sim.git_of(repo)
    assert git is not None
    for ref in sorted(set(before) | set(after)):
        if not ref.startswith("refs/heads/") or before.get(ref) == after.get(ref):
            continue
        branch = ref.removeprefix("refs/heads/")
        new = after.get(ref)
        old = before.get(ref)
        if new is not None:
            sim.record_git_commit(repo, new)
        forced = old is not None and new is not None and not git.is_ancestor(old, new)
        sim.set_branch(repo, branch, new, pusher, forced=forced)


async def _run_backend(
    request: web.Request, sim: Simulator, repo: SimRepo, tail: str, user: str
) -> web.StreamResponse:
    assert sim.git_root is not None
    env = base_env()
    env.update(
        GIT_PROJECT_ROOT=str(sim.git_root / repo.forge),
        GIT_HTTP_EXPORT_ALL="1",
        PATH_INFO=f"/{repo.id}.git/{tail}",
        QUERY_STRING=request.query_string,
        REQUEST_METHOD=request.method,
        REMOTE_USER=user,
        REMOTE_ADDR=request.remote or "127.0.0.1",
        CONTENT_TYPE=request.headers.get("Content-Type", ""),
        SERVER_PROTOCOL="HTTP/1.1",
        GATEWAY_INTERFACE="CGI/1.1",
    )
    # aiohttp has already undone chunking and inflated a gzip body (git gzips large fetch
    # negotiations), so git gets the plain body: no HTTP_CONTENT_ENCODING, and a length
    # only when the body was sent as is (otherwise it reads to the end).
    if request.headers.get("Git-Protocol"):
        env["GIT_PROTOCOL"] = request.headers["Git-Protocol"]
    if request.content_length is not None and not request.headers.get("Content-Encoding"):
        env["CONTENT_LENGTH"] = str(request.content_length)
    process = await asyncio.create_subprocess_exec(
        GIT,
        "http-backend",
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdin is not None and process.stdout is not None
    feeding = asyncio.create_task(_feed(request, process.stdin))
    try:
        head = b""
        while b"\r\n\r\n" not in head and b"\n\n" not in head:
            chunk = await process.stdout.read(CHUNK)
            if not chunk:
                break
            head += chunk
        cut = head.find(b"\r\n\r\n")
        sep = 4
        if cut < 0:
            cut, sep = head.find(b"\n\n"), 2
        raw_headers, rest = (head[:cut], head[cut + sep :]) if cut >= 0 else (head, b"")
        status = 200
        response = web.StreamResponse()
        for line in raw_headers.decode("latin-1").splitlines():
            key, _, value = line.partition(":")
            if key.lower() == "status":
                status = int(value.strip().split()[0])
            elif key:
                response.headers[key.strip()] = value.strip()
        response.set_status(status)
        await response.prepare(request)
        if rest:
            await response.write(rest)
        while chunk := await process.stdout.read(CHUNK):
            await response.write(chunk)
        await response.write_eof()
        return response
    finally:
        await feeding
        await process.wait()


async def _feed(request: web.Request, stdin: asyncio.StreamWriter) -> None:
    """Stream the request body to the backend (and close its input, its end of body)."""
    try:
        async for chunk in request.content.iter_chunked(CHUNK):
            stdin.write(chunk)
            await stdin.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass
    finally:
        stdin.close()


def add_git_routes(app: web.Application, sim_key: web.AppKey[Simulator]) -> None:
    async def github(request: web.Request) -> web.StreamResponse:
        return await serve_git(request, request.app[sim_key], "github")

    async def gitea(request: web.Request) -> web.StreamResponse:
        return await serve_git(request, request.app[sim_key], "gitea")

    for prefix, handler in (("/web", github), ("/gitea", gitea)):
        path = prefix + r"/{owner}/{name:[^/]+?}.git/{tail:.*}"
        app.router.add_route("GET", path, handler)
        app.router.add_route("POST", path, handler)
