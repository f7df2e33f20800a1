"""The one body reader: a request body within a byte limit, and a JSON body as a model."""

from __future__ import annotations

import asyncio
import json
from typing import Any, TypeVar

from aiohttp import web
from pydantic import BaseModel, ValidationError

from reviewbot.config import Settings
from reviewbot.core.errors import Refused
from reviewbot.server.app_keys import SERVICE

CHUNK = 64 * 1024
# The read deadline of an application without a service (a bare tools route in tests):
# the setting's own default.
DEFAULT_READ_TIMEOUT_S: float = Settings.model_fields["body_read_timeout_s"].default
MAX_JSON_BODY = 16 * 1024  # the lease and merge API's bodies

M = TypeVar("M", bound=BaseModel)


class BodyTooLarge(Refused):
    code = "body_too_large"


async def read_body(
    request: web.Request,
    limit: int,
    *,
    code: str = "body_too_large",
    timeout_s: float | None = None,
) -> bytes:
    """The whole body, refused (``code``) once it passes ``limit`` bytes: by its declared
    length before reading, or while reading a body that declared none. A body still arriving
    after ``timeout_s`` (by default the server's ``body_read_timeout_s``) is refused
    ``body_timeout``: a body that never ends holds no connection for longer."""
    check_length(request, limit, code=code)
    if request.content.is_eof():
        # The whole body is buffered already (a webhook's usually is, by the time its
        # handler runs): nothing can stall, so no deadline and no copy chunk by chunk.
        whole = await request.content.read()
        if len(whole) > limit:
            raise BodyTooLarge(_too_large(limit), code=code)
        return whole
    if timeout_s is None:
        service = request.app.get(SERVICE)
        timeout_s = (
            DEFAULT_READ_TIMEOUT_S if service is None else service.settings.body_read_timeout_s
        )
    body = bytearray()
    try:
        async with asyncio.timeout(timeout_s):
            # read() returns what has arrived so far, not the whole body: read to the end.
            while chunk := await request.content.read(CHUNK):
                body.extend(chunk)
                if len(body) > limit:
                    raise BodyTooLarge(_too_large(limit), code=code)
    except TimeoutError:
        raise Refused(
            f"the body did not arrive within {timeout_s:g} s", code="body_timeout"
        ) from None
    return bytes(body)


def check_length(request: web.Request, limit: int, *, code: str = "body_too_large") -> None:
    """Refuse a body whose declared length passes ``limit``, before reading any of it."""
    length = request.content_length
    if length is not None and length > limit:
        raise BodyTooLarge(_too_large(limit), code=code)


def _too_large(limit: int) -> str:
    return f"the body is larger than the limit of {limit} bytes"


async def read_model(request: web.Request, model: type[M], limit: int = MAX_JSON_BODY) -> M:
    """A JSON object body validated by ``model``; the first problem is the detail."""
    body = await read_body(request, limit)
    try:
        data = json.loads(body or b"null")
    except (ValueError, UnicodeDecodeError) as exc:
        raise Refused(f"the body is not JSON: {exc}", code="invalid_request") from None
    except RecursionError:  # a few KB of "[[[[..." is past the decoder's depth
        raise Refused("the body is nested too deeply to read", code="invalid_request") from None
    if not isinstance(data, dict):
        raise Refused("the body must be a JSON object", code="invalid_request")
    return as_model(model, data)


def as_model(model: type[M], data: dict[str, Any], *, whole: str = "body") -> M:
    """``data`` validated by ``model`` (a body, a query, tool arguments); the first problem
    is the detail of an ``invalid_request`` refusal."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or whole
        raise Refused(f"{where}: {err['msg']}", code="invalid_request") from None
