"""The reconcile sweep's view of a repository's gate decisions: a head is answered by its
latest decision, and a head whose latest decision is an error is gated again."""

from __future__ import annotations

from reviewbot.core.gated_heads import gated_heads

A = (1, "a" * 40)
B = (2, "b" * 40)


def test_the_latest_decision_of_each_head_counts() -> None:
    seen = gated_heads([(A, "error"), (A, "error"), (A, "eligible"), (B, "waiting"), (B, "error")])
    assert seen.answered == {A}
    assert seen.errored == {B: 1}


def test_errors_are_counted_so_each_retry_has_its_own_delivery_id() -> None:
    seen = gated_heads([(A, "error"), (A, "skip"), (A, "error"), (A, "error")])
    assert seen.answered == set()
    assert seen.errored == {A: 3}


def test_no_decisions_no_heads() -> None:
    seen = gated_heads([])
    assert (seen.answered, seen.errored) == (set(), {})
