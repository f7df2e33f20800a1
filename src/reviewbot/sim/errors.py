"""An error the simulated forge answers; each API module renders it in its forge's shape."""

from __future__ import annotations

from reviewbot.core.errors import ReviewbotError


class ApiError(ReviewbotError):
    """``status`` and a message; ``errors`` are validation details (GitHub's ``errors`` list)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        errors: list[str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.errors = errors or []
        self.headers = headers or {}


class ScenarioError(ReviewbotError, ValueError):
    """A scenario call that cannot be carried out (unknown repo, PR or user)."""
