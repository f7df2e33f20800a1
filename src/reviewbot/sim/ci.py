"""A CI service for simulated repositories.

It watches pushes (branch moves of any origin: ``git push``, ref APIs, merges, pull requests
opened or updated) on configured branch patterns and, after a configured duration on the
simulator's clock, posts a commit status on the pushed SHA (on GitHub also a check run of the
same name), with the ``status`` (and ``check_run``) webhooks. Time is the simulator's: on a
manual clock a test advances it (:meth:`Simulator.advance`), and a benchmark compresses hours.

The result follows rules, from the commit's real tree (a simulator without git, or a virtual
commit, has no files: only the rates apply):

- ``failure_rate``: a commit fails every time (deterministic per commit);
- ``flake_rate``: an attempt fails by chance, deterministic per (commit, attempt), so a
  retry of the same commit may pass;
- ``conflicts``: groups of paths (globs) that break the build together: a commit fails when
  every path of a group has changed since ``since`` (the base branch's tip when CI was
  configured), so two pull requests green alone are red merged.
"""

from __future__ import annotations

import fnmatch
import hashlib
import random
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol

from reviewbot.sim.errors import ScenarioError
from reviewbot.sim.git import ZERO_SHA
from reviewbot.sim.records import Delivery
from reviewbot.sim.state import RefMove, SimCheckRun, SimRepo, SimStatus


class CiHost(Protocol):
    """What the runner needs of the simulator (which builds on this module)."""

    base_url: str
    webhooks: dict[str, Any]
    push_listeners: list[Callable[[RefMove], None]]

    def now(self) -> float: ...
    def repo(self, forge: str, repo: str) -> SimRepo: ...
    def resolve(self, repo: SimRepo, ref: str) -> str | None: ...
    def changed_paths(self, repo: SimRepo, a: str, b: str) -> list[tuple[str, str]]: ...
    def spawn(self, work: Coroutine[Any, Any, Any]) -> None: ...
    def set_status(
        self,
        forge: str,
        repo: str,
        sha: str,
        context: str,
        state: str,
        target_url: str | None = None,
        description: str | None = None,
        creator: str | None = None,
    ) -> SimStatus: ...
    def set_check_run(
        self,
        repo: str,
        sha: str,
        name: str,
        status: str = "completed",
        conclusion: str | None = "success",
        details_url: str | None = None,
        app_id: int | None = None,
    ) -> SimCheckRun: ...
    async def deliver_status(
        self, forge: str, repo: str, status_id: int | None = None, **kw: Any
    ) -> Delivery: ...
    async def deliver_check_run(
        self, repo: str, check_run_id: int | None = None, action: str = "completed", **kw: Any
    ) -> Delivery: ...


@dataclass
class CiConfig:
    forge: str
    repo: str
    since: str
    context: str = "ci/test"
    duration: float = 600.0
    branches: list[str] = field(default_factory=lambda: ["*"])
    failure_rate: float = 0.0
    flake_rate: float = 0.0
    conflicts: list[list[str]] = field(default_factory=list)
    seed: str = ""
    check_run: bool = True  # GitHub: a check run beside the status
    webhooks: bool = True  # False: results are only read back (a lost-webhook scenario)


@dataclass
class CiJob:
    forge: str
    repo: str
    sha: str
    branch: str
    attempt: int
    started: float
    due: float


@dataclass(frozen=True)
class CiResult:
    job: CiJob
    state: str  # success | failure
    reason: str


def _chance(*parts: str) -> float:
    """A number in [0, 1) fixed by ``parts``: the same inputs, the same draw, every run."""
    digest = hashlib.sha256(":".join(parts).encode()).digest()
    return random.Random(digest).random()  # noqa: S311 - a simulation, not security


