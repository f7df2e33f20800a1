"""Helpers shared by both adapters to turn forge JSON into core models."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from reviewbot.core.models import CheckState
from reviewbot.forges.errors import ForgeError

T = TypeVar("T")

_REPO = re.compile(r"^(?P<owner>[A-Za-z0-9_.-]+)/(?P<name>[A-Za-z0-9_.-]+)$")

# Commit status states of both forges (Gitea adds warning and skipped). A warning is
# not a success on Gitea, so it must not satisfy a required check here either.
STATUS_STATES: dict[str, CheckState] = {
    "success": CheckState.SUCCESS,
    "pending": CheckState.PENDING,
    "failure": CheckState.FAILURE,
    "error": CheckState.ERROR,
    "warning": CheckState.FAILURE,
    "skipped": CheckState.SKIPPED,
}


def split_repo(repo: str) -> tuple[str, str]:
    """``OWNER/NAME`` into its parts; anything else is a ``ValueError``."""
    m = _REPO.match(repo)
    if m is None or m["owner"] in (".", "..") or m["name"] in (".", ".."):
        raise ValueError(f"not a repository {repo!r}: expected OWNER/NAME")
    return m["owner"], m["name"]


def status_state(value: object) -> CheckState:
    """A commit status state; an unknown state counts as an error, never as success."""
    return STATUS_STATES.get(str(value).lower(), CheckState.ERROR)


@contextmanager
def response_shape(operation: str) -> Iterator[None]:
    """Turn a missing field or a wrong type in a forge answer into a :class:`ForgeError`."""
    try:
        yield
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise ForgeError(
            f"unexpected response shape ({type(exc).__name__}: {exc})", operation=operation
        ) from None


def as_dict(data: Any, operation: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ForgeError(f"expected a JSON object, got {type(data).__name__}", operation=operation)
    return data


def as_list(data: Any, operation: str) -> list[Any]:
    if not isinstance(data, list):
        raise ForgeError(f"expected a JSON array, got {type(data).__name__}", operation=operation)
    return data


def login_of(user: Any) -> str:
    """The login of a user object that may be null."""
    if isinstance(user, dict):
        return str(user.get("login") or "")
    return ""


def map_all(items: list[Any], convert: Callable[[dict[str, Any]], T], operation: str) -> list[T]:
    with response_shape(operation):
        return [convert(as_dict(item, operation)) for item in items]
