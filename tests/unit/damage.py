"""Damaged copies of a payload: every field down to a depth replaced by odd JSON values."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

ODD_VALUES: tuple[object, ...] = (None, "", "x", 0, -1, 1.5, True, [], {}, [1])
_DELETE = object()


def damaged(payload: dict[str, Any], depth: int = 3) -> Iterator[dict[str, Any]]:
    """Copies of ``payload`` with one field (to ``depth`` levels) replaced or removed."""
    for path in _paths(payload, depth):
        for value in (*ODD_VALUES, _DELETE):
            twin = copy.deepcopy(payload)
            node: Any = twin
            for key in path[:-1]:
                node = node[key]
            if value is _DELETE:
                del node[path[-1]]
            else:
                node[path[-1]] = value
            yield twin


def _paths(
    node: dict[str, Any], depth: int, prefix: tuple[str, ...] = ()
) -> Iterator[tuple[str, ...]]:
    for key, value in node.items():
        yield (*prefix, key)
        if depth > 1 and isinstance(value, dict):
            yield from _paths(value, depth - 1, (*prefix, key))
