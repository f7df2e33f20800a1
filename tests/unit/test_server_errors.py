"""The error model's one rule for errors without a code of their own: an internal failure.

Every error reviewbot raises now derives from ``ReviewbotError``; one that carries only the
root's code (a configuration or store failure deep below a handler) must still answer like
any unexpected failure: a 500 ``internal_error`` that never shows its text.
"""

from __future__ import annotations

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from reviewbot.config import ConfigError
from reviewbot.core.errors import Refused
from reviewbot.server.errors import errors_middleware
from reviewbot.workflowdb.migrations import MigrationError


async def _answer(exc: Exception) -> tuple[int, dict[str, object]]:
    async def handler(request: web.Request) -> web.Response:
        raise exc

    app = web.Application(middlewares=[errors_middleware()])
    app.router.add_get("/x", handler)
    async with TestClient(TestServer(app)) as client:
        response = await client.get("/x")
        return response.status, await response.json()


async def test_an_error_without_a_code_of_its_own_answers_500_without_its_text() -> None:
    for exc in (
        ConfigError("data_dir /srv/secret-place: cannot write there"),
        MigrationError("/srv/secret-place/db/migrations/0013_x.sql: disk I/O error"),
    ):
        status, body = await _answer(exc)
        assert status == 500
        assert body == {"error": "internal_error", "detail": "the server failed; see its log"}


async def test_a_refusal_still_answers_with_its_code_and_detail() -> None:
    status, body = await _answer(Refused("worker w is held by x", code="lease_held"))
    assert status == 409 and body == {"error": "lease_held", "detail": "worker w is held by x"}
