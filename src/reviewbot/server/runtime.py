"""``GET /api/v1/runtime``: what is running, and whether it is what is on disk.

Scope ``read``. The answer (see ``docs/capability.md``): version and commit, schema version
and last migration, the configuration's hash (and the configuration itself, secrets shown as
``<secret>``; not to a token bound to one repository, as it names every repository), start
time, the sandbox state, and whether the code or the configuration on disk differs from
the running one (``restart_needed`` and its ``reasons``). The comparison with the disk is
made once at a time, shared by the callers that ask meanwhile (:mod:`reviewbot.runtime.reuse`).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

from aiohttp import web

from reviewbot.core.errors import Refused
from reviewbot.runtime.parity import RuntimeReport, disk_report, schema_state
from reviewbot.server.app_keys import SERVICE, STATE
from reviewbot.server.auth import authenticate


def add_routes(app: web.Application) -> None:
    app.router.add_get("/api/v1/runtime", api_runtime)


async def api_runtime(request: web.Request) -> web.Response:
    info = await authenticate(request, "read")
    service = request.app[SERVICE]
    db, boot = service.db, service.boot
    if db is None or boot is None:
        raise Refused("this server keeps no runtime record", code="not_found")
    sandbox = service.external.sandbox.state.describe()

    async def compare() -> RuntimeReport:
        schema = await db.run(schema_state, db)
        # Hashing the package's files and reading the configuration again block for far
        # longer than a store read: on a thread of their own, never the store's.
        return await asyncio.to_thread(disk_report, boot, schema, sandbox)

    # Callers asking while a comparison runs share it: a flood costs one at a time.
    report = await request.app[STATE].reports.get("runtime", compare)
    body = replace(report, sandbox=sandbox).to_json()
    if info.repo is not None:
        del body["config"]
    return web.json_response(body)
