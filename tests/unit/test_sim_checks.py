"""How the simulator combines statuses and decides required checks, per forge (no I/O)."""

from __future__ import annotations

from reviewbot.sim import Simulator
from reviewbot.sim.checks import (
    gitea_checks_pass,
    gitea_combined_state,
    github_blocking_check,
    github_combined_state,
    latest_statuses,
    protection_for,
)


def test_latest_status_per_context_wins() -> None:
    sim = Simulator(clock=lambda: 1000.0)
    sim.create_repo("github", "a/b")
    pr = sim.open_pr("github", "a/b", author="x")
    sim.set_status("github", "a/b", pr.head_sha, "ci", "failure")
    sim.set_status("github", "a/b", pr.head_sha, "ci", "success")
    repo = sim.repo("github", "a/b")
    assert [s.state for s in latest_statuses(repo, pr.head_sha)] == ["success"]
    assert github_combined_state(latest_statuses(repo, pr.head_sha)) == "success"
    assert github_combined_state([]) == "pending"


def test_gitea_combined_state_takes_the_worst() -> None:
    sim = Simulator()
    sim.create_repo("gitea", "a/b")
    pr = sim.open_pr("gitea", "a/b", author="x")
    repo = sim.repo("gitea", "a/b")
    for context, state in (("a", "success"), ("b", "warning"), ("c", "pending")):
        sim.set_status("gitea", "a/b", pr.head_sha, context, state)
    assert gitea_combined_state(latest_statuses(repo, pr.head_sha)) == "warning"
    sim.set_status("gitea", "a/b", pr.head_sha, "d", "error")
    assert gitea_combined_state(latest_statuses(repo, pr.head_sha)) == "error"


def test_gitea_glob_needs_a_match_and_every_match_green() -> None:
    sim = Simulator()
    sim.create_repo("gitea", "a/b")
    pr = sim.open_pr("gitea", "a/b", author="x")
    protection = sim.require_checks("gitea", "a/b", "release/*", ["ci/*"])
    repo = sim.repo("gitea", "a/b")
    assert protection_for(repo, "release/1.0") is protection
    assert protection_for(repo, "main") is None
    assert not gitea_checks_pass(repo, protection, pr.head_sha)  # nothing matched yet
    sim.set_status("gitea", "a/b", pr.head_sha, "ci/unit", "success")
    assert gitea_checks_pass(repo, protection, pr.head_sha)
    sim.set_status("gitea", "a/b", pr.head_sha, "ci/e2e", "failure")
    assert not gitea_checks_pass(repo, protection, pr.head_sha)
    protection.enable_status_check = False
    assert gitea_checks_pass(repo, protection, pr.head_sha)


def test_github_required_check_from_status_or_check_run() -> None:
    sim = Simulator()
    sim.create_repo("github", "a/b")
    pr = sim.open_pr("github", "a/b", author="x")
    protection = sim.require_checks("github", "a/b", "main", ["build"])
    repo = sim.repo("github", "a/b")
    assert github_blocking_check(repo, protection, pr.head_sha) == (
        'Required status check "build" is expected.'
    )
    sim.set_check_run("a/b", pr.head_sha, "build", conclusion="failure")
    assert github_blocking_check(repo, protection, pr.head_sha) == (
        'Required status check "build" is failing.'
    )
    sim.set_check_run("a/b", pr.head_sha, "build", conclusion="success")
    assert github_blocking_check(repo, protection, pr.head_sha) is None
