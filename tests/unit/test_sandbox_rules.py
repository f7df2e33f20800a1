"""The pure rules of the reviewer sandbox: which grants are refused, and the bwrap flags."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import pytest

from reviewbot.config import ConfigError, load_settings
from reviewbot.core.sandbox import (
    GrantRefused,
    Mount,
    SandboxSpec,
    bwrap_argv,
    check_grant,
    forbidden_files,
    grant_path,
)
from reviewbot.store.leases import default_ledger_path

DATA = PurePosixPath("/srv/reviewbot")
DB = DATA / "db" / "db.sqlite"
BACKUPS = DATA / "db" / "migrations" / ".backups"
FORBIDDEN = forbidden_files(DB)


def check(raw: str) -> PurePosixPath:
    return check_grant(grant_path(raw, DATA), forbidden=FORBIDDEN, backups_dir=BACKUPS)


def test_the_database_its_sidecars_and_the_ledger_are_forbidden() -> None:
    ledger = default_ledger_path(Path(DB))
    assert set(FORBIDDEN) == {
        f"{base}{suffix}"
        for base in (str(DB), str(ledger))
        for suffix in ("", "-wal", "-shm", "-journal")
    }


@pytest.mark.parametrize(
    "raw",
    [
        "db",  # holds the database
        "db/db.sqlite",
        "db/db.sqlite-wal",
        "db/db.sqlite-shm",
        "/srv",  # holds everything
        "/",
        ".",
        str(DATA),
        "db/migrations/.backups",
        "db/migrations/.backups/2024",
        "db/migrations",  # holds the backups; every reviewer sees it without them anyway
        "/srv/reviewbot/db/db.lease-epochs.sqlite",
    ],
)
def test_grants_reaching_the_database_or_its_backups_are_refused(raw: str) -> None:
    with pytest.raises(GrantRefused):
        check(raw)


@pytest.mark.parametrize("raw", ["../elsewhere", "runs/../../etc", "/srv/reviewbot/../x", ""])
def test_dot_dot_and_empty_paths_are_refused(raw: str) -> None:
    with pytest.raises(GrantRefused):
        grant_path(raw, DATA)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("shared/cache", "/srv/reviewbot/shared/cache"),
        ("runs", "/srv/reviewbot/runs"),
        ("/opt/lint-rules", "/opt/lint-rules"),
    ],
)
def test_other_folders_may_be_granted(raw: str, expected: str) -> None:
    assert check(raw) == PurePosixPath(expected)


def test_bwrap_gets_its_own_namespaces_and_only_the_named_mounts() -> None:
    spec = SandboxSpec(
        "/usr/bin/bwrap",
        ("python3", "lint.py"),
        PurePosixPath("/srv/reviewbot/runs/r1"),
        (
            Mount(PurePosixPath("/srv/reviewbot/runs/r1"), writable=True),
            Mount(PurePosixPath("/usr"), optional=True),
            Mount(PurePosixPath("/srv/reviewbot/db/migrations")),
        ),
        hidden=(BACKUPS,),
    )
    argv = bwrap_argv(spec)
    for flag in ("--unshare-pid", "--unshare-ipc", "--unshare-net", "--die-with-parent"):
        assert flag in argv
    assert argv[argv.index("--proc") + 1] == "/proc"  # the new PID namespace's own /proc
    assert argv[-3:] == ["--", "python3", "lint.py"]
    binds = [argv[i : i + 3] for i, a in enumerate(argv) if a.endswith("bind") or "bind-" in a]
    assert binds == [
        ["--ro-bind-try", "/usr", "/usr"],  # shallow before deep
        ["--bind", "/srv/reviewbot/runs/r1", "/srv/reviewbot/runs/r1"],
        ["--ro-bind", "/srv/reviewbot/db/migrations", "/srv/reviewbot/db/migrations"],
    ]
    # The backups are covered after the migrations folder is mounted.
    assert argv.index(str(BACKUPS)) > argv.index("/srv/reviewbot/db/migrations")
    # Nothing of the environment is on the command line (others can read it there).
    assert "--setenv" not in argv


def test_a_reviewer_may_share_the_network_when_its_rule_says_so() -> None:
    spec = SandboxSpec("bwrap", ("true",), PurePosixPath("/"), (), network=True)
    assert "--unshare-net" not in bwrap_argv(spec)


def _settings_with_grant(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    config = tmp_path / "reviewbot.toml"
    config.write_text(
        f'data_dir = "{tmp_path / "data"}"\n'
        '[repos."github:acme/api"]\n'
        f'reviewers = [{{command = "lint", grants = [{{path = "{path}", mode = "ro"}}]}}]\n'
    )
    monkeypatch.setenv("REVIEWBOT_CONFIG", str(config))
    load_settings()


@pytest.mark.parametrize("path", ["db", "db/db.sqlite-wal", "../outside", "db/migrations/.backups"])
def test_settings_with_a_grant_on_the_database_do_not_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    with pytest.raises(ConfigError, match="reviewers"):
        _settings_with_grant(tmp_path, monkeypatch, path)


def test_settings_with_an_ordinary_grant_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _settings_with_grant(tmp_path, monkeypatch, "shared/rules")


def test_a_secret_names_exactly_one_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "reviewbot.toml"
    config.write_text('[reviewers.lint.secrets]\nTOKEN = {env = "A", file = "/b"}\n')
    monkeypatch.setenv("REVIEWBOT_CONFIG", str(config))
    with pytest.raises(ConfigError, match="exactly one of env or file"):
        load_settings()
