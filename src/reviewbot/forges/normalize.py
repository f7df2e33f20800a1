"""What both adapters share to turn forge JSON into core models."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from reviewbot.core.models import (
    CheckResult,
    CheckState,
    Comment,
    PullRequestSnapshot,
    Review,
    ReviewState,
)
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


def pull_snapshot(
    forge: str, owner: str, name: str, data: dict[str, Any], *, merged: bool
) -> PullRequestSnapshot:
    """A pull request object (both forges use GitHub's field names); ``merged`` is the
    adapter's reading, as the forges mark a merge differently."""
    mergeable = data.get("mergeable")
    return PullRequestSnapshot(
        forge=forge,
        owner=owner,
        name=name,
        number=int(data["number"]),
        state=str(data["state"]),
        merged=merged,
        draft=bool(data.get("draft")),
        head_sha=str(data["head"]["sha"]),
        base_ref=str(data["base"]["ref"]),
        head_ref=str(data["head"]["ref"]),
        author=login_of(data.get("user")),
        labels=tuple(str(label["name"]) for label in data.get("labels") or ()),
        mergeable=mergeable if isinstance(mergeable, bool) else None,
        title=str(data.get("title") or ""),
        html_url=str(data.get("html_url") or ""),
        merge_commit_sha=(data.get("merge_commit_sha") or None) if merged else None,
        body=str(data.get("body") or ""),
        head_repo=_full_name(data["head"].get("repo")),
        default_branch=_default_branch(data["base"].get("repo")),
    )


def _default_branch(repo: Any) -> str | None:
    name = repo.get("default_branch") if isinstance(repo, dict) else None
    return name if isinstance(name, str) and name else None


def _full_name(repo: Any) -> str | None:
    """A repository object's ``full_name``; ``None`` when absent (GitHub sends ``null`` for
    the repository of a deleted fork)."""
    name = repo.get("full_name") if isinstance(repo, dict) else None
    return name if isinstance(name, str) and "/" in name else None


def commit_status(data: dict[str, Any], *, state_field: str) -> CheckResult:
    """A commit status; its state is under ``state`` on GitHub and ``status`` on Gitea."""
    return CheckResult(
        name=str(data["context"]),
        state=status_state(data[state_field]),
        url=data.get("target_url") or None,
        source="status",
        updated_at=str(data.get("updated_at") or data.get("created_at") or ""),
    )


def review_of(data: dict[str, Any], state: ReviewState) -> Review:
    """A submitted review; ``state`` is the adapter's reading of the forge's state name."""
    return Review(
        id=int(data["id"]),
        reviewer=login_of(data.get("user")),
        state=state,
        commit_sha=data.get("commit_id") or None,
        body=str(data.get("body") or ""),
        submitted_at=str(data.get("submitted_at") or ""),
        html_url=str(data.get("html_url") or ""),
    )


def comment_of(data: dict[str, Any]) -> Comment:
    return Comment(
        id=int(data["id"]), author=login_of(data.get("user")), body=str(data["body"] or "")
    )


def marked_comment(comments: Iterable[Comment], author: str, marker: str) -> Comment | None:
    """The first comment of ``author`` whose body contains ``marker``."""
    for comment in comments:
        if comment.author == author and marker in comment.body:
            return comment
    return None
