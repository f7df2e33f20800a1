"""``reviewbot serve``: run the webhook and API server until SIGTERM or Ctrl-C.

Settings come from ``reviewbot.toml`` / ``REVIEWBOT_*`` (the store is the SQLite file in the
data dir unless configured). With no forge configured it still starts, says how to connect
one, and refuses webhooks. ``--sim`` starts an in-process forge simulator and connects both
forges to it, for trying the bot out.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import json
import secrets
import signal
import socket
import sys
from collections.abc import Callable
from typing import Any

from aiohttp import web

from reviewbot.cli import invoked_as
from reviewbot.config import (
    ConfigError,
    GiteaSettings,
    GitHubSettings,
    RepoRules,
    Settings,
    load_settings,
)
from reviewbot.core.models import RepoRef

HOW_TO_CONFIGURE = """\
No forge is configured, so every webhook is refused. To connect one, set for example:
  REVIEWBOT_GITHUB__TOKEN=...            (or REVIEWBOT_GITHUB__APP_ID + __PRIVATE_KEY_PATH)
  REVIEWBOT_GITHUB__WEBHOOK_SECRET=...   (the secret of the repository's webhook)
or for Gitea / Forgejo:
  REVIEWBOT_GITEA__URL=https://gitea.example.com
  REVIEWBOT_GITEA__TOKEN=...
  REVIEWBOT_GITEA__WEBHOOK_SECRET=...
and give the repositories rules in reviewbot.toml ([defaults] or [repos."FORGE:OWNER/NAME"]).
To try the bot against a simulated forge instead: {reviewbot} serve --sim"""


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "serve",
        help="run the webhook and API server",
        description=__doc__,
        epilog="Examples:\n  reviewbot serve\n  reviewbot serve --port 9000\n"
        "  reviewbot serve --sim",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--host", help="listen address (default: settings host, 127.0.0.1)")
    parser.add_argument("--port", type=int, help="listen port (default: settings port, 8080)")
    parser.add_argument(
        "--sim", action="store_true", help="connect both forges to an in-process simulator"
    )
    parser.add_argument(
        "--role",
        choices=("ingest", "work", "all"),
        help="ingest: acknowledge and journal deliveries only; work: gate, review and merge "
        "what any process journalled (no webhook routes); all: both (default: settings "
        "role, REVIEWBOT_ROLE, all). On SQLite one work (or all) process and any number of "
        "ingest processes may share one data directory",
    )
    parser.add_argument(
        "--no-workers",
        action="store_true",
        help="only journal deliveries; a later start (with workers) gates them",
    )
    parser.add_argument(
        "--shutdown-grace",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how long work in flight may finish at shutdown before it is re-queued",
    )
    parser.add_argument(
        "--log-format",
        choices=("json", "console"),
        help="log lines on stderr: json (one object a line) or console; default: console on "
        "a terminal, json otherwise (settings log_format)",
    )
    parser.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        help="the least important lines logged (default: settings log_level, info)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    overrides: dict[str, Any] = {}
    if args.host:
        overrides["host"] = args.host
    if args.port is not None:
        overrides["port"] = args.port
    if args.role:
        overrides["role"] = args.role
    settings = load_settings(**overrides)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(
            serve(
                settings,
                sim=args.sim,
                run_workers=not args.no_workers,
                shutdown_grace_s=args.shutdown_grace,
                # Read again the same way, so GET /api/v1/runtime sees a changed file.
                reload_settings=lambda: load_settings(**overrides),
                log_format=args.log_format,
                log_level=args.log_level,
            )
        )
    return 0


def _say(text: str) -> None:
    print(text, flush=True)


async def serve(
    settings: Settings,
    *,
    sim: bool = False,
    run_workers: bool = True,
    shutdown_grace_s: float = 10.0,
    reload_settings: Callable[[], Settings] | None = None,
    log_format: Any = None,
    log_level: str | None = None,
) -> None:
    # Start-up cost: every command's module loads with `reviewbot --help`; the server only here.
    from reviewbot.server.app import create_app, create_metrics_app
    from reviewbot.server.tools_socket import service_tools_sockets
    from reviewbot.service import Parts, Role, build_service, configure_logging

    # Before anything is written (the store, the simulator): a port in use stops the start
    # with the store untouched. The real bind below can still lose a race; it says the same.
    _check_port(settings.host, settings.port)
    if settings.metrics_port is not None:
        _check_port(settings.metrics_host, settings.metrics_port, how="REVIEWBOT_METRICS_PORT")
    sim_session = None
    if sim:
        sim_session = await SimSession.start(settings)
        settings = sim_session.settings
        reload_settings = None  # the simulator's settings are made here, not read
    elif not (settings.github.configured or settings.gitea.configured):
        _say(HOW_TO_CONFIGURE.format(reviewbot=invoked_as()))

    # After --sim made its secrets, so that they are redacted too.
    configure_logging(settings, log_format=log_format, level=log_level)
    # Without workers only the journal and the lease API run: deliveries wait for a start
    # with workers, which gates (and reviews) them.
    role = Role(settings.role)
    parts = None if run_workers else Parts.JOURNAL | Parts.MERGE
    service = build_service(
        settings,
        role=role,
        parts=parts,
        shutdown_grace_s=shutdown_grace_s,
        reload_settings=reload_settings,
        tools_endpoint=service_tools_sockets,  # each review run's own tools socket
    )
    app = create_app(service)
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, settings.host, settings.port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        if sim_session is not None:
            await sim_session.close()
        raise ConfigError(_listen_problem(settings.host, settings.port, exc)) from None
    host, port = runner.addresses[0][:2]
    base = f"http://{host}:{port}"
    metrics_runner = None
    if settings.metrics_port is not None:
        metrics_runner = web.AppRunner(create_metrics_app(app), access_log=None)
        await metrics_runner.setup()
        metrics_site = web.TCPSite(metrics_runner, settings.metrics_host, settings.metrics_port)
        try:
            await metrics_site.start()
        except OSError as exc:
            await metrics_runner.cleanup()
            await runner.cleanup()
            if sim_session is not None:
                await sim_session.close()
            where = (settings.metrics_host, settings.metrics_port)
            raise ConfigError(_listen_problem(*where, exc, how="REVIEWBOT_METRICS_PORT")) from None
        m_host, m_port = metrics_runner.addresses[0][:2]
        _say(f"reviewbot: metrics on http://{m_host}:{m_port}/metrics (no token)")
    if sim_session is not None:
        await sim_session.connect(base)
        _say(sim_session.describe(invoked_as(), _local_url(host, port), _status_token(service)))
    # Before the listening line: whoever reads it may stop the server at once, and that
    # stop must be the orderly one.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):  # not on every platform
            loop.add_signal_handler(sig, stop.set)
    store = settings.database_path if settings.postgres_url is None else "PostgreSQL"
    _say(f"reviewbot: listening on {base} as --role {role.value} (store {store})")
    _say(f"reviewbot: forges {', '.join(service.forges) or 'none'}; Ctrl-C stops")
    try:
        await stop.wait()
    finally:
        _say("reviewbot: stopping (work in flight finishes or goes back to the queue)")
        await runner.cleanup()
        if metrics_runner is not None:
            await metrics_runner.cleanup()
        if sim_session is not None:
            await sim_session.close()
    print("reviewbot: stopped", file=sys.stderr, flush=True)


STATUS_TOKEN = "status-page"  # noqa: S105 - the name of the read token the sign-in steps use


def _status_token(service: Any) -> bool:
    """Whether the store holds an active token named ``STATUS_TOKEN`` (then the printed
    steps only make a link for it: creating it again would be refused)."""
    from reviewbot.store.tokens import list_tokens  # the store loads with the server only

    if service.db is None:
        return False
    return any(t.name == STATUS_TOKEN for t in list_tokens(service.db, include_revoked=False))


def _check_port(host: str, port: int, *, how: str = "--port or REVIEWBOT_PORT") -> None:
    """Refuse a port another process listens on, or an address this machine does not have,
    by binding as the server will (with SO_REUSEADDR, as aiohttp does) and letting go at
    once (port 0 only checks the address)."""
    try:
        addresses = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except OSError:
        return  # an unresolvable host is named by the real bind, with its own words
    missing: list[OSError] = []
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                # As asyncio does: an address of a family the machine lacks (a name that
                # resolves to ::1 without IPv6) is skipped while another one binds.
                if exc.errno != errno.EADDRNOTAVAIL:
                    raise ConfigError(_listen_problem(host, port, exc, how=how)) from None
                missing.append(exc)
    if missing and len(missing) == len(addresses):
        raise ConfigError(_listen_problem(host, port, missing[0], how=how))


def _listen_problem(
    host: str, port: int, exc: OSError, *, how: str = "--port or REVIEWBOT_PORT"
) -> str:
    where = f"{host}:{port}"
    if exc.errno == errno.EADDRINUSE:
        return (
            f"cannot listen on {where}: the port is already in use (another reviewbot?); "
            f"choose another with {how}, or stop the other process"
        )
    if exc.errno == errno.EACCES:
        return (
            f"cannot listen on {where}: permission denied (ports below 1024 need privileges); "
            f"choose a port above 1023 with {how}"
        )
    return (
        f"cannot listen on {where}: {exc.strerror or exc}; check host and port "
        "(--host/--port, REVIEWBOT_HOST/REVIEWBOT_PORT)"
    )


def _local_url(host: str, port: int) -> str:
    """A URL of this server that a process on the same machine can reach."""
    if host in ("0.0.0.0", ""):  # noqa: S104 - naming the wildcard, not binding to it
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class SimSession:
    """An in-process forge simulator both forges are connected to (``serve --sim``).

    It has the user ``alice`` and the repository ``acme/demo`` on both forges, a bot user
    ``reviewbot`` whose token the server uses (an admin of ``acme/demo`` on Gitea, so that
    the ``/reviewbot review`` comment command can read the commenter's permission), and
    webhooks to the server signed with a secret made for this run. ``acme/demo`` requires
    ``ci/*`` and automerges (unless the configuration has its own table for it), so the
    printed steps end in an approval and a merge. Scenarios are driven through the
    simulator's ``/_sim`` API (docs/simulator.md).
    """

    REPO = "acme/demo"
    FORGE = "gitea"  # the forge the printed steps use
    RULES = RepoRules(required_checks=["ci/*"], automerge=True)

    def __init__(self, settings: Settings, sim: Any, server: Any, secret: str) -> None:
        self.settings = settings
        self.sim = sim
        self.server = server
        self.secret = secret

    @classmethod
    async def start(cls, settings: Settings) -> SimSession:
        # Only `serve --sim` needs the simulator, which is never on the serving path.
        from reviewbot.sim import SimServer, Simulator

        # Fresh SHAs each run: the store may hold an earlier run's decisions for acme/demo#1,
        # and a head it already approved would never be reviewed again. Named SHAs (no git)
        # are fresh whatever the clock; git's would repeat within the same second.
        sim = Simulator(sha_seed=secrets.token_hex(8), git=False)
        where = (settings.sim_host, settings.sim_port)
        try:
            server = await SimServer(sim, host=where[0], port=where[1]).start()
        except OSError as exc:
            raise ConfigError(_listen_problem(*where, exc, how="REVIEWBOT_SIM_PORT")) from None
        secret = secrets.token_hex(16)
        tokens = {}
        for forge in ("github", "gitea"):
            tokens[forge] = sim.add_user(forge, "reviewbot", bot=True)
            sim.add_user(forge, "alice")
            sim.create_repo(forge, cls.REPO, default_branch="main")
            sim.set_permission(forge, cls.REPO, "alice", "write")
        # Gitea shows another user's permission to admins only; the /reviewbot review
        # comment command needs it (docs/gitea.md: Admin, optional).
        sim.set_permission("gitea", cls.REPO, "reviewbot", "admin")
        repos = dict(settings.repos)
        for forge in ("github", "gitea"):
            repos.setdefault(RepoRef.parse(cls.REPO, forge=forge).qualified_key, cls.RULES)
        connected = settings.model_copy(
            update={
                "github": GitHubSettings(
                    api_url=server.github_api_url,
                    token=tokens["github"],
                    webhook_secret=secret,
                    bot_login="reviewbot",
                ),
                "gitea": GiteaSettings(
                    url=server.gitea_url,
                    token=tokens["gitea"],
                    webhook_secret=secret,
                    bot_login="reviewbot",
                ),
                "defaults": settings.defaults or RepoRules(),
                "repos": repos,
            }
        )
        return cls(connected, sim, server, secret)

    async def connect(self, base_url: str) -> None:
        for forge in ("github", "gitea"):
            self.sim.set_webhook(forge, url=f"{base_url}/webhooks/{forge}", secret=self.secret)

    def describe(self, reviewbot: str, base_url: str, has_token: bool) -> str:
        """The simulator's addresses, the steps from a new PR to its merge, and how to sign
        in to the status page; ``reviewbot`` is how this process was started, so that each
        printed command runs as typed."""
        control = f"{self.server.base_url}/_sim"
        forge, repo = self.FORGE, self.REPO
        rules = self.settings.rules_for(RepoRef.parse(repo, forge=forge)) or RepoRules()
        pr = f'"forge": "{forge}", "repo": "{repo}"'

        def post(action: str, body: str) -> str:
            return f"  curl -s -X POST {control}/{action} -d '{{{body}}}'"

        return "\n".join(
            [
                f"reviewbot: forge simulator at {self.server.base_url} "
                f"(GitHub API {self.server.github_api_url}, Gitea {self.server.gitea_url}; "
                "its /_sim API: docs/simulator.md)",
                f"reviewbot: repository {repo} on both forges; rules for {forge}:{repo}: "
                f"required_checks = {json.dumps(rules.required_checks)}, "
                f"automerge = {str(rules.automerge).lower()}",
                "reviewbot: try it, one step at a time:",
                "  # 1. alice opens a pull request, and the forge sends its webhook",
                post("pulls", f'{pr}, "author": "alice"'),
                post("deliver", f'"kind": "pull_request", {pr}, "number": 1'),
                "  # 2. the bot waits for the required checks; explain shows why",
                f"  {reviewbot} explain {forge}:{repo}#1",
                "  # 3. CI reports ci/test: success at the PR's head, and the forge sends it",
                post(
                    "statuses",
                    f'{pr}, "number": 1, "context": "ci/test", "state": "success"',
                ),
                post("deliver", f'"kind": "status", {pr}'),
                "  # 4. the bot approved at the head and merged it: reviews, merged: true",
                f"  curl -s {control}/pulls/{forge}/{repo}/1",
                f"  {reviewbot} explain {forge}:{repo}#1",
                f"reviewbot: status page at {base_url}/ (docs/status-page.md); to sign in, "
                + (
                    "open the link this prints:"
                    if has_token
                    else "make a read token, then open the link the second command prints:"
                ),
                *(
                    []
                    if has_token
                    else [f"  {reviewbot} token create --name {STATUS_TOKEN} --scopes read"]
                ),
                f"  {reviewbot} token link {STATUS_TOKEN} --url {base_url}",
            ]
        )

    async def close(self) -> None:
        await self.server.stop()
