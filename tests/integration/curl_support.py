"""Running the ``curl`` lines the docs and the start text print, as the requests they describe.

Only the options those lines use are understood (``-s``, ``-X``, ``-d``, ``-H``); any other one
fails the test, so a printed command the test cannot follow is never silently skipped.
"""

from __future__ import annotations

import shlex
from typing import Any

import aiohttp


async def curl(http: aiohttp.ClientSession, command: str) -> tuple[int, Any]:
    """Send the request a ``curl`` line describes, the way curl would send it."""
    argv = shlex.split(command)
    assert argv[0] == "curl", command
    method, data, url = "GET", None, None
    headers: dict[str, str] = {}
    args = iter(argv[1:])
    for arg in args:
        if arg == "-s":
            continue
        if arg == "-X":
            method = next(args)
        elif arg == "-d":
            data = next(args)
        elif arg == "-H":
            name, _, value = next(args).partition(":")
            headers[name.strip()] = value.strip()
        elif not arg.startswith("-") and url is None:
            url = arg
        else:
            raise AssertionError(f"the test does not know curl's {arg!r} in {command!r}")
    assert url is not None, command
    if data is not None:
        # curl -d sends a form content type and POSTs unless told otherwise.
        headers.setdefault("Content-Type", "application/x-www-form-urlencoded")
        method = "POST" if method == "GET" else method
    async with http.request(method, url, data=data, headers=headers) as resp:
        text = await resp.text()
        return resp.status, (await resp.json(content_type=None)) if text else None
