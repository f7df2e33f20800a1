"""What the simulator saw and sent: one record per request its GitHub or Gitea API served, and
one per webhook delivery it sent (with the receiver's answer)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RequestRecord:
    """One request/response pair.

    ``path`` is relative to the forge's API root (``/repos/acme/api/pulls/1``), ``route`` is the
    matching path template of the official description
    (``/repos/{owner}/{repo}/pulls/{pull_number}``)
    and ``operation_id`` its operation id; both are empty for a path the simulator does not serve.
    ``body`` is the parsed JSON request body (``None`` when there was none or it was not JSON);
    ``response_body`` is the parsed JSON answer (``None`` when empty or not JSON).
    """

    forge: str
    method: str
    path: str
    query: dict[str, list[str]]
    status: int
    operation_id: str
    body: Any
    route: str = ""
    path_params: dict[str, str] = field(default_factory=dict)
    request_headers: dict[str, str] = field(default_factory=dict)
    response_headers: dict[str, str] = field(default_factory=dict)
    response_body: Any = None
    raw_request_body: bytes = b""
    raw_response_body: bytes = b""
    fault: bool = False  # the answer came from an injected fault
    dropped: bool = False  # the client had gone (timeout fault): nothing was handled or sent


@dataclass
class Delivery:
    """One webhook delivery: what was sent, and how the receiver answered."""

    forge: str
    event: str
    event_type: str
    id: str
    url: str
    headers: dict[str, str]
    body: bytes
    status: int | None = None
    response_body: bytes = b""
    error: str | None = None
    payload: dict[str, Any] = field(default_factory=dict)
