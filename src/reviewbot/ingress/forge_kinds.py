"""The table of forge kinds for ingress: one row per forge, all ingress knows of it.

A row says which headers name a delivery's event and its id, which headers carry its
signature and how to check it, and which parser turns its payload into a trigger. Every
place on the ingress path that depends on the forge reads its row; a name without a row
is :class:`~reviewbot.ingress.errors.UnknownForge`, never "the other forge". The names are
those of :data:`reviewbot.core.models.FORGES` (a test holds the two to each other).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from reviewbot.core.models import Trigger
from reviewbot.ingress.errors import UnknownForge
from reviewbot.ingress.gitea import gitea_trigger
from reviewbot.ingress.github import github_trigger
from reviewbot.ingress.headers import (
    GITEA_DELIVERY_HEADERS,
    GITEA_EVENT_HEADERS,
    GITEA_EVENT_TYPE_HEADERS,
    GITEA_SIGNATURE_HEADERS,
    GITHUB_DELIVERY,
    GITHUB_EVENT,
    GITHUB_SIGNATURE,
    KEPT_HEADERS,
    first_header,
)
from reviewbot.ingress.signatures import verify_gitea_delivery, verify_github_delivery


class EventParser(Protocol):
    """Turns one delivery of a forge into a trigger, or raises ``TriggerError``."""

    def __call__(
        self,
        headers: Mapping[str, str],
        payload: Mapping[str, Any],
        *,
        delivery_id: str,
        source: str,
    ) -> Trigger: ...


class Verifier(Protocol):
    """Whether a delivery's signature header matches ``secret`` over its signed bytes."""

    def __call__(self, secret: bytes | None, headers: Mapping[str, str], body: bytes) -> bool: ...


@dataclass(frozen=True)
class ForgeKind:
    """What ingress needs of one forge."""

    name: str
    # Header names, each tuple read in order (the first one present wins).
    event_headers: tuple[str, ...]
    delivery_headers: tuple[str, ...]
    signature_headers: tuple[str, ...]
    verify: Verifier
    parse: EventParser
    # Forges whose event header this one also sends (Gitea sends X-GitHub-Event for
    # compatibility): when both match, this one is the sender.
    imitates: tuple[str, ...] = ()

    def event(self, headers: Mapping[str, str]) -> str:
        """The event name the delivery's headers give, stripped ("" when none)."""
        return (first_header(headers, self.event_headers) or "").strip()

    def signature(self, headers: Mapping[str, str]) -> str | None:
        """The signature header's value when present and not blank, else ``None``."""
        value = first_header(headers, self.signature_headers)
        return value if value is not None and value.strip() else None

    def delivery_id(self, headers: Mapping[str, str]) -> str | None:
        return first_header(headers, self.delivery_headers)


FORGE_KINDS: dict[str, ForgeKind] = {
    "github": ForgeKind(
        name="github",
        event_headers=(GITHUB_EVENT,),
        delivery_headers=(GITHUB_DELIVERY,),
        signature_headers=(GITHUB_SIGNATURE,),
        verify=verify_github_delivery,
        parse=github_trigger,
    ),
    "gitea": ForgeKind(
        name="gitea",
        # The fine event name first; the coarse one is worked out further by the parser.
        event_headers=(*GITEA_EVENT_TYPE_HEADERS, *GITEA_EVENT_HEADERS),
        delivery_headers=GITEA_DELIVERY_HEADERS,
        signature_headers=GITEA_SIGNATURE_HEADERS,
        verify=verify_gitea_delivery,
        parse=gitea_trigger,
        imitates=("github",),
    ),
}


def forge_kind(name: str) -> ForgeKind:
    """The row of ``name``; :class:`UnknownForge` naming the known forges when it has none."""
    kind = FORGE_KINDS.get(name)
    if kind is None:
        raise UnknownForge(name, list(FORGE_KINDS))
    return kind


def forge_of_headers(headers: Mapping[str, str]) -> str | None:
    """The forge whose event header the delivery carries, else ``None``.

    A forge that also sends another's header (Gitea's ``X-GitHub-Event``) is named by its
    own, so the one it imitates is set aside when both match.
    """
    found = [kind for kind in FORGE_KINDS.values() if kind.event(headers)]
    if len(found) < 2:  # the usual delivery: nothing to set aside
        return found[0].name if found else None
    imitated = {name for kind in found for name in kind.imitates}
    named = [kind.name for kind in found if kind.name not in imitated]
    return named[0] if named else None


def forge_delivery_id(headers: Mapping[str, str]) -> str | None:
    """Any forge's delivery id header (for a log line about a refused request)."""
    for kind in FORGE_KINDS.values():
        value = kind.delivery_id(headers)
        if value:
            return value
    return None


@functools.cache
def kept_header_names() -> tuple[str, ...]:
    """The headers a journal keeps: the common ones and every forge's event and id headers
    (the worker parses the delivery later from what was kept). The table is fixed: worked
    out once, not for every delivery."""
    names = dict.fromkeys(KEPT_HEADERS)
    for kind in FORGE_KINDS.values():
        names.update(dict.fromkeys((*kind.event_headers, *kind.delivery_headers)))
    return tuple(names)


def verify_delivery(
    forge: str, secret: bytes | None, headers: Mapping[str, str], body: bytes
) -> bool:
    """Verify a delivery of ``forge`` from its headers; :class:`UnknownForge` for a name
    without a row."""
    return forge_kind(forge).verify(secret, headers, body)


def signature_of(forge: str, headers: Mapping[str, str]) -> str | None:
    """``forge``'s signature header value when present and non-empty, else ``None``: a
    delivery without one is refused before its body is read."""
    return forge_kind(forge).signature(headers)
