"""The one error every entry path raises when a delivery cannot be read."""

from __future__ import annotations

from collections.abc import Sequence

from reviewbot.core.errors import ReviewbotError
from reviewbot.core.reasons import ReasonCode


class TriggerError(ReviewbotError):
    """A delivery whose trigger cannot be read.

    ``detail`` is the exact reason, naming the field and where it was read from (for
    example ``number: "abc" is not an integer (from variables.number)``). The caller
    records it as a ``delivery_unresolved`` decision; it is never a silent skip.
    """

    code = ReasonCode.DELIVERY_UNRESOLVED

    def __init__(self, detail: str) -> None:
        super().__init__(detail)


class DeliveryFileError(TriggerError):
    """A delivery file that is missing, unreadable or malformed.

    ``delivery_id`` is the file's identity when its bytes could be read (their SHA-256),
    else ``None``: the caller then names the delivery itself.
    """

    def __init__(self, detail: str, *, delivery_id: str | None = None) -> None:
        super().__init__(detail)
        self.delivery_id = delivery_id


NAME_SHOWN = 64  # no forge name is longer; a longer one is cut in the refusal


class UnknownForge(TriggerError):
    """A forge name that has no row in the table of forge kinds.

    Never answered as "the other forge": the detail names the forges that are known. In a
    delivery it is unresolved like any unreadable one; the HTTP face answers a webhook
    route of such a name with ``unknown_forge``.
    """

    def __init__(self, name: str, known: Sequence[str]) -> None:
        # The name comes from a URL or a header anyone may send: echo a bounded part of it.
        shown = name if len(name) <= NAME_SHOWN else name[:NAME_SHOWN] + "..."
        super().__init__(f"unknown forge {shown!r}; known forges: {', '.join(known)}")
        self.name = name
