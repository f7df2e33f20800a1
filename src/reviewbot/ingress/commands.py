"""The comment command that asks the bot for a review: a line ``/reviewbot review``."""

from __future__ import annotations

import re

REVIEW_COMMAND = "/reviewbot review"

_COMMAND_LINE = re.compile(r"^[ \t]*/reviewbot[ \t]+review[ \t]*$", re.MULTILINE)


def has_review_command(body: str | None) -> bool:
    """True when a line of ``body`` is exactly the command (surrounding blanks allowed)."""
    return bool(body) and _COMMAND_LINE.search(body or "") is not None
