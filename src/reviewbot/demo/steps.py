"""What a demo step checks with: a failed expectation names what was expected and what
happened instead."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from reviewbot.core.errors import ReviewbotError
from reviewbot.demo.world import DemoWorld


class StepFailed(ReviewbotError):
    def __init__(self, expected: str, happened: str) -> None:
        super().__init__(f"expected {expected}; happened: {happened}")
        self.expected = expected
        self.happened = happened


def short(sha: str | None) -> str:
    return (sha or "")[:12]


def expect(ok: bool, expected: str, happened: str | Callable[[], str]) -> None:
    if not ok:
        raise StepFailed(expected, happened() if callable(happened) else happened)


class Narrator(Protocol):
    """What a step written outside the story needs of it (the merge through the lease API)."""

    world: DemoWorld
    merge_commit: str

    def note(self, line: str) -> None: ...
