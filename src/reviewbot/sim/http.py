"""The plumbing shared by the simulated forge APIs: a call, a reply, a route table."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web

from reviewbot.sim.errors import ApiError

if TYPE_CHECKING:
    from reviewbot.sim.simulator import Simulator


@dataclass
class Call:
    """One authenticated API request, as a handler sees it."""

    sim: Simulator
    request: web.Request
    params: dict[str, str]
    body: Any
    login: str = ""
    installation_id: int | None = None
    token: str = ""
    links: str = ""  # GitHub's Link header of a paginated answer (next, last)

    def query(self, name: str, default: str | None = None) -> str | None:
        return self.request.query.get(name, default)

    def int_param(self, name: str) -> int:
        try:
            return int(self.params[name])
        except ValueError:
            raise ApiError(404, "Not Found") from None


@dataclass
class Reply:
    status: int
    body: Any = None  # JSON value; None means an empty body
    headers: dict[str, str] = field(default_factory=dict)

    def to_response(self) -> web.Response:
        if self.body is None:
            return web.Response(status=self.status, headers=self.headers)
        text = json.dumps(self.body, separators=(",", ":"))
        return web.Response(
            status=self.status,
            body=text.encode(),
            content_type="application/json",
            charset="utf-8",
            headers=self.headers,
        )


Handler = Callable[[Call], Awaitable[Reply]]


@dataclass(frozen=True)
class Route:
    method: str
    path: str  # the official description's path template
    operation_id: str
    handler: Handler
