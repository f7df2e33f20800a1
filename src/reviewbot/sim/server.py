"""The aiohttp application serving both forges and the control API, and ``SimServer``."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import re
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

from aiohttp import web

from reviewbot.sim.control import SIM_KEY, add_control_routes
from reviewbot.sim.faults import FaultRule
from reviewbot.sim.gitea_api import GiteaApi
from reviewbot.sim.githttp import add_git_routes
from reviewbot.sim.github_api import DOCS, GitHubApi, error_body
from reviewbot.sim.http import Route
from reviewbot.sim.issues_api import GiteaIssues, GitHubIssues
from reviewbot.sim.records import RequestRecord
from reviewbot.sim.refs_api import GiteaRefs, GitHubRefs
from reviewbot.sim.simulator import Simulator

log = logging.getLogger(__name__)

GITHUB_PREFIX = "/github"
GITEA_PREFIX = "/gitea/api/v1"
MAX_BODY = 5 * 1024 * 1024
TICK = 0.05  # seconds of real time between looks at the CI builds due

RELEASE_KEY = web.AppKey("release", asyncio.Event)
_ROUTES_KEY = web.AppKey("routes", dict)

Serve = Callable[[Route, web.Request, Any], Awaitable[web.Response]]


def _forge_of(path: str) -> tuple[str, str] | None:
    for forge, prefix in (("github", GITHUB_PREFIX), ("gitea", GITEA_PREFIX)):
        if path == prefix or path.startswith(prefix + "/"):
            return forge, path[len(prefix) :] or "/"
    return None


def _fault_response(forge: str, rule: FaultRule, status: int) -> web.Response:
    headers: dict[str, str] = {}
    if rule.retry_after is not None:
        headers["retry-after"] = str(int(rule.retry_after))
    if forge == "github":
        if rule.secondary_rate_limit:
            body = {
                "message": "You have exceeded a secondary rate limit. Please wait a few minutes "
                "before you try again.",
                "documentation_url": f"{DOCS}/overview/rate-limits-for-the-rest-api"
                "#about-secondary-rate-limits",
            }
        elif status == 429 or (status == 403 and rule.retry_after is not None):
            body = error_body(status, "API rate limit exceeded.")
            headers["x-ratelimit-remaining"] = "0"
        else:
            body = error_body(status, "Server Error" if status >= 500 else "Injected fault")
    else:
        body = {"message": "injected fault", "url": ""}
    return web.json_response(body, status=status, headers=headers)


def _unparsable(forge: str) -> web.Response:
    """A body that is not JSON: GitHub's 400, Gitea's binding error (422)."""
    if forge == "github":
        return web.json_response(
            {"message": "Problems parsing JSON", "documentation_url": DOCS}, status=400
        )
    return web.json_response({"message": "invalid JSON body", "url": ""}, status=422)


def _parse_json(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:  # UnicodeDecodeError included
        return None


def build_app(sim: Simulator) -> web.Application:
    """One application: ``/github``, ``/gitea/api/v1`` and the ``/_sim`` control API."""
    app = web.Application(client_max_size=MAX_BODY, middlewares=[_forge_middleware])
    app[SIM_KEY] = sim
    app[RELEASE_KEY] = asyncio.Event()
    routes: dict[tuple[str, str], tuple[str, Route, Serve]] = {}
    github, gitea = GitHubApi(sim), GiteaApi(sim)
    extra = {
        "github": GitHubRefs(github).routes() + GitHubIssues(github).routes(),
        "gitea": GiteaRefs(gitea).routes() + GiteaIssues(gitea).routes(),
    }
    for forge, prefix, api in (("github", GITHUB_PREFIX, github), ("gitea", GITEA_PREFIX, gitea)):
        serve: Serve = api.serve
        for route in [*api.routes(), *extra[forge]]:
            resource_path = prefix + route.path
            # The middleware finds a route by its resource's canonical path (no regexes).
            canonical = re.sub(r"\{(\w+):[^}]+\}", r"{\1}", resource_path)
            routes[(route.method, canonical)] = (forge, route, serve)
            app.router.add_route(route.method, resource_path, _placeholder)
    # GraphQL is no REST operation: served beside the REST description's routes.
    graphql_route = _graphql_route(github)
    if graphql_route is not None:
        path = GITHUB_PREFIX + graphql_route.path
        routes[("POST", path)] = ("github", graphql_route, github.serve)
        app.router.add_route("POST", path, _placeholder)
    app[_ROUTES_KEY] = routes
    add_control_routes(app)
    add_git_routes(app, SIM_KEY)
    return app


def _graphql_route(github: GitHubApi) -> Route | None:
    """GitHub's ``POST /graphql``; none without graphql-core (a test dependency), and then the
    bot reads over REST, as against a server without GraphQL."""
    try:
        # Here, not at the top: graphql-core may be absent outside the suite.
        from reviewbot.sim.github_graphql import GitHubGraphQL
    except ImportError:  # pragma: no cover - the suite installs it
        return None
    return GitHubGraphQL(github).route()


async def _placeholder(request: web.Request) -> web.StreamResponse:  # pragma: no cover
    raise web.HTTPInternalServerError  # the middleware answers every forge route


async def _hold(app: web.Application, seconds: float) -> None:
    """Wait ``seconds`` or until the server shuts down, whichever comes first."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(app[RELEASE_KEY].wait(), timeout=seconds)


