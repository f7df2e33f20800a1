"""The simulator's CI: builds on pushes that end after a duration on the simulator's clock,
with results from rules (failure rate, flakes, semantic conflicts) over the commit's tree."""

from __future__ import annotations

import aiohttp
import pytest

from reviewbot.sim import ManualClock, SimServer, Simulator
from tests.integration.sim.git_support import Hooks, call

REPO = "acme/api"


def _state(sim: Simulator, forge: str, sha: str, context: str = "ci/test") -> str | None:
    statuses = [s for s in sim.repo(forge, REPO).statuses if s.sha == sha and s.context == context]
    return statuses[-1].state if statuses else None


@pytest.mark.parametrize("forge", ["github", "gitea"])
async def test_a_build_takes_its_duration_on_the_simulator_clock(
    gsim: Simulator, gserver: SimServer, hooks: Hooks, forge: str
) -> None:
    gsim.create_repo(forge, REPO)
    gsim.set_webhook(forge, hooks.url)
    token = gsim.add_user(forge, "alice")
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{gserver.base_url}/_sim/ci",
            json={"forge": forge, "repo": REPO, "duration": 1200, "branches": ["feature/*"]},
        ) as response,
    ):
        assert response.status == 201
    pull = gsim.open_pr(forge, REPO, "alice", head_ref="feature/x")
    other = gsim.open_pr(forge, REPO, "alice", head_ref="elsewhere")
    assert _state(gsim, forge, pull.head_sha) == "pending"
    assert _state(gsim, forge, other.head_sha) is None  # not a CI branch
    assert gsim.advance(1199) == []
    assert _state(gsim, forge, pull.head_sha) == "pending"
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{gserver.base_url}/_sim/clock", json={"advance": 1}) as response,
    ):
        assert response.status == 201
        body = await response.json()
    assert body["finished"] == [{"sha": pull.head_sha, "attempt": 1, "state": "success"}]
    base = gserver.github_api_url if forge == "github" else gserver.gitea_api_url
    status, combined = await call(
        "GET", f"{base}/repos/{REPO}/commits/{pull.head_sha}/status", token
    )
    assert status == 200 and combined["state"] == "success"
    if forge == "github":
        (run,) = gsim.repo(forge, REPO).check_runs
        assert (run.name, run.status, run.conclusion) == ("ci/test", "completed", "success")
    await gsim.settle()
    states = [p["state"] for p in hooks.of("status")]
    assert states == ["pending", "success"]


async def test_failure_rate_fails_a_commit_every_time() -> None:
    sim = Simulator(clock=ManualClock(), git=True)
    try:
        sim.create_repo("gitea", REPO)
        sim.configure_ci("gitea", REPO, duration=60, failure_rate=1.0)
        pull = sim.open_pr("gitea", REPO, "alice", head_ref="a")
        sim.advance(60)
        assert _state(sim, "gitea", pull.head_sha) == "failure"
        sim.ci.retry("gitea", REPO, pull.head_sha)
        (result,) = sim.advance(60)
        assert (result.job.attempt, result.state) == (2, "failure")
        sim.configure_ci("gitea", REPO, duration=60, failure_rate=0.0)
        sim.push("gitea", REPO, pull.number)
        sim.advance(60)
        assert _state(sim, "gitea", pull.head_sha) == "success"
    finally:
        sim.close()


def _flaky_run() -> list[tuple[str, str, str]]:
    """Twelve pull requests under a 50 % flake rate, each failure retried once."""
    sim = Simulator(clock=ManualClock(), git=True)
    try:
        sim.create_repo("github", REPO)
        sim.configure_ci("github", REPO, duration=300, flake_rate=0.5, seed="s")
        pulls = [sim.open_pr("github", REPO, "alice", head_ref=f"p{i}") for i in range(12)]
        first = {r.job.sha: r.state for r in sim.advance(300)}
        for sha, state in first.items():
            if state == "failure":
                sim.ci.retry("github", REPO, sha)
        second = {r.job.sha: r.state for r in sim.advance(300)}
        return [(p.head_sha, first[p.head_sha], second.get(p.head_sha, "")) for p in pulls]
    finally:
        sim.close()


def test_a_flake_passes_on_a_retry_and_draws_are_deterministic() -> None:
    outcomes = _flaky_run()
    flaked = [o for o in outcomes if o[1] == "failure"]
    assert flaked and len(flaked) < len(outcomes)
    assert ("failure", "success") in {(o[1], o[2]) for o in flaked}
    assert all(o[2] == "" for o in outcomes if o[1] == "success")
    assert _flaky_run() == outcomes  # same commits, same attempts, same results


async def test_a_semantic_conflict_is_green_alone_and_red_merged(
    gsim: Simulator, gserver: SimServer
) -> None:
    gsim.create_repo("github", REPO)
    token = gsim.add_user("github", "alice")
    gsim.configure_ci(
        "github",
        REPO,
        duration=900,
        branches=["pr/*", "reviewbot/queue/*"],
        conflicts=[["src/a.py", "src/b.py"]],
    )
    one = gsim.open_pr("github", REPO, "alice", head_ref="pr/one")
    gsim.push("github", REPO, one.number, files={"src/a.py": "A = 1\n"})
    two = gsim.open_pr("github", REPO, "alice", head_ref="pr/two")
    gsim.push("github", REPO, two.number, files={"src/b.py": "B = A\n"})
    gsim.advance(900)
    assert _state(gsim, "github", one.head_sha) == "success"
    assert _state(gsim, "github", two.head_sha) == "success"

    api = f"{gserver.github_api_url}/repos/{REPO}"
    main = gsim.repo("github", REPO).branches["main"]
    car = "reviewbot/queue/main/1"
    status, _ = await call(
        "POST", f"{api}/git/refs", token, {"ref": f"refs/heads/{car}", "sha": main}
    )
    assert status == 201
    for pull in (one, two):
        status, _ = await call("POST", f"{api}/merges", token, {"base": car, "head": pull.head_ref})
        assert status == 201
    tested = gsim.repo("github", REPO).branches[car]
    gsim.advance(900)
    assert _state(gsim, "github", tested) == "failure"
    status, combined = await call("GET", f"{api}/commits/{tested}/status", token)
    assert status == 200 and combined["state"] == "failure"
    assert "src/a.py and src/b.py" in combined["statuses"][0]["description"]
    status, runs = await call("GET", f"{api}/commits/{tested}/check-runs", token)
    assert [r["conclusion"] for r in runs["check_runs"]] == ["failure"]
