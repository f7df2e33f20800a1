"""How reviewbot prints itself in the commands it tells a person to run: as it was started."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

from reviewbot.cli import invoked_as


def test_dev_says_how_it_was_called() -> None:
    assert invoked_as("/x/.venv/bin/reviewbot", {"REVIEWBOT_INVOKED_AS": "./dev reviewbot"}) == (
        "./dev reviewbot"
    )


def test_python_m_is_printed_with_its_interpreter() -> None:
    expected = f"{shlex.quote(sys.executable)} -m reviewbot"
    assert invoked_as("/src/reviewbot/__main__.py", {}) == expected


def test_the_name_when_path_finds_this_script_else_its_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "reviewbot"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    assert invoked_as(str(script), {}) == "reviewbot"
    other = tmp_path / "venv with space" / "reviewbot"
    other.parent.mkdir()
    other.write_text("#!/bin/sh\n")
    other.chmod(0o755)
    assert invoked_as(str(other), {}) == shlex.quote(str(other))
