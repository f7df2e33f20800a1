"""Repository identity in the store, on real SQLite files: any casing finds the same rows,
and a repository renamed on the forge (same numeric id) keeps its rows, leases and epochs."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from reviewbot.config import LeaseSettings
from reviewbot.core.leases import LeaseClaim, LeaseTarget, Role
from reviewbot.store import decisions, repositories
from reviewbot.store.database import Database
from reviewbot.store.leases import LeaseRefused, LeaseStore
from reviewbot.store.reviews import NewDecision, ReviewStore
from reviewbot.store.tokens import create_token, lookup_token
from reviewbot.workflowdb.bootstrap import open_store
from reviewbot.workflowdb.paths import WorkflowPaths
from tests.unit.test_repo_identity import names_and_casings

HEAD = "a" * 40
NOW = 1_800_000_000.0


def _clock() -> float:
    return NOW


def _decision(repo: str, number: int = 7) -> NewDecision:
    return NewDecision(
        forge="github",
        repo=repo,
        number=number,
        head_sha=HEAD,
        decision="waiting",
        reason_code="checks_pending",
    )


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(names_and_casings(), names_and_casings())
def test_any_casing_reaches_the_same_lease_row_and_records(
    first: tuple[str, str], second: tuple[str, str]
) -> None:
    canonical, spelled = first
    _, other_spelling = second
    with tempfile.TemporaryDirectory() as tmp:
        db = open_store(WorkflowPaths(Path(tmp) / "data"))
        leases = LeaseStore.open(db, LeaseSettings(), clock=_clock)
        try:
            a = leases.workers.register("a", client="t", session_id="s", role="merger").identity
            b = leases.workers.register("b", client="t", session_id="s", role="merger").identity
            held = leases.acquire(LeaseTarget("github", spelled, 7, Role.MERGER), a, HEAD)
            # another worker naming the repository in its own casing meets the same lease
            with pytest.raises(LeaseRefused) as refused:
                leases.acquire(LeaseTarget("github", canonical.upper(), 7, Role.MERGER), b, HEAD)
            assert refused.value.code == "lease_held" and refused.value.holder == a
            (row,) = leases.list_leases(repo=canonical.swapcase())
            assert (row.holder, row.epoch, row.target.repo) == (a, held.epoch, canonical)

            reviews = ReviewStore(db, _clock)
            reviews.record_decision(_decision(spelled))
            for lookup in (canonical, spelled, canonical.upper()):
                (found,) = reviews.decisions("github", lookup, 7)
                assert found.repo == canonical
                assert decisions.gated_heads(db, "github", lookup).answered == set()
            # a different repository stays apart
            if other_spelling.lower() != canonical:
                assert reviews.decisions("github", other_spelling, 7) == []
        finally:
            leases.close()
            db.close()


def test_a_renamed_repository_keeps_its_rows_leases_and_epochs(db: Database) -> None:
    seen = 1_767_225_600.0  # 2026-01-01T00:00:00Z
    key = repositories.observe(
        db,
        forge="github",
        repo="acme/api",
        display_name="Acme/API",
        forge_id=42,
        signed=True,
        seen_at=seen,
    )
    assert key == "acme/api"
    assert repositories.display_name(db, "github", "acme/api") == "Acme/API"
    leases = LeaseStore.open(db, LeaseSettings(), clock=_clock)
    worker = leases.workers.register("a", client="t", session_id="s", role="merger").identity
    old_target = LeaseTarget("github", "acme/api", 7, Role.MERGER)
    held = leases.acquire(old_target, worker, HEAD)
    ReviewStore(db, _clock).record_decision(_decision("acme/api"))
    plain, _ = create_token(db, name="bound", scopes="read", repo="github:acme/api", now=seen)

    # the forge now calls repository 42 Acme/Service (renamed, or transferred and renamed)
    key = repositories.observe(
        db,
        forge="github",
        repo="acme/service",
        display_name="Acme/Service",
        forge_id=42,
        signed=True,
        seen_at=seen,
    )
    assert key == "acme/service"
    assert repositories.resolve(db, "github", "acme/api") == "acme/service"
    assert repositories.display_name(db, "github", "acme/service") == "Acme/Service"
    assert [(r.repo, r.forge_id) for r in repositories.known(db)] == [("acme/service", 42)]
    (decision,) = ReviewStore(db, _clock).decisions("github", "acme/service", 7)
    assert decision.decision == "waiting"
    new_target = LeaseTarget("github", "acme/service", 7, Role.MERGER)
    lease = leases.get(new_target)
    assert lease is not None and (lease.holder, lease.epoch) == (worker, held.epoch)
    assert leases.get(old_target) is None
    # the holder goes on under the new name; the next epoch never goes back
    leases.release(LeaseClaim(new_target, worker, held.epoch))
    again = leases.acquire(new_target, worker, HEAD)
    assert again.epoch > held.epoch
    info = lookup_token(db, plain)
    assert info is not None and info.allows_repo("github", "Acme/Service")
    # an unsigned caller naming the old name reaches the new key, and adds nothing
    key = repositories.observe(
        db,
        forge="github",
        repo="acme/api",
        display_name="acme/api",
        forge_id=None,
        signed=False,
        seen_at=seen,
    )
    assert key == "acme/service"
    assert repositories.signed_repos(db) == {("github", "acme/service")}
    # a new repository (another id) that takes the old name is a repository of its own
    key = repositories.observe(
        db,
        forge="github",
        repo="acme/api",
        display_name="acme/api",
        forge_id=77,
        signed=True,
        seen_at=seen,
    )
    assert key == "acme/api"
    assert repositories.resolve(db, "github", "acme/api") == "acme/api"
    assert repositories.signed_repos(db) == {("github", "acme/service"), ("github", "acme/api")}
    leases.close()


def test_only_a_signed_webhook_adds_a_repository_or_its_spelling(db: Database) -> None:
    seen = 1_767_225_600.0  # 2026-01-01T00:00:00Z
    common = {"forge": "gitea", "repo": "acme/api", "seen_at": seen}
    repositories.observe(db, display_name="ACME/API", forge_id=None, signed=False, **common)
    assert repositories.known(db) == []
    repositories.observe(db, display_name="Acme/Api", forge_id=9, signed=True, **common)
    repositories.observe(db, display_name="ACME/API", forge_id=None, signed=False, **common)
    assert repositories.display_name(db, "gitea", "acme/api") == "Acme/Api"
    assert repositories.signed_repos(db) == {("gitea", "acme/api")}
