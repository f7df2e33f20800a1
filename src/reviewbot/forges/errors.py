"""Typed forge errors: callers branch on the type, never on a status code or message text."""

from __future__ import annotations


class ForgeError(Exception):
    """The forge answered with an error the caller should record (``forge_error``)."""

    def __init__(self, message: str, *, status: int | None = None, operation: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.operation = operation

    def __str__(self) -> str:
        base = super().__str__()
        where = f"{self.operation}: " if self.operation else ""
        code = f"HTTP {self.status}: " if self.status is not None else ""
        return f"{where}{code}{base}"


class NotFound(ForgeError):
    """404: the repository, PR, commit or comment does not exist (or is invisible to us)."""


class AuthenticationFailed(ForgeError):
    """401: the credentials were refused."""


class PermissionDenied(ForgeError):
    """403 that is not a rate limit: the credentials lack a permission (terminal, named)."""


class RateLimited(ForgeError):
    """Primary or secondary rate limit; ``retry_after`` is seconds to wait when known."""

    def __init__(self, message: str, *, retry_after: float | None, **kw: object) -> None:
        super().__init__(message, **kw)  # type: ignore[arg-type]
        self.retry_after = retry_after


class HeadMoved(ForgeError):
    """A pinned merge or review was refused because the PR head is not the pinned SHA."""


class NotMergeable(ForgeError):
    """The forge refuses the merge (conflicts, blocked branch, already merged, closed)."""


class PendingReview(ForgeError):
    """Gitea stored the review as PENDING (unsubmitted): the event was not understood."""


class ForgeUnavailable(ForgeError):
    """5xx, timeouts or connection failures that outlasted the retries (or a write not retried)."""
