"""Reading fields out of a parsed forge event, with errors that name the exact path."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from reviewbot.core.models import repo_key
from reviewbot.ingress.errors import TriggerError

# Values quoted in an error message are cut to this length.
_MAX_TEXT = 200


def shown(value: object) -> str:
    """A value as it appears in an error message: JSON, cut short."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= _MAX_TEXT else text[: _MAX_TEXT - 3] + "..."


def type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def parse_json_object(data: bytes, what: str) -> dict[str, Any]:
    """Decode ``data`` as a JSON object or raise :class:`TriggerError` saying why not."""
    if not data.strip():
        raise TriggerError(f"{what} is empty")
    try:
        value = json.loads(data)
    except RecursionError:
        raise TriggerError(f"{what} is nested too deeply to read") from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise TriggerError(f"{what} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise TriggerError(f"{what} is {type_name(value)}, expected a JSON object")
    return value


class EventReader:
    """Typed access to one event's fields; every failure names the field's path."""

    def __init__(self, payload: Mapping[str, Any], event: str) -> None:
        self.payload = payload
        self.event = event

    def _error(self, path: str, problem: str) -> TriggerError:
        return TriggerError(f"{path}: {problem} (in the {self.event} event)")

    def get(self, path: str) -> Any:
        """The value at a dotted ``path``, or ``None`` when any step is absent or null."""
        node: Any = self.payload
        for part in path.split("."):
            if not isinstance(node, Mapping):
                return None
            node = node.get(part)
            if node is None:
                return None
        return node

    def obj(self, path: str) -> Mapping[str, Any]:
        value = self.get(path)
        if value is None:
            raise self._error(path, "missing")
        if not isinstance(value, Mapping):
            raise self._error(path, f"is {type_name(value)}, expected an object")
        return value

    def text(self, path: str) -> str:
        value = self.get(path)
        if value is None or value == "":
            raise self._error(path, "missing")
        if not isinstance(value, str):
            raise self._error(path, f"{shown(value)} is {type_name(value)}, expected a string")
        return value

    def number(self, *paths: str) -> int:
        """The first present of ``paths`` as a positive integer."""
        for path in paths:
            value = self.get(path)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise self._error(path, f"{shown(value)} is not a positive integer")
            return value
        raise self._error(" / ".join(paths), "missing")

    def sha(self, path: str) -> str:
        value = self.text(path)
        if not is_sha(value):
            raise self._error(path, f"{shown(value)} is not a hex commit SHA")
        return value.lower()

    def login(self, path: str) -> str | None:
        """A user's name: GitHub's ``login``, Gitea's ``login`` or ``username``."""
        user = self.get(path)
        if not isinstance(user, Mapping):
            return None
        for key in ("login", "username"):
            value = user.get(key)
            if isinstance(value, str) and value:
                return value
        return None

    def repository(self, path: str = "repository") -> tuple[str, str]:
        """``(owner, name)`` of a repository object."""
        repo = self.obj(path)
        full = repo.get("full_name")
        found: tuple[str, str, str] | None = None
        if isinstance(full, str) and full.count("/") == 1:
            owner, name = full.split("/")
            if owner and name:
                found = (owner, name, f"{path}.full_name")
        if found is None:
            login = self.login(f"{path}.owner")
            short = repo.get("name")
            if login and isinstance(short, str) and short:
                found = (login, short, f"{path}.name")
        if found is None:
            raise self._error(f"{path}.full_name", "missing (and no owner login and name either)")
        owner, name, where = found
        try:
            repo_key(f"{owner}/{name}")  # a name no forge allows is not read
        except ValueError as exc:
            raise self._error(where, str(exc)) from None
        return owner, name


def is_sha(value: str) -> bool:
    """A full commit SHA: 40 (SHA-1) or 64 (SHA-256) hex digits."""
    return len(value) in (40, 64) and all(c in "0123456789abcdefABCDEF" for c in value)
