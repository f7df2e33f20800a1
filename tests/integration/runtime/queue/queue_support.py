"""A merge queue against the git-backed forge simulator over real HTTP, on a real SQLite file.

The repository is real git: PR branches are pushed by a developer's clone, the queue's cars
are merged by the forge (GitHub) or in the bot's clone (Gitea), and the simulator's CI
(:mod:`reviewbot.sim.ci`) decides each commit's result from its tree on the simulator's clock.
Passes run when the test says (``autorun=False``), so every step is deterministic.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from reviewbot.config import Settings
from reviewbot.forges.base import Forge
from reviewbot.runtime.lanes import Lanes
from reviewbot.runtime.queue.driver import QueueDriver, StateCommentSync
from reviewbot.service import configured_forges
from reviewbot.sim import ManualClock, SimServer, Simulator
from reviewbot.sim.state import SimPull
from reviewbot.store.database import Database
from reviewbot.store.queue import QueueEvent, QueueRef, QueueStore
from reviewbot.workflowdb.bootstrap import open_store
from reviewbot.workflowdb.paths import WorkflowPaths
from tests.conftest import REFERENCE_DIR
from tests.integration.sim.git_support import Clone, clone
from tests.support.openapi import ForgeSpecs
from tests.support.store_fixtures import seeded

REPO = "acme/api"
BOT = "reviewbot"
CI_S = 600.0  # the simulator's CI takes ten minutes on its clock
CONTEXT = "ci/test"
LANE_TERM_S = 30.0

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs the git program")

BASE_FILES = {
    "src/api.py": "def api():\n    return 1\n",
    "src/caller.py": "from api import api\n",
    "docs/guide.md": "# Guide\n",
    "lib/util.py": "X = 1\n",
}


@dataclass
class QueueWorld:
    forge: str
    sim: Simulator
    server: SimServer
    work: Clone
    root: str
    tokens: dict[str, str]
    tmp: Path
    rules: dict[str, Any]
    db: Database | None = None
    drivers: list[QueueDriver] = field(default_factory=list)
    forges: list[dict[str, Forge]] = field(default_factory=list)

    @property
    def queue(self) -> QueueRef:
        return QueueRef(self.forge, REPO, "main")

    def settings(self) -> Settings:
        section = (
            {"api_url": self.server.github_api_url, "token": self.tokens[BOT], "bot_login": BOT}
            if self.forge == "github"
            else {"url": self.server.gitea_url, "token": self.tokens[BOT], "bot_login": BOT}
        )
        values: dict[str, Any] = {
            "data_dir": seeded(self.tmp / "data"),
            self.forge: section,
            "repos": {f"{self.forge}:{REPO}": {"required_checks": [CONTEXT], **self.rules}},
        }
        return Settings(**values)

    def driver(
        self, holder: str = "replica-1", *, state_comment: StateCommentSync | None = None
    ) -> QueueDriver:
        """A process's queue driver (each its own lane holder, on the one store)."""
        settings = self.settings()
        if self.db is None:
            self.db = open_store(WorkflowPaths.from_settings(settings))
        forges = configured_forges(settings)
        self.forges.append(forges)
        clock = self.sim.clock
        lanes = Lanes(self.db, holder, term_s=LANE_TERM_S, clock=clock)
        driver = QueueDriver(
            settings,
            forges,
            QueueStore(self.db, clock),
            lanes,
            wait_s=1.0,
            autorun=False,
            state_comment=state_comment,
        )
        self.drivers.append(driver)
        return driver

    @property
    def store(self) -> QueueStore:
        assert self.db is not None
        return QueueStore(self.db, self.sim.clock)

    async def pull(self, branch: str, files: dict[str, str], *, approve: bool = True) -> SimPull:
        """A PR on ``branch`` (from the base's first commit) changing ``files``, its CI run
        green at its head, approved by a reviewer with write access."""
        await self.work.run("checkout", "-q", "-B", branch, self.root)
        await self.work.commit(files, f"Change {branch}")
        await self.work.push(branch)
        pull = self.sim.open_pr(self.forge, REPO, "alice", head_ref=branch, title=branch)
        if approve:
            self.sim.submit_review(self.forge, REPO, pull.number, "bob", "APPROVED")
        return pull

    def sneak_after_create(self, forge: str, wanted: Callable[[str], bool]) -> list[str]:
        """Once the latest driver's forge creates a branch ``wanted`` accepts, a developer
        with push access pushes a commit of their own (``src/sneak.py``) onto it over git,
        as someone racing the bot would. The list receives the commit pushed."""
        ops = self.forges[-1][forge]
        create = ops.create_branch
        pushed: list[str] = []

        async def create_then_push(repo: str, branch: str, sha: str) -> None:
            await create(repo, branch, sha)
            if wanted(branch) and not pushed:
                await self.work.run("fetch", "-q", "origin", branch)
                await self.work.run("checkout", "-q", "-B", "sneak", "FETCH_HEAD")
                pushed.append(await self.work.commit({"src/sneak.py": "SNEAK = 1\n"}, "Sneak"))
                await self.work.push(branch)

        ops.create_branch = create_then_push  # type: ignore[method-assign]
        return pushed

    def ci_done(self) -> None:
        """Every CI build running now finishes (the simulator's clock moves on)."""
        self.sim.advance(CI_S)

    def flaky_failure(self, sha: str) -> None:
        """The CI run on ``sha`` fails by chance now (as a flaky run reports it: a status,
        and on GitHub its check run); running it again would pass."""
        url = f"https://ci.example/{sha[:12]}/flaky"
        self.sim.set_status(self.forge, REPO, sha, CONTEXT, "failure", target_url=url)
        if self.forge == "github":
            self.sim.set_check_run(REPO, sha, CONTEXT, conclusion="failure", details_url=url)

    def tip(self, branch: str = "main") -> str:
        return self.sim.repo(self.forge, REPO).branches[branch]

    def base_commits(self) -> list[str]:
        """Every commit the base branch was moved to, in order."""
        return [
            m.after
            for m in self.sim.ref_moves
            if m.forge == self.forge and m.ref == "refs/heads/main"
        ]

    def ci_result(self, sha: str) -> str:
        config = self.sim.ci.configs[(self.forge, REPO)]
        return self.sim.ci.decide(config, sha, 1)[0]

    def events(self, number: int) -> list[QueueEvent]:
        return self.store.events_of_pull(self.forge, REPO, number)

    async def drive(self, driver: QueueDriver, rounds: int) -> None:
        """``rounds`` times: a pass (cars built, results read, landings), then CI finishes."""
        for _ in range(rounds):
            await driver.run(self.queue)
            self.ci_done()
        await driver.run(self.queue)

    async def close(self) -> None:
        for forges in self.forges:
            for forge in forges.values():
                await forge.aclose()
        if self.db is not None:
            self.db.close()


