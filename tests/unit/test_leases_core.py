from __future__ import annotations

import pytest

from reviewbot.config import LeaseSettings
from reviewbot.core.leases import (
    AcquireRequest,
    Granted,
    GrantKind,
    Lease,
    LeaseClaim,
    LeaseTarget,
    Phase,
    Refused,
    Role,
    WorkerRecord,
    WorkerStatus,
    acquire,
    check_fence,
    check_full_sha,
    heartbeat,
    is_reserved_worker_name,
    iso,
    lease_term,
    lease_view,
    mint_worker_identity,
    parse_worker_identity,
    refusal_view,
    release,
    supersede_head,
    worker_status,
)
from reviewbot.core.reasons import ReasonCode

T = LeaseSettings()  # 15 s lease, 10 s renew, 2 s retry
TARGET = LeaseTarget("gitea", "acme/api", 12, Role.MERGER)
HEAD = "a" * 40
NEW_HEAD = "b" * 40
NOW = 1_700_000_000.0


def grant(
    current: Lease | None,
    worker: str = "w1",
    *,
    now: float = NOW,
    hw: int = 0,
    head: str = HEAD,
    ttl: float | None = None,
) -> Granted:
    result = acquire(current, hw, AcquireRequest(TARGET, worker, head, ttl), now, T)
    assert isinstance(result, Granted), result
    return result


def refused(result: object) -> Refused:
    assert isinstance(result, Refused), result
    return result


# --- acquire ------------------------------------------------------------------------------


def test_free_target_is_granted_epoch_one() -> None:
    g = grant(None)
    assert g.kind is GrantKind.GRANTED
    lease = g.lease
    assert (lease.holder, lease.epoch, lease.head_sha, lease.phase) == (
        "w1",
        1,
        HEAD,
        Phase.CLAIMED,
    )
    assert lease.expires_at == NOW + 15
    assert lease.heartbeat_at == lease.acquired_at == NOW
    assert lease.live(NOW + 14.9) and not lease.live(NOW + 15)


def test_epoch_follows_the_high_water_mark_when_rows_are_gone() -> None:
    assert grant(None, hw=41).lease.epoch == 42


def test_epoch_follows_the_row_when_the_high_water_mark_is_behind() -> None:
    old = grant(None, hw=9).lease
    released = release(old, old.claim, NOW + 1)
    assert isinstance(released, Granted)
    assert grant(released.lease, "w2", now=NOW + 2, hw=3).lease.epoch == 11


def test_live_lease_of_another_worker_is_refused_with_holder_and_expiry() -> None:
    held = grant(None).lease
    r = refused(acquire(held, 1, AcquireRequest(TARGET, "w2", HEAD), NOW + 5, T))
    assert r.code is ReasonCode.LEASE_HELD
    assert (r.holder, r.expires_at) == ("w1", NOW + 15)
    assert "epoch" not in r.detail  # the holder's epoch is never handed out
    assert "w1" in r.detail and iso(NOW + 15) in r.detail and str(TARGET) in r.detail


def test_same_worker_same_head_renews_the_same_epoch() -> None:
    held = grant(None).lease
    g = grant(held, now=NOW + 5, hw=1)
    assert g.kind is GrantKind.RENEWED
    assert (g.lease.epoch, g.lease.expires_at, g.lease.acquired_at) == (1, NOW + 20, NOW)


def test_same_worker_new_head_gets_a_new_epoch() -> None:
    held = grant(None).lease
    g = grant(held, now=NOW + 5, hw=1, head=NEW_HEAD)
    assert g.kind is GrantKind.GRANTED
    assert (g.lease.epoch, g.lease.head_sha) == (2, NEW_HEAD)


def test_expired_lease_of_another_worker_is_taken_over_with_a_higher_epoch() -> None:
    held = grant(None).lease
    g = grant(held, "w2", now=NOW + 15, hw=1)
    assert g.kind is GrantKind.TAKEOVER
    assert (g.lease.holder, g.lease.epoch) == ("w2", 2)


