"""The comment commands a user with write access may give the bot, each a line of its own:
``/reviewbot review`` asks for a review, ``/reviewbot queue`` puts the PR in its merge queue."""

from __future__ import annotations

import re

REVIEW_COMMAND = "/reviewbot review"
QUEUE_COMMAND = "/reviewbot queue"

_COMMAND_LINE = re.compile(r"^[ \t]*/reviewbot[ \t]+(review|queue)[ \t]*$", re.MULTILINE)


def comment_command(body: str | None) -> str | None:
    """The first command line of ``body`` (surrounding blanks allowed), or None."""
    found = _COMMAND_LINE.search(body or "")
    return None if found is None else f"/reviewbot {found.group(1)}"
