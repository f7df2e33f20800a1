"""The renewal a grant's history entry shows: heartbeats write only the lease, so a reader
joins the live lease's last renewal onto the grant, and the claim's end copies it there."""

from __future__ import annotations

from dataclasses import replace

from reviewbot.core.lease_history import (
    HistoryEntry,
    LeaseEvent,
    last_renewal,
    with_live_renewal,
)
from reviewbot.core.leases import Lease, LeaseTarget, Phase, Role

TARGET = LeaseTarget("gitea", "acme/api", 12, Role.MERGER)
NOW = 1_700_000_000.0
LEASE = Lease(TARGET, "w", 3, "a" * 40, Phase.CLAIMED, 15.0, NOW, NOW, NOW + 15.0)
GRANT = HistoryEntry(TARGET, LeaseEvent.GRANTED, "w", 3, "a" * 40, NOW, expires_at=NOW + 15.0)


def test_a_claim_never_renewed_has_no_renewal_to_copy() -> None:
    assert last_renewal(LEASE, "reviewbot") is None


def test_the_last_heartbeat_and_its_term_are_the_renewal() -> None:
    renewed = replace(LEASE, heartbeat_at=NOW + 40, expires_at=NOW + 41)  # brought forward
    entry = last_renewal(renewed, "token 'ci' (id 3)")
    assert entry is not None
    assert (entry.event, entry.epoch, entry.at, entry.expires_at, entry.actor) == (
        LeaseEvent.RENEWED,
        3,
        NOW + 40,
        NOW + 55,  # the term the heartbeat gave, not a lapse's earlier expiry
        "token 'ci' (id 3)",
    )


def test_a_reader_sees_a_later_renewal_of_the_lease_row_and_nothing_else() -> None:
    live = with_live_renewal(GRANT, NOW + 30, 15.0)
    assert (live.renewed_at, live.expires_at) == (NOW + 30, NOW + 45)
    assert with_live_renewal(GRANT, None, None) == GRANT  # no live lease row
    assert with_live_renewal(GRANT, NOW, 15.0) == GRANT  # granted, never renewed
    recorded = replace(GRANT, renewed_at=NOW + 50, expires_at=NOW + 65)
    assert with_live_renewal(recorded, NOW + 30, 15.0) == recorded  # the row knows better