def test_own_expired_lease_is_not_revived_but_granted_anew() -> None:
    held = grant(None).lease
    g = grant(held, now=NOW + 16, hw=1)
    assert (g.kind, g.lease.epoch) == (GrantKind.GRANTED, 2)


@pytest.mark.parametrize("phase", [Phase.RELEASED, Phase.EXPIRED, Phase.SUPERSEDED])
def test_ended_leases_are_granted_with_the_next_epoch(phase: Phase) -> None:
    from dataclasses import replace

    ended = replace(grant(None, hw=4).lease, phase=phase)
    g = grant(ended, "w2", now=NOW + 1, hw=5)
    assert (g.kind, g.lease.epoch, g.lease.holder) == (GrantKind.GRANTED, 6, "w2")


def test_ttl_is_bounded() -> None:
    assert grant(None, ttl=60).lease.expires_at == NOW + 60
    for bad in (0.0, 2.4, -1.0, 3601.0):
        with pytest.raises(ValueError, match="ttl_s"):
            lease_term(T, bad)
    assert lease_term(T, None) == 15


def test_acquire_validates_head_and_target() -> None:
    with pytest.raises(ValueError, match="head_sha"):
        acquire(None, 0, AcquireRequest(TARGET, "w1", "not a sha"), NOW, T)
    other = LeaseTarget("gitea", "acme/api", 12, Role.REVIEWER)
    with pytest.raises(ValueError, match="another target"):
        acquire(grant(None).lease, 1, AcquireRequest(other, "w1", HEAD), NOW, T)


@pytest.mark.parametrize(
    ("forge", "repo", "number", "role"),
    [
        ("gitlab", "a/b", 1, "merger"),
        ("github", "ab", 1, "merger"),
        ("github", "a/b/c", 1, "merger"),
        ("github", "a b/c", 1, "merger"),
        ("github", "a/b", 0, "merger"),
        ("github", "a/b", 1, "admin"),
    ],
)
def test_bad_targets_are_refused(forge: str, repo: str, number: int, role: str) -> None:
    with pytest.raises(ValueError):
        LeaseTarget(forge, repo, number, role)  # type: ignore[arg-type]


def test_role_given_as_text_becomes_the_enum() -> None:
    assert LeaseTarget("github", "a/b", 1, "reviewer").role is Role.REVIEWER  # type: ignore[arg-type]


# --- heartbeat, release, fencing ------------------------------------------------------------------


def test_heartbeat_extends_by_the_lease_term() -> None:
    held = grant(None, ttl=30).lease
    g = heartbeat(held, held.claim, NOW + 20)
    assert isinstance(g, Granted)
    assert (g.kind, g.lease.epoch, g.lease.expires_at, g.lease.heartbeat_at) == (
        GrantKind.RENEWED,
        1,
        NOW + 50,
        NOW + 20,
    )


def test_release_ends_the_claim_now() -> None:
    held = grant(None).lease
    g = release(held, held.claim, NOW + 3)
    assert isinstance(g, Granted)
    assert (g.kind, g.lease.phase, g.lease.expires_at) == (
        GrantKind.RELEASED,
        Phase.RELEASED,
        NOW + 3,
    )
    assert not g.lease.live(NOW + 3)


def test_superseded_holder_is_refused_with_the_new_holder() -> None:
    old = grant(None).lease
    new = grant(old, "w2", now=NOW + 20, hw=1).lease
    for op in (heartbeat, release):
        r = refused(op(new, old.claim, NOW + 21))
        assert r.code is ReasonCode.SUPERSEDED
        assert r.holder == "w2" and "epoch 2" not in r.detail
    assert refused(check_fence(new, old.claim, NOW + 21)).code is ReasonCode.SUPERSEDED


def test_claim_by_another_worker_at_the_same_epoch_is_not_held() -> None:
    held = grant(None).lease
    forged = LeaseClaim(TARGET, "w2", held.epoch)
    assert refused(check_fence(held, forged, NOW)).code is ReasonCode.LEASE_NOT_HELD