_SPECS: list[ForgeSpecs] = []


def forge_specs() -> ForgeSpecs:
    """The forges' official API descriptions, read once per test process."""
    if not _SPECS:
        _SPECS.append(ForgeSpecs(REFERENCE_DIR))
    return _SPECS[0]


@contextlib.asynccontextmanager
async def queue_world(
    forge: str,
    tmp: Path,
    *,
    conflicts: list[list[str]] | None = None,
    ci_branches: list[str] | None = None,
    **rules: Any,
) -> AsyncIterator[QueueWorld]:
    """``forge`` is ``github``, ``gitea`` (a server without the fast-forward branch update:
    the base moves by a plain push from the bot's clone) or ``gitea-1.26`` (with it)."""
    forge, _, version = forge.partition("-")
    sim = Simulator(clock=ManualClock(), git=True)
    if version:
        sim.version = f"{version}.0"
    try:
        tokens = {BOT: sim.add_user(forge, BOT, bot=True)}
        for user in ("alice", "bob"):
            tokens[user] = sim.add_user(forge, user)
        # Gitea records a landed PR merged only where the repository allows manual merges
        # (docs/merge-queue.md).
        sim.create_repo(forge, REPO, default_branch="main").allow_manual_merge = True
        for user in (BOT, "alice", "bob"):
            sim.set_permission(forge, REPO, user, "write")
        async with SimServer(sim, host="127.0.0.1", port=0) as server:
            web = server.base_url + ("/web" if forge == "github" else "/gitea")
            (tmp / "work").mkdir()
            work = await clone(f"{web}/{REPO}.git", tmp / "work" / "api", tokens["alice"], "alice")
            root = await work.commit(BASE_FILES, "The base")
            await work.push("main")
            sim.configure_ci(
                forge,
                REPO,
                context=CONTEXT,
                duration=CI_S,
                conflicts=conflicts,
                branches=ci_branches,
            )
            world = QueueWorld(forge, sim, server, work, root, tokens, tmp, rules)
            try:
                yield world
            finally:
                await world.close()
                await sim.settle()
        # Every request the bot sent, and every answer, is what the forge documents.
        problems = forge_specs().check_records(sim.requests)
        assert problems == [], "\n".join(problems)
    finally:
        sim.close()
