"""Facts of a pull request that a forge event carries beside its trigger."""

from __future__ import annotations

import json


def event_mergeable(body: bytes, head_sha: str) -> bool | None:
    """``pull_request.mergeable`` of a GitHub or Gitea pull-request event (both spell it so)
    about the PR at ``head_sha``, or ``None`` when the body is no such event, is about
    another head, or the forge had not worked it out yet."""
    try:
        event = json.loads(body)
    except (ValueError, RecursionError):  # UnicodeDecodeError included
        return None
    pull = event.get("pull_request") if isinstance(event, dict) else None
    if not isinstance(pull, dict):
        return None
    head = pull.get("head")
    if not isinstance(head, dict) or head.get("sha") != head_sha:
        return None
    value = pull.get("mergeable")
    return value if isinstance(value, bool) else None
