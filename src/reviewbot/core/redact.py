"""Secrets a configured value may carry inside it, hidden before the value is shown.

A URL may hold credentials in its user part (``https://user:password@host``, or a token as
the user name) or in its query (``postgresql://db/rb?password=...``, as libpq reads it):
the forge URLs and the database URL are shown by ``/readyz`` (which needs no token),
``GET /api/v1/runtime`` and the status page, never with those parts.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

HIDDEN = "<secret>"
# A query parameter whose name holds one of these carries a credential.
_SECRET_PARAMS = ("pass", "token", "secret", "key")


def url_for_display(text: str) -> str:
    """``text`` with the user part of a URL (``user:password@``) shown as ``<secret>@`` and
    the value of a credential query parameter (``password=``...) as ``<secret>``; any
    other text unchanged."""
    try:
        parts = urlsplit(text)
    except ValueError:
        return text
    query = query_for_display(parts.query)
    if not parts.scheme or ("@" not in parts.netloc and query == parts.query):
        return text  # nothing to hide: the text exactly as given
    if "@" in parts.netloc:
        parts = parts._replace(netloc=f"{HIDDEN}@{parts.netloc.rpartition('@')[2]}")
    return urlunsplit(parts._replace(query=query))


def query_for_display(query: str) -> str:
    """A URL query with the value of each credential parameter shown as ``<secret>``."""
    fields = []
    for field in query.split("&") if query else []:
        name, eq, _ = field.partition("=")
        secret = eq and any(word in name.lower() for word in _SECRET_PARAMS)
        fields.append(f"{name}={HIDDEN}" if secret else field)
    return "&".join(fields)