class CiRunner:
    def __init__(self, sim: CiHost) -> None:
        self.sim = sim
        self.configs: dict[tuple[str, str], CiConfig] = {}
        self.jobs: list[CiJob] = []
        self.results: list[CiResult] = []
        self._attempts: dict[tuple[str, str, str, str], int] = {}
        sim.push_listeners.append(self.on_push)

    def configure(
        self,
        forge: str,
        repo: str,
        *,
        context: str = "ci/test",
        duration: float = 600.0,
        branches: list[str] | None = None,
        failure_rate: float = 0.0,
        flake_rate: float = 0.0,
        conflicts: list[list[str]] | None = None,
        seed: str = "",
        since: str | None = None,
        check_run: bool = True,
        webhooks: bool = True,
    ) -> CiConfig:
        state = self.sim.repo(forge, repo)
        for name, rate in (("failure_rate", failure_rate), ("flake_rate", flake_rate)):
            if not 0.0 <= rate <= 1.0:
                raise ScenarioError(f"{name} must be between 0 and 1")
        if duration < 0:
            raise ScenarioError("duration must not be negative")
        start = since or state.branches[state.default_branch]
        if self.sim.resolve(state, start) is None:
            raise ScenarioError(f"since: no commit {start!r}")
        config = CiConfig(
            forge=forge,
            repo=state.full_name,
            since=start,
            context=context,
            duration=duration,
            branches=list(branches) if branches is not None else ["*"],
            failure_rate=failure_rate,
            flake_rate=flake_rate,
            conflicts=[list(group) for group in conflicts or []],
            seed=seed,
            check_run=check_run,
            webhooks=webhooks,
        )
        self.configs[(forge, state.full_name.lower())] = config
        return config

    # ------------------------------------------------------------------ starting builds
    def on_push(self, move: RefMove) -> None:
        config = self.configs.get((move.forge, move.repo.lower()))
        if config is None or move.after == ZERO_SHA or not move.ref.startswith("refs/heads/"):
            return
        branch = move.ref.removeprefix("refs/heads/")
        if any(fnmatch.fnmatchcase(branch, pattern) for pattern in config.branches):
            self.start(move.forge, move.repo, move.after, branch)

    def start(self, forge: str, repo: str, sha: str, branch: str = "") -> CiJob:
        """Run CI on ``sha`` (again: a retry is the next attempt); pending until it ends."""
        config = self._config(forge, repo)
        key = (forge, repo.lower(), sha, config.context)
        attempt = self._attempts.get(key, 0) + 1
        self._attempts[key] = attempt
        now = self.sim.now()
        job = CiJob(forge, repo, sha, branch, attempt, now, now + config.duration)
        self.jobs.append(job)
        self._post(config, job, "pending", f"Build #{attempt} running")
        return job

    def retry(self, forge: str, repo: str, sha: str) -> CiJob:
        return self.start(forge, repo, sha)

    def _config(self, forge: str, repo: str) -> CiConfig:
        config = self.configs.get((forge, repo.lower()))
        if config is None:
            raise ScenarioError(f"no CI configured for {forge}:{repo}")
        return config

    # ------------------------------------------------------------------ finishing builds
    def tick(self) -> list[CiResult]:
        """Finish every build whose time has come (in the order they are due)."""
        now = self.sim.now()
        due = sorted((j for j in self.jobs if j.due <= now), key=lambda j: (j.due, j.started))
        finished: list[CiResult] = []
        for job in due:
            self.jobs.remove(job)
            config = self._config(job.forge, job.repo)
            state, reason = self.decide(config, job.sha, job.attempt)
            self._post(config, job, state, reason)
            result = CiResult(job, state, reason)
            self.results.append(result)
            finished.append(result)
        return finished

    def decide(self, config: CiConfig, sha: str, attempt: int) -> tuple[str, str]:
        """``(state, description)`` of build ``attempt`` of ``sha`` under the rules."""
        where = (config.seed, config.forge, config.repo.lower(), sha)
        if _chance(*where, "failure") < config.failure_rate:
            return "failure", "Tests failed"
        repo = self.sim.repo(config.forge, config.repo)
        changed = {path for _, path in self.sim.changed_paths(repo, config.since, sha)}
        for group in config.conflicts:
            if group and all(any(fnmatch.fnmatchcase(p, g) for p in changed) for g in group):
                return "failure", f"Tests failed: {' and '.join(group)} changed together"
        if _chance(*where, "flake", str(attempt)) < config.flake_rate:
            return "failure", "Tests failed (flaky)"
        return "success", "Tests passed"

    def _post(self, config: CiConfig, job: CiJob, state: str, description: str) -> None:
        repo = self.sim.repo(job.forge, job.repo)
        status = self.sim.set_status(
            job.forge,
            repo.full_name,
            job.sha,
            config.context,
            state,
            target_url=self._url(repo, job),
            description=description,
            creator=repo.owner,
        )
        has_hook = config.webhooks and job.forge in self.sim.webhooks
        if has_hook:
            self.sim.spawn(self.sim.deliver_status(job.forge, repo.full_name, status.id))
        if job.forge == "github" and config.check_run:
            run = self.sim.set_check_run(
                repo.full_name,
                job.sha,
                config.context,
                status="in_progress" if state == "pending" else "completed",
                conclusion=None if state == "pending" else state,
                details_url=self._url(repo, job),
            )
            if has_hook:
                action = "created" if state == "pending" else "completed"
                self.sim.spawn(self.sim.deliver_check_run(repo.full_name, run.id, action))

    def _url(self, repo: SimRepo, job: CiJob) -> str:
        return f"{self.sim.base_url}/ci/{repo.full_name}/{job.sha[:12]}/{job.attempt}"
