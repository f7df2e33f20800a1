from __future__ import annotations

from pathlib import Path

import pytest

# Forge simulator fixtures (sim, sim_server, forge_specs) and the store fixtures
# (store_kind, workflow_paths, postgres_url) for every test.
pytest_plugins = ("tests.support.sim_fixtures", "tests.support.store_fixtures")

REPO_ROOT = Path(__file__).resolve().parent.parent
# Official payloads, reduced API descriptions and signature test vectors, with their origin
# and licence in SOURCES.md there. They live in the repository so a clone tests itself.
REFERENCE_DIR = REPO_ROOT / "tests" / "fixtures"


@pytest.fixture(scope="session")
def reference_dir() -> Path:
    return REFERENCE_DIR


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No test reads the developer's environment or a reviewbot.toml in the working dir."""
    import os

    for key in list(os.environ):
        if key.startswith(("REVIEWBOT_", "VAR_")):
            monkeypatch.delenv(key, raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.fixture(autouse=True)
def _named_commits_unless_git(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Simulators made here without ``git=`` keep named SHAs, as `serve --sim` does: a git
    repository per simulated repository costs subprocesses that most tests never look at.
    Tests of real git ask for it (``git=True``, or the ``git`` marker)."""
    from reviewbot.sim import core

    if request.node.get_closest_marker("git") is None:
        monkeypatch.setattr(core, "GIT_BY_DEFAULT", False)
