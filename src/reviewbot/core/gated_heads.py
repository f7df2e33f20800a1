"""Which PR heads the gate has answered, for the reconcile sweep.

"Could not read" is no answer: a head whose latest gate decision is an error (the forge
could not be read) is gated again by the next sweep, under a delivery id of its own, so
the number of errors the head met is kept with it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from reviewbot.core.reasons import Outcome

Head = tuple[int, str]  # (PR number, head SHA)


@dataclass(frozen=True)
class GatedHeads:
    """What the gate made of a repository's heads."""

    answered: set[Head]  # heads whose latest decision is an answer
    errored: dict[Head, int]  # heads whose latest decision is an error: how many errors


def gated_heads(decisions: Iterable[tuple[Head, str]]) -> GatedHeads:
    """``decisions``: each gate decision of a repository as (head, outcome), oldest first."""
    latest: dict[Head, str] = {}
    errors: dict[Head, int] = {}
    for head, outcome in decisions:
        latest[head] = outcome
        if outcome == Outcome.ERROR.value:
            errors[head] = errors.get(head, 0) + 1
    return GatedHeads(
        {head for head, outcome in latest.items() if outcome != Outcome.ERROR.value},
        {head: errors[head] for head, outcome in latest.items() if outcome == Outcome.ERROR.value},
    )