def test_future_epoch_is_not_held() -> None:
    held = grant(None).lease
    assert (
        refused(heartbeat(held, LeaseClaim(TARGET, "w1", 5), NOW)).code is ReasonCode.LEASE_NOT_HELD
    )


def test_no_row_is_not_held() -> None:
    r = refused(heartbeat(None, LeaseClaim(TARGET, "w1", 1), NOW))
    assert r.code is ReasonCode.LEASE_NOT_HELD and r.holder is None


def test_lapsed_claim_is_not_revived_by_heartbeat() -> None:
    held = grant(None).lease
    r = refused(heartbeat(held, held.claim, NOW + 15))
    assert r.code is ReasonCode.LEASE_NOT_HELD and "expired" in r.detail


def test_released_claim_cannot_heartbeat_or_release_again() -> None:
    held = grant(None).lease
    done = release(held, held.claim, NOW + 1)
    assert isinstance(done, Granted)
    for op in (heartbeat, release):
        r = refused(op(done.lease, held.claim, NOW + 2))
        assert r.code is ReasonCode.LEASE_NOT_HELD and "released" in r.detail


def test_live_claim_passes_the_fence() -> None:
    held = grant(None).lease
    assert check_fence(held, held.claim, NOW + 14) is None


# --- a new head ---------------------------------------------------------------------------------


def test_new_head_supersedes_the_claim() -> None:
    held = grant(None).lease
    s = supersede_head(held, NEW_HEAD, NOW + 2)
    assert s is not None
    assert (s.phase, s.epoch, s.expires_at) == (Phase.SUPERSEDED, 1, NOW + 2)
    r = refused(heartbeat(s, held.claim, NOW + 3))
    assert r.code is ReasonCode.SUPERSEDED and HEAD in r.detail
    assert grant(s, "w2", now=NOW + 3, hw=1, head=NEW_HEAD).lease.epoch == 2


def test_same_head_or_ended_claims_are_left_alone() -> None:
    held = grant(None).lease
    assert supersede_head(held, HEAD.upper(), NOW) is None
    assert supersede_head(None, NEW_HEAD, NOW) is None
    done = release(held, held.claim, NOW)
    assert isinstance(done, Granted)
    assert supersede_head(done.lease, NEW_HEAD, NOW) is None


def test_lapsed_claim_at_an_old_head_is_recorded_as_superseded() -> None:
    held = grant(None).lease
    s = supersede_head(held, NEW_HEAD, NOW + 100)
    assert s is not None and s.phase is Phase.SUPERSEDED and s.expires_at == NOW + 15
    assert held.phase_at(NOW + 100) is Phase.EXPIRED


# --- worker identities --------------------------------------------------------------------------

NS = 1_764_405_764_123_456_789  # 2025-11-29T08:42:44Z


def test_identity_shape() -> None:
    ident = mint_worker_identity(
        "merger1", client="cli", session_id="s", now_ns=NS, nonce=b"x" * 16
    )
    assert ident.startswith("merger1-20251129T084244Z-")
    assert len(ident.rsplit("-", 1)[1]) == 12
    assert parse_worker_identity(ident) == "merger1"


def test_identity_depends_on_every_input() -> None:
    base = dict(client="cli", session_id="s", now_ns=NS, nonce=b"n" * 16)
    first = mint_worker_identity("w", **base)  # type: ignore[arg-type]
    assert mint_worker_identity("w", **base) == first  # type: ignore[arg-type]
    variants = [
        {**base, "client": "api"},
        {**base, "session_id": "t"},
        {**base, "now_ns": NS + 1},
        {**base, "nonce": b"m" * 16},
        # length prefixes: moving a byte between parts changes the digest
        {**base, "client": "cl", "session_id": "is"},
    ]
    shas = {mint_worker_identity("w", **v).rsplit("-", 1)[1] for v in variants}  # type: ignore[arg-type]
    assert len(shas) == len(variants) and first.rsplit("-", 1)[1] not in shas


