"""The pure rules of the reviewer sandbox: which grants are refused, and the bwrap flags."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from reviewbot.config import ConfigError, load_settings
from reviewbot.core.sandbox import (
    MIB,
    DataFile,
    GrantRefused,
    HostUser,
    Mount,
    SandboxLimits,
    SandboxSpec,
    bwrap_argv,
    check_grant,
    forbidden_files,
    grant_path,
    may_access,
)
from reviewbot.store.epochs import default_ledger_path

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
        for suffix in ("", "-wal", "-shm", "-journal", "-writers")
    }


@pytest.mark.parametrize(
    "raw",
    [
        "db",  # holds the database
        "db/db.sqlite",
        "db/db.sqlite-wal",
        "db/db.sqlite-shm",
        "db/db.sqlite-writers",
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


RUN = PurePosixPath("/srv/reviewbot/runs/r1")
ROOT_BOT = HostUser(65534, 65534, "/usr/bin/setpriv")


def spec(**kw: Any) -> SandboxSpec:
    fields: dict[str, Any] = {
        "bwrap": "/usr/bin/bwrap",
        "argv": ("python3", "lint.py"),
        "cwd": RUN,
        "mounts": (
            Mount(PurePosixPath("/usr"), optional=True),
            Mount(PurePosixPath("/srv/reviewbot/db/migrations")),
            Mount(PurePosixPath("/opt/lint-cache"), writable=True),
        ),
        "seccomp_fd": 7,
        "hidden": (BACKUPS,),
        "files": (DataFile(8, RUN / "delivery.json"), DataFile(9, RUN / "secrets" / "t", 0o400)),
        "folders": ((RUN / "secrets", 0o700),),
        "limits": SandboxLimits(folder_bytes=8 * MIB),
    }
    fields.update(kw)
    return SandboxSpec(**fields)


def flags_after(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


JAIL = [
    "--unshare-user",
    "--unshare-pid",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-net",
    "--die-with-parent",
    "--new-session",
]


@pytest.mark.parametrize("drop_to", [None, ROOT_BOT], ids=["bot-user", "root-bot"])
def test_the_jail_is_the_same_whoever_runs_the_bot(drop_to: HostUser | None) -> None:
    argv = bwrap_argv(spec(drop_to=drop_to))
    jail = argv
    if drop_to is not None:  # the second bwrap, after setpriv
        jail = argv[argv.index("/usr/bin/setpriv") :]
        setpriv = ["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
        assert jail[:5] == setpriv
        jail = jail[5:]
    assert jail[0] == "/usr/bin/bwrap"
    for flag in JAIL:
        assert jail.count(flag) == 1, flag
    assert flags_after(jail, "--uid") == ["65534"] and flags_after(jail, "--gid") == ["65534"]
    assert flags_after(jail, "--cap-drop") == ["ALL"] and "--cap-add" not in jail
    assert flags_after(jail, "--seccomp") == ["7"]
    assert flags_after(jail, "--proc") == ["/proc"]  # the new PID namespace's own
    assert jail[-15:] == [
        *["--perms", "1777", "--size", str(8 * MIB), "--tmpfs", "/dev/shm"],
        *["--remount-ro", "/dev", "--remount-ro", "/"],  # only the tmpfs and grants are written
        *["--chdir", str(RUN), "--", "python3", "lint.py"],
    ]
    # The run folder is a tmpfs of folder_bytes; delivery.json and the secrets are copied in.
    at = jail.index(str(RUN))
    assert jail[at - 5 : at + 1] == ["--perms", "0755", "--size", str(8 * MIB), "--tmpfs", str(RUN)]
    copied = [jail[i - 2 : i + 3] for i, a in enumerate(jail) if a == "--ro-bind-data"]
    assert copied == [
        ["--perms", "444", "--ro-bind-data", "8", f"{RUN}/delivery.json"],
        ["--perms", "400", "--ro-bind-data", "9", f"{RUN}/secrets/t"],
    ]
    assert jail.index(f"{RUN}/secrets") < jail.index(f"{RUN}/secrets/t")
    # Nothing of the environment is on the command line (others can read it there).
    assert "--setenv" not in argv


def test_a_root_bot_builds_the_view_as_root_and_enters_the_jail_as_the_sandbox_user() -> None:
    argv = bwrap_argv(spec(drop_to=ROOT_BOT))
    view = argv[: argv.index("/usr/bin/setpriv")]
    # The first step keeps only what it needs to become the sandbox user, and no namespace
    # of its own but the mounts.
    assert flags_after(view, "--cap-drop") == ["ALL"]
    assert flags_after(view, "--cap-add") == ["CAP_SETUID", "CAP_SETGID"]
    assert not [f for f in view if f.startswith("--unshare")]
    assert "--seccomp" not in view  # the jail's bwrap needs mount and unshare
    binds = [view[i : i + 3] for i, a in enumerate(view) if a.endswith("bind") or "bind-" in a]
    assert binds == [
        ["--bind", "/proc", "/proc"],
        ["--ro-bind-try", "/usr", "/usr"],  # shallow before deep
        ["--bind", "/opt/lint-cache", "/opt/lint-cache"],
        ["--ro-bind", "/srv/reviewbot/db/migrations", "/srv/reviewbot/db/migrations"],
    ]
    assert view.index(str(BACKUPS)) > view.index("/srv/reviewbot/db/migrations")
    # The jail binds that view as its root, then mounts the run folder on it.
    jail = argv[argv.index("/usr/bin/setpriv") :]
    assert jail[jail.index("--bind") : jail.index("--bind") + 3] == ["--bind", "/", "/"]
    assert flags_after(view, "--dir")[-1] == str(RUN)  # the mount point, made by root


def test_the_folders_on_the_way_to_a_mount_are_made_passable() -> None:
    """bwrap 0.8 makes them 0700 for its own user; made first, they are 0755."""
    argv = bwrap_argv(spec(mounts=(Mount(PurePosixPath("/root/.pyenv/versions/3.11")),)))
    dirs = flags_after(argv, "--dir")
    assert dirs[:3] == ["/root", "/root/.pyenv", "/root/.pyenv/versions"]
    assert argv.index("/root/.pyenv/versions") < argv.index("--ro-bind")
    for path in ("/srv", "/srv/reviewbot", "/srv/reviewbot/runs"):
        assert path in dirs


def test_tmp_and_run_are_bounded_tmpfs_every_reviewer_may_write() -> None:
    argv = bwrap_argv(spec())
    at = argv.index("/tmp")
    assert argv[at - 5 : at + 1] == ["--perms", "1777", "--size", str(8 * MIB), "--tmpfs", "/tmp"]
    at = argv.index("/run")
    assert argv[at - 5 : at + 1] == ["--perms", "1777", "--size", str(MIB), "--tmpfs", "/run"]


def test_a_reviewer_may_share_the_network_when_its_rule_says_so() -> None:
    assert "--unshare-net" not in bwrap_argv(spec(network=True))
    assert "--unshare-net" in bwrap_argv(spec(network=False))


@pytest.mark.parametrize(
    ("mode", "owner", "group", "write", "allowed"),
    [
        (0o755, 0, 0, False, True),  # others may list
        (0o755, 0, 0, True, False),  # ...but not write
        (0o700, 0, 0, False, False),
        (0o700, 65534, 0, True, True),  # its own
        (0o770, 0, 65534, True, True),  # its group's
        (0o707, 0, 65534, False, False),  # the group's bits apply to its group, not others'
        (0o711, 0, 0, False, False),  # passable but not listable
    ],
)
def test_what_the_sandbox_user_may_do_in_a_granted_folder(
    mode: int, owner: int, group: int, write: bool, allowed: bool
) -> None:
    assert may_access(mode, owner, group, uid=65534, gid=65534, write=write) is allowed


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
