"""The one error root of reviewbot, and the one shape of a refusal.

Every error the program raises on purpose derives from :class:`ReviewbotError`. A refusal
(a lease held by another worker, a merge at a moved head, a tool the caller does not own)
carries a stable ``code`` (a documented word such as ``lease_held``), a human ``detail``, and
extra fields a client may read (``holder``, ``expires_at``...). The HTTP face maps codes to
status codes in one place; nothing below it knows a status.
"""

from __future__ import annotations

from typing import Any


class ReviewbotError(Exception):
    """The root: ``code`` names the failure, ``detail`` says it for a person."""

    code: str = "error"

    def __init__(self, detail: str, *, code: str | None = None, **extra: Any) -> None:
        super().__init__(detail)
        if code is not None:
            self.code = code
        self.detail = detail
        self.extra: dict[str, Any] = extra

    def to_json(self) -> dict[str, Any]:
        """The error body every entry path answers with."""
        return {"error": self.code, "detail": self.detail, **self.extra}


class Refused(ReviewbotError):
    """A request that was understood and declined: nothing was changed."""

    code = "refused"