def test_hyphenated_names_parse_from_the_right() -> None:
    ident = mint_worker_identity(
        "claude-opus-4", client="cli", session_id="s", now_ns=NS, nonce=b"x" * 16
    )
    assert ident.startswith("claude-opus-4-20251129T084244Z-")
    assert parse_worker_identity(ident) == "claude-opus-4"
    # a name that itself looks like a timestamp part still parses to the whole name
    tricky = "a-20251129T084244Z-0123456789ab-20251129T084244Z-0123456789ab"
    assert parse_worker_identity(tricky) == "a-20251129T084244Z-0123456789ab"


@pytest.mark.parametrize(
    ("name", "reserved"),
    [
        ("reviewbot", True),
        ("reviewbot.merger", True),
        ("ReviewBot.Merger", True),
        ("reviewbot.anything", True),
        ("reviewbots", False),
        ("reviewbot-x", False),
        ("agent.reviewbot", False),
    ],
)
def test_reviewbot_names_are_reserved(name: str, reserved: bool) -> None:
    assert is_reserved_worker_name(name) is reserved


@pytest.mark.parametrize("sha", ["abcd", "a" * 39, "a" * 41, "a" * 63, "g" * 40, "a" * 65])
def test_an_acquire_needs_a_full_sha(sha: str) -> None:
    with pytest.raises(ValueError, match="full commit SHA"):
        acquire(None, 0, AcquireRequest(TARGET, "w1", sha), NOW, T)
    assert check_full_sha("A" * 40) and check_full_sha("0" * 64)


@pytest.mark.parametrize("name", ["", "-x", "has space", "x" * 41, "ü", "a/b"])
def test_bad_worker_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="worker name"):
        mint_worker_identity(name, client="c", session_id="s", now_ns=NS, nonce=b"n" * 16)


def test_short_nonce_is_refused() -> None:
    with pytest.raises(ValueError, match="nonce"):
        mint_worker_identity("w", client="c", session_id="s", now_ns=NS, nonce=b"1234")


@pytest.mark.parametrize(
    "text", ["w", "w-20251129T084244Z", "w-20251129T084244Z-ABCDEF123456", "w-x-0123456789ab"]
)
def test_malformed_identities_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a worker identity"):
        parse_worker_identity(text)


def test_worker_liveness_is_heartbeat_freshness() -> None:
    rec = WorkerRecord("w-20251129T084244Z-0123456789ab", "w", "c", "s", "merger", NOW, NOW + 10)
    assert worker_status(None, NOW, T) is WorkerStatus.UNPROVEN
    assert worker_status(rec, NOW + 24.9, T) is WorkerStatus.LIVE
    assert worker_status(rec, NOW + 25, T) is WorkerStatus.STALE


def test_iso_is_utc_with_milliseconds() -> None:
    assert iso(0.25) == "1970-01-01T00:00:00.250Z"


def test_views_have_the_api_shape() -> None:
    held = grant(None).lease
    assert lease_view(held, NOW + 5) == {
        "target": {"forge": "gitea", "repo": "acme/api", "number": 12, "role": "merger"},
        "holder": "w1",
        "epoch": 1,
        "head_sha": HEAD,
        "phase": "claimed",
        "expires_at": iso(NOW + 15),
        "expires_in_s": 10.0,
    }
    assert lease_view(held, NOW + 20)["phase"] == "expired"
    assert lease_view(held, NOW + 20)["expires_in_s"] == 0.0
    r = refused(acquire(held, 1, AcquireRequest(TARGET, "w2", HEAD), NOW, T))
    assert refusal_view(r) == {
        "error": "lease_held",
        "detail": r.detail,
        "holder": "w1",
        "expires_at": iso(NOW + 15),
    }
    assert "epoch" not in r.detail
    assert refusal_view(refused(heartbeat(None, held.claim, NOW))) == {
        "error": "lease_not_held",
        "detail": f"{TARGET} has no lease",
    }
