"""Workflow-DB access levels: the process bound (``REVIEWBOT_DB_ACCESS``) and lowering it."""

from __future__ import annotations

from enum import IntEnum


class DBAccess(IntEnum):
    NONE = 0
    READ = 1
    READ_WRITE = 2

    @property
    def label(self) -> str:
        return {0: "no", 1: "read", 2: "read-write"}[int(self)]


class AccessDenied(PermissionError):
    """The caller lacks a capability; the message names it (never "unavailable")."""


def parse_access(value: str | None) -> DBAccess:
    """``REVIEWBOT_DB_ACCESS``: unset means operator (read-write); unknown values mean none."""
    if value is None:
        return DBAccess.READ_WRITE
    return {"read": DBAccess.READ, "read-write": DBAccess.READ_WRITE}.get(
        value.strip(), DBAccess.NONE
    )


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
