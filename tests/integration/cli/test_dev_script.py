"""``./dev``: the one entry point of a fresh checkout.

Most of these run the script against a stand-in Python whose ``venv`` and ``pip`` only record
what they were asked to do, so the tests need no network and install nothing. The one that
runs the real ``reviewbot`` uses the environment running the tests.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.conftest import REPO_ROOT

DEV = REPO_ROOT / "dev"

# Stands in for python3 and for the venv's python: `-m venv DIR` makes a venv of stand-ins,
# everything else is logged and succeeds.
FAKE_PYTHON = """#!/bin/sh
echo "python $*" >> "$DEV_LOG"
if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then
    mkdir -p "$3/bin"
    cp "$0" "$3/bin/python"
    for tool in reviewbot ruff mypy; do
        printf '#!/bin/sh\\necho "%s $*" >> "$DEV_LOG"\\necho "%s in $(pwd)"\\n' \\
            "$tool" "$tool" > "$3/bin/$tool"
        chmod +x "$3/bin/$tool"
    done
fi
exit 0
"""


def run_dev(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(DEV), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def fake_env(tmp_path: Path) -> dict[str, str]:
    python = tmp_path / "python3"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    return {
        "PATH": os.environ["PATH"],
        "PYTHON": str(python),
        "REVIEWBOT_VENV": str(tmp_path / "venv"),
        "DEV_LOG": str(tmp_path / "log"),
    }


def log(tmp_path: Path) -> list[str]:
    path = tmp_path / "log"
    lines = path.read_text().splitlines() if path.exists() else []
    path.unlink(missing_ok=True)
    return lines


def installs(lines: list[str]) -> list[str]:
    return [line.split()[-1] for line in lines if " pip install " in line and " -e " in line]


def test_first_run_says_what_it_does_and_later_runs_are_quiet(tmp_path: Path) -> None:
    env = fake_env(tmp_path)
    first = run_dev("reviewbot", "--version", cwd=tmp_path, env=env)
    assert first.returncode == 0, first.stderr
    assert first.stderr == (
        "creating .venv and installing reviewbot with its test tools (first run, ~30 s)...\n"
    )
    assert installs(log(tmp_path)) == [f"{REPO_ROOT}[test]"]

    again = run_dev("reviewbot", "--version", cwd=tmp_path, env=env)
    assert again.returncode == 0
    assert again.stderr == ""
    assert installs(log(tmp_path)) == []


def test_test_needs_only_the_test_extra_and_lint_the_dev_extra(tmp_path: Path) -> None:
    env = fake_env(tmp_path)
    tested = run_dev("test", "-q", cwd=tmp_path, env=env)
    assert tested.returncode == 0, tested.stderr
    lines = log(tmp_path)
    assert installs(lines) == [f"{REPO_ROOT}[test]"]
    # Two test processes per core: the tests mostly wait on servers and subprocesses.
    assert lines[-1].endswith(f"-m pytest -n {2 * os.cpu_count()} -q")
    chosen = run_dev("test", "-q", cwd=tmp_path, env={**env, "REVIEWBOT_TEST_WORKERS": "3"})
    assert chosen.returncode == 0, chosen.stderr
    assert log(tmp_path)[-1].endswith("-m pytest -n 3 -q")

    linted = run_dev("lint", cwd=tmp_path, env=env)
    assert linted.returncode == 0, linted.stderr
    assert "installing reviewbot with its dev tools" in linted.stderr
    lines = log(tmp_path)
    assert installs(lines) == [f"{REPO_ROOT}[dev]"]
    assert [line.split()[0] for line in lines[-3:]] == ["ruff", "ruff", "mypy"]
    # The linters see the checkout, wherever ./dev was called from.
    assert linted.stdout.splitlines() == [
        f"{tool} in {REPO_ROOT}" for tool in ("ruff", "ruff", "mypy")
    ]


def test_a_relative_venv_is_taken_from_the_callers_directory(tmp_path: Path) -> None:
    env = {**fake_env(tmp_path), "REVIEWBOT_VENV": "relative-venv"}
    tested = run_dev("test", cwd=tmp_path, env=env)
    assert tested.returncode == 0, tested.stderr
    assert (tmp_path / "relative-venv" / "bin" / "python").exists()
    assert not (REPO_ROOT / "relative-venv").exists()


def test_ruff_and_mypy_are_in_the_dev_extra_not_the_test_extra() -> None:
    extras = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    names = {key: {req.split(">")[0].split("[")[0] for req in reqs} for key, reqs in extras.items()}
    assert not {"ruff", "mypy"} & names["test"]
    assert {"ruff", "mypy"} <= names["dev"]
    assert "reviewbot[test]" in extras["dev"]


def test_reviewbot_reads_the_config_of_the_callers_directory(tmp_path: Path) -> None:
    # An invalid value is the quickest proof of which reviewbot.toml was loaded.
    (tmp_path / "reviewbot.toml").write_text('port = "not-a-port"\n')
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "REVIEWBOT_VENV": sys.prefix}
    result = run_dev("reviewbot", "token", "list", cwd=tmp_path, env=env)
    assert result.returncode == 2
    assert "invalid setting port" in result.stderr, result.stderr

    # A read command never creates a store: it names the path it looked at, which proves
    # the caller's reviewbot.toml (not one beside ./dev) chose it.
    (tmp_path / "reviewbot.toml").write_text('data_dir = "data-from-toml"\n')
    result = run_dev("reviewbot", "token", "list", cwd=tmp_path, env=env)
    assert result.returncode == 2, result.stderr
    assert str(tmp_path / "data-from-toml") in result.stderr
    assert not (tmp_path / "data-from-toml").exists()
    assert not (REPO_ROOT / "data-from-toml").exists()
