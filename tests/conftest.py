from __future__ import annotations

from pathlib import Path

import pytest

# Forge simulator fixtures (sim, sim_server, forge_specs) for every test.
pytest_plugins = ("tests.support.sim_fixtures",)

REPO_ROOT = Path(__file__).resolve().parent.parent
# The shared reference material (official payloads, API descriptions, test vectors) sits
# beside the checkout; REVIEWBOT_REFERENCE_DIR points elsewhere when it does not.
REFERENCE_DIR = REPO_ROOT.parent / "shared" / "reference"


@pytest.fixture(scope="session")
def reference_dir() -> Path:
    import os

    override = os.environ.get("REVIEWBOT_REFERENCE_DIR")
    path = Path(override) if override else REFERENCE_DIR
    if not path.is_dir():
        pytest.fail(f"reference material not found at {path} (set REVIEWBOT_REFERENCE_DIR)")
    return path


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No test reads the developer's environment or a reviewbot.toml in the working dir."""
    import os

    for key in list(os.environ):
        if key.startswith(("REVIEWBOT_", "VAR_")) and key != "REVIEWBOT_REFERENCE_DIR":
            monkeypatch.delenv(key, raising=False)
    monkeypatch.chdir(tmp_path)
