"""A review run's own tools endpoint: the session tools route, over HTTP on a Unix socket.

Every process that runs reviews (``serve``, ``mcp --stdio``, ``reviewbot review``) opens one
socket per run, so a reviewer reaches the session tools of its run whichever process claimed
the review, and without any network: the sandbox binds the socket's folder at
``/run/reviewbot`` (:data:`reviewbot.core.sandbox.TOOLS_FOLDER`) and the reviewer keeps its
own empty network namespace.

- The socket lies in a folder of its own made for the run (mode 0700; the socket 0600),
  owned by the host user reviewers run as (``sandbox_uid`` under a root bot, the bot's own
  user otherwise): no other user of the host can reach it, and a reviewer of another run
  never sees it (its sandbox binds only its own run's folder).
- It answers ``POST /api/v1/tools/{name}`` with the very handler of the server's route
  (:func:`reviewbot.server.tools.tool_handler`): the same token check, session scoping,
  refusals, rate limits and call records. Only the sessions of its run are callers there;
  API tokens call the server's route.
- Bodies are bounded as on the server's route: 1 MiB, and the server's
  ``body_read_timeout_s`` for one still arriving.
- It stops listening and its folder is removed when the run ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web

from reviewbot.core.quota import RouteClass
from reviewbot.core.sandbox import TOOLS_SOCKET, HostUser
from reviewbot.runtime.reviewers.tools import ToolDispatcher
from reviewbot.server.errors import errors_middleware
from reviewbot.server.quota import admit
from reviewbot.server.tools import MAX_TOOL_BODY_BYTES, TOOLS_ROUTE, Admit, tool_handler
from reviewbot.service import Service

FOLDER_PREFIX = "reviewbot-tools-"


class RunToolsSockets:
    """Opens each run's tools socket: call it with the run id (a
    :data:`~reviewbot.runtime.reviewers.runner.ToolsEndpoint`)."""

    def __init__(
        self,
        dispatcher: ToolDispatcher,
        *,
        admit: Admit | None = None,
        owner: HostUser | None = None,
        read_timeout_s: float | None = None,
        folder: Path | None = None,
    ) -> None:
        """``admit`` takes each caller's call from the rate limits; ``owner`` is the host
        user reviewers run as when it is not this process's; ``folder`` holds the runs'
        private folders (default: the system's temporary folder: a socket's path must stay
        under about 100 bytes)."""
        self.dispatcher = dispatcher
        self.admit = admit
        self.owner = owner
        self.read_timeout_s = read_timeout_s
        self.folder = folder

    @contextlib.asynccontextmanager
    async def __call__(self, run_id: str) -> AsyncIterator[Path]:
        app = web.Application(
            client_max_size=MAX_TOOL_BODY_BYTES, middlewares=[errors_middleware()]
        )
        handler = tool_handler(
            self.dispatcher, admit=self.admit, run_id=run_id, read_timeout_s=self.read_timeout_s
        )
        app.router.add_post(TOOLS_ROUTE, handler)
        folder = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX, dir=self.folder))  # mode 0700
        runner = web.AppRunner(app, handle_signals=False, access_log=None)
        try:
            socket = folder / TOOLS_SOCKET
            await runner.setup()
            await web.UnixSite(runner, str(socket)).start()
            os.chmod(socket, 0o600)
            if self.owner is not None:  # a root bot's reviewers are this user on the host
                for path in (folder, socket):
                    os.chown(path, self.owner.uid, self.owner.gid)
            yield socket
        finally:
            await runner.cleanup()
            # Off the event loop: removing a folder can take milliseconds on some filesystems.
            await asyncio.to_thread(shutil.rmtree, folder, ignore_errors=True)


def service_tools_sockets(service: Service) -> RunToolsSockets:
    """The tools sockets of ``service``'s review runs: its dispatcher (sessions and call
    records), its rate limits, its sandbox's host user and its body read deadline."""
    assert service.tools is not None
    return RunToolsSockets(
        service.tools,
        admit=lambda caller: admit(service, caller, RouteClass.TOOLS),
        owner=service.external.sandbox.state.drop_to,
        read_timeout_s=service.settings.body_read_timeout_s,
    )
