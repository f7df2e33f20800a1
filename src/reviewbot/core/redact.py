"""Secrets a configured value may carry inside it, hidden before the value is shown.

A URL may hold credentials in its user part (``https://user:password@host``, or a token as
the user name): the forge URLs and the database URL are shown by ``/readyz`` (which needs no
token), ``GET /api/v1/runtime`` and the status page, never with that part.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

HIDDEN = "<secret>"


def url_for_display(text: str) -> str:
    """``text`` with the user part of a URL (``user:password@``) shown as ``<secret>@``;
    any other text unchanged."""
    try:
        parts = urlsplit(text)
    except ValueError:
        return text
    if not parts.scheme or "@" not in parts.netloc:
        return text
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{HIDDEN}@{host}"))
