"""Reading forge headers whatever their case (the forges are told apart by
:func:`reviewbot.ingress.forge_kinds.forge_of_headers`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from multidict import CIMultiDict, CIMultiDictProxy

GITHUB_EVENT = "X-GitHub-Event"
GITHUB_DELIVERY = "X-GitHub-Delivery"
GITHUB_SIGNATURE = "X-Hub-Signature-256"

# Gitea sends the fine event name in *-Event-Type and a coarse one in *-Event; Forgejo
# sends the same values under its own prefix too; very old Gitea only the Gogs names.
GITEA_EVENT_TYPE_HEADERS = ("X-Gitea-Event-Type", "X-Forgejo-Event-Type", "X-Gogs-Event-Type")
GITEA_EVENT_HEADERS = ("X-Gitea-Event", "X-Forgejo-Event", "X-Gogs-Event")
GITEA_DELIVERY_HEADERS = ("X-Gitea-Delivery", "X-Forgejo-Delivery", "X-Gogs-Delivery")
GITEA_SIGNATURE_HEADERS = ("X-Gitea-Signature", "X-Forgejo-Signature", "X-Gogs-Signature")

# The headers worth keeping with a journalled delivery (nothing secret among them).
KEPT_HEADERS = (
    "Content-Type",
    GITHUB_EVENT,
    GITHUB_DELIVERY,
    "X-GitHub-Hook-ID",
    "X-GitHub-Hook-Installation-Target-Type",
    "X-GitHub-Hook-Installation-Target-ID",
    *GITEA_EVENT_TYPE_HEADERS,
    *GITEA_EVENT_HEADERS,
    *GITEA_DELIVERY_HEADERS,
    "User-Agent",
)

_CASE_INSENSITIVE = (CIMultiDict, CIMultiDictProxy)


def header(headers: Mapping[str, str], name: str) -> str | None:
    """The value of ``name`` in ``headers``, matched without regard to case."""
    value = headers.get(name)
    if value is not None or isinstance(headers, _CASE_INSENSITIVE):
        # A server's headers match any case already: a miss there is final, and the
        # acknowledgement path looks up several absent names per delivery.
        return value
    wanted = name.lower()
    for key, val in headers.items():
        if key.lower() == wanted:
            return val
    return None


def first_header(headers: Mapping[str, str], names: Iterable[str]) -> str | None:
    """The first of ``names`` that is present (an empty value counts as present)."""
    for name in names:
        value = header(headers, name)
        if value is not None:
            return value
    return None


def kept_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The subset of ``headers`` a journal stores (signatures and auth left out)."""
    kept: dict[str, str] = {}
    for name in KEPT_HEADERS:
        value = header(headers, name)
        if value is not None:
            kept[name] = value
    return kept


def is_forgejo(headers: Mapping[str, str]) -> bool:
    return any(key.lower().startswith("x-forgejo-") for key in headers)
