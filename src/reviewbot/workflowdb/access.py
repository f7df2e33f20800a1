"""Workflow-DB access levels: the process bound (``REVIEWBOT_DB_ACCESS``) and lowering it."""

from __future__ import annotations

from enum import IntEnum

from reviewbot.core.errors import ReviewbotError


class DBAccess(IntEnum):
    NONE = 0
    READ = 1
    READ_WRITE = 2

    @property
    def label(self) -> str:
        return {0: "no", 1: "read", 2: "read-write"}[int(self)]


class AccessDenied(ReviewbotError, PermissionError):
    """The caller lacks a capability; the message names it (never "unavailable")."""


def parse_access(value: str | None) -> DBAccess:
    """``REVIEWBOT_DB_ACCESS``: unset means operator (read-write); unknown values mean none.

    Spelled exactly: ``" read-write"`` is not ``read-write`` (a grant is never guessed).
    """
    if value is None:
        return DBAccess.READ_WRITE
    return {"read": DBAccess.READ, "read-write": DBAccess.READ_WRITE}.get(value, DBAccess.NONE)


def session_access(granted: str | None, process_bound: str | None) -> DBAccess:
    """The DB access of an agent or reviewer session: what was explicitly granted to it,
    never more than the process's own. Nothing granted means none (not the process's)."""
    if granted is None:
        return DBAccess.NONE
    return min(parse_access(granted), parse_access(process_bound))


def api_token_access(
    name: str, scopes: tuple[str, ...], repo: str | None, process_bound: DBAccess
) -> DBAccess:
    """The DB-tool access of an API token: ``db:write`` -> read-write, ``db:read`` -> read,
    bounded by the process. A repository-bound token gets no tool access at all: the tools
    read and write rows of every repository, so its binding could not be kept."""
    if repo is not None:
        raise AccessDenied(
            f"token {name!r} is bound to {repo}; the workflow-DB tools reach every "
            "repository's rows, so a repository-bound token cannot call them (use "
            "GET /api/v1/decisions, or a token without a repository binding)"
        )
    if "db:write" in scopes:
        scoped = DBAccess.READ_WRITE
    elif "db:read" in scopes:
        scoped = DBAccess.READ
    else:
        scoped = DBAccess.NONE
    return min(scoped, process_bound)


def effective_access(process_bound: str | None, requested: str | None = None) -> DBAccess:
    """A flag may lower the process's access, never raise it."""
    bound = parse_access(process_bound)
    if requested is None:
        return bound
    return min(bound, parse_access(requested))


def require(have: DBAccess, need: DBAccess, *, exactly: bool = False) -> None:
    ok = have == need if exactly else have >= need
    if not ok:
        held = "none" if have == DBAccess.NONE else have.label
        raise AccessDenied(f"requires {need.label} DB access; this process has {held}")