@web.middleware
async def _forge_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    located = _forge_of(request.path)
    if located is None:
        return await handler(request)
    forge, rel_path = located
    app = request.app
    sim = app[SIM_KEY]
    raw = await request.read()
    body = _parse_json(raw)
    resource = request.match_info.route.resource
    canonical = resource.canonical if resource is not None else ""
    entry = app[_ROUTES_KEY].get((request.method, canonical))
    rule = sim.faults.take(forge, request.method, rel_path)
    response = web.Response(status=499)  # only kept when the client has gone
    dropped = False
    if rule is not None:
        if rule.before is not None:
            result = rule.before()
            if inspect.isawaitable(result):
                await result
        if rule.delay:
            await asyncio.sleep(rule.delay)
    status = rule.answer_status if rule is not None else None
    if entry is None:
        if forge == "github":
            response = web.json_response(error_body(404, "Not Found"), status=404)
        else:
            response = web.json_response({"message": "Not Found", "url": ""}, status=404)
    elif raw.strip() and body is None:
        response = _unparsable(forge)
    elif rule is not None and status is not None and not rule.apply_then_fail:
        await _hold(app, rule.hold_seconds)
        response = _fault_response(forge, rule, status)
    else:
        _, route, serve = entry
        applied = rule is None or rule.apply_then_fail or not rule.hold_seconds
        if rule is not None and not applied:
            await _hold(app, rule.hold_seconds)
            if request.transport is None or request.transport.is_closing():
                # The client gave up while the answer was held: nothing happens, as when a
                # request is lost before the forge handles it.
                dropped = True
        if not dropped:
            response = await serve(route, request, body)
            if rule is not None and applied:
                await _hold(app, rule.hold_seconds)
                if status is not None:
                    response = _fault_response(forge, rule, status)
    raw_out = response.body if isinstance(response.body, bytes) else b""
    sim.requests.append(
        RequestRecord(
            forge=forge,
            method=request.method,
            path=rel_path,
            query={k: request.query.getall(k) for k in request.query},
            status=response.status,
            operation_id=entry[1].operation_id if entry else "",
            body=body,
            route=entry[1].path if entry else "",
            path_params=dict(request.match_info) if entry else {},
            request_headers={
                k: v for k, v in request.headers.items() if k.lower() != "authorization"
            },
            response_headers=dict(response.headers),
            response_body=_parse_json(raw_out),
            raw_request_body=raw,
            raw_response_body=raw_out,
            fault=rule is not None and status is not None,
            dropped=dropped,
        )
    )
    return response


def _bound_port(runner: web.AppRunner) -> int:
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            return int(address[1])
    raise RuntimeError("the simulator is not listening on a TCP port")


class SimServer:
    """Serves a :class:`Simulator` over real HTTP on loopback (``port=0``: any free port)."""

    def __init__(self, sim: Simulator, host: str = "127.0.0.1", port: int = 0) -> None:
        self.sim = sim
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None
        self._app: web.Application | None = None
        self._ticker: asyncio.Task[None] | None = None

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def github_api_url(self) -> str:
        return f"{self.base_url}{GITHUB_PREFIX}"

    @property
    def gitea_url(self) -> str:
        return f"{self.base_url}/gitea"

    @property
    def gitea_api_url(self) -> str:
        return f"{self.base_url}{GITEA_PREFIX}"

    async def start(self) -> SimServer:
        self._app = build_app(self.sim)
        self._runner = web.AppRunner(self._app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        if self.port == 0:
            self.port = _bound_port(self._runner)
        self.sim.base_url = self.base_url
        self._ticker = asyncio.create_task(self._tick())
        return self

    async def _tick(self) -> None:
        """Finish CI builds as the simulator's clock reaches them (a manual clock's too)."""
        while True:
            await asyncio.sleep(TICK)
            try:
                self.sim.run_due()
            except Exception:  # a broken build rule must not stop the others, or the server
                log.exception("simulated CI failed to finish a build")

    async def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
            self._ticker = None
        if self._app is not None:
            self._app[RELEASE_KEY].set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> SimServer:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
