"""Common configuration mistakes, as a user meets them on the command line: one line each.

Every case runs ``reviewbot`` as a real process and asserts the single line on stderr (no
traceback) and exit code 2 (fix the configuration).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from reviewbot.config import Settings
from reviewbot.core.models import Reason
from reviewbot.core.reasons import ReasonCode
from reviewbot.store import decisions
from reviewbot.store.database import SQLiteDatabase
from reviewbot.store.decisions import DecisionRecord
from reviewbot.workflowdb.bootstrap import open_store
from reviewbot.workflowdb.protected import PACKAGED_NAME
from tests.integration.process_support import clean_env, run_reviewbot, serve_process
from tests.support.paths import REPO_ROOT
from tests.unit.test_config import pem_key

READ_COMMANDS = [
    ("explain", "gitea:acme/api#1"),
    ("token", "list"),
    ("lease", "list"),
    ("db", "query", "SELECT 1"),
    ("db", "log"),
]
AS_ROOT = os.geteuid() == 0 if hasattr(os, "geteuid") else False


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


def tree(folder: Path) -> list[tuple[str, int]]:
    return sorted((str(p.relative_to(folder)), p.stat().st_mtime_ns) for p in folder.rglob("*"))


def make_store(data_dir: Path) -> None:
    """A store with one gate decision, for gitea:acme/api#1 (explain of a PR with no record
    exits 1, so a read that succeeds has something to read)."""
    db = open_store(Settings(data_dir=data_dir))
    try:
        reason = Reason(ReasonCode.REPO_NOT_CONFIGURED, "no rules")
        row = DecisionRecord(
            "d-1", "gitea", "skip", (reason,), 1_767_225_600.0, "gitea", "acme/api", 1
        )
        decisions.record(db, [row])
    finally:
        db.close()


# --- read commands never create a store ------------------------------------------------------


@pytest.mark.parametrize("argv", READ_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_read_command_without_a_store_names_the_path_and_creates_nothing(
    tmp_path: Path, argv: tuple[str, ...]
) -> None:
    done = run_reviewbot(*argv, cwd=tmp_path)
    assert done.returncode == 2
    line = one_line(done.stderr)
    expected = tmp_path / "reviewbot-data" / "db" / "db.sqlite"
    assert f"no reviewbot store at {expected}" in line
    assert "REVIEWBOT_DATA_DIR" in line and "REVIEWBOT_CONFIG" in line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv", READ_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_read_command_finds_the_store_the_environment_names(
    tmp_path: Path, argv: tuple[str, ...]
) -> None:
    make_store(tmp_path / "service-data")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {"REVIEWBOT_DATA_DIR": str(tmp_path / "service-data")}
    before = tree(tmp_path / "service-data")
    done = run_reviewbot(*argv, cwd=elsewhere, env=env)
    assert done.returncode == 0, done.stderr
    assert list(elsewhere.iterdir()) == []
    # Nothing written: no -wal/-shm files another user (the service) could not open later.
    assert tree(tmp_path / "service-data") == before


@pytest.mark.skipif(AS_ROOT, reason="root can write to any folder; run as a normal user")
@pytest.mark.parametrize("argv", [("explain", "gitea:acme/api#1"), ("token", "list")])
def test_read_command_works_on_a_read_only_data_dir(tmp_path: Path, argv: tuple[str, ...]) -> None:
    data = tmp_path / "data"
    make_store(data)
    folders = [p for p in [data, *data.rglob("*")] if p.is_dir()]
    for folder in folders:
        folder.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        done = run_reviewbot(*argv, cwd=tmp_path, env={"REVIEWBOT_DATA_DIR": str(data)})
    finally:
        for folder in folders:
            folder.chmod(stat.S_IRWXU)
    assert done.returncode == 0, done.stderr


def _read_only_mount_works(folder: Path) -> bool:
    if not AS_ROOT or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", f"mount --bind -o ro '{folder}' '{folder}'"],
        capture_output=True,
        check=False,
    )
    return probe.returncode == 0


@pytest.mark.parametrize("writer", [False, True], ids=["idle", "with a live writer"])
@pytest.mark.parametrize("argv", [("explain", "gitea:acme/api#1"), ("token", "list")])
def test_read_command_works_on_a_read_only_file_system(
    tmp_path: Path, argv: tuple[str, ...], writer: bool
) -> None:
    """As root (CI), a read-only bind mount is the read-only data directory root meets."""
    data = tmp_path / "data"
    make_store(data)
    if not _read_only_mount_works(data):
        pytest.skip("needs root and unshare/mount to make a read-only file system")
    db = SQLiteDatabase(data / "db" / "db.sqlite")
    try:
        if writer:  # the service is running: -wal and -shm exist
            with db.write() as tx:
                tx.execute(
                    "INSERT OR REPLACE INTO bot_meta (key, value, updated_at) VALUES (?, ?, ?)",
                    ("probe", "1", 1_767_225_600.0),
                )
            assert (data / "db" / "db.sqlite-wal").exists()
        command = " ".join(shlex.quote(a) for a in (sys.executable, "-m", "reviewbot", *argv))
        script = f"mount --bind -o ro '{data}' '{data}' && exec {command}"
        done = subprocess.run(
            ["unshare", "-m", "sh", "-c", script],
            cwd=tmp_path,
            env=clean_env({"REVIEWBOT_DATA_DIR": str(data)}),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        db.close()
    assert done.returncode == 0, done.stderr


def test_dev_script_keeps_the_callers_directory(tmp_path: Path) -> None:
    root = REPO_ROOT
    venv = root / ".venv"
    if not (venv / ".installed").exists():
        pytest.skip("./dev has not set up .venv in this checkout")
    make_store(tmp_path / "here-data")
    (tmp_path / "reviewbot.toml").write_text('data_dir = "here-data"\n')
    done = subprocess.run(
        [str(root / "dev"), "reviewbot", "token", "list"],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "no tokens" in done.stdout


# --- one line for each common mistake ----------------------------------------------------------


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_port_in_use_is_one_line(tmp_path: Path, busy_port: int) -> None:
    done = run_reviewbot("serve", "--port", str(busy_port), cwd=tmp_path)
    assert done.returncode == 2
    line = done.stderr.strip().splitlines()[-1]
    assert "Traceback" not in done.stderr
    assert line == (
        f"reviewbot: cannot listen on 127.0.0.1:{busy_port}: the port is already in use "
        "(another reviewbot?); choose another with --port or REVIEWBOT_PORT, or stop the "
        "other process"
    )
    # Checked before anything is written: no store was created or migrated.
    assert list(tmp_path.iterdir()) == []
    assert "migration applied" not in done.stderr


def test_an_address_this_machine_lacks_is_one_line_before_the_store(tmp_path: Path) -> None:
    done = run_reviewbot("serve", "--host", "192.0.2.1", "--port", "0", cwd=tmp_path)
    assert done.returncode == 2
    assert (
        done.stderr.strip().splitlines()[-1].startswith("reviewbot: cannot listen on 192.0.2.1:0: ")
    ), done.stderr
    assert "session manager" not in done.stderr and "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []


async def test_a_start_and_stop_log_no_mcp_session_manager_lines(tmp_path: Path) -> None:
    async with serve_process(cwd=tmp_path) as serve:
        log = await serve.stop()
    assert "reviewbot: stopped" in log
    assert "session manager" not in log, log


def test_metrics_port_in_use_stops_the_start_before_the_store(
    tmp_path: Path, busy_port: int
) -> None:
    env = {"REVIEWBOT_METRICS_PORT": str(busy_port)}
    done = run_reviewbot("serve", "--port", "0", "--sim", cwd=tmp_path, env=env)
    assert done.returncode == 2
    line = done.stderr.strip().splitlines()[-1]
    assert f"cannot listen on 127.0.0.1:{busy_port}: the port is already in use" in line
    assert "REVIEWBOT_METRICS_PORT" in line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", [("serve", "--port", "0"), ("token", "create")])
def test_data_dir_that_cannot_be_written_is_one_line(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    (tmp_path / "a-file").write_text("")
    data = tmp_path / "a-file" / "data"  # even root cannot make a folder inside a file
    argv = (*command, "--name", "t", "--scopes", "read") if command[0] == "token" else command
    done = run_reviewbot(*argv, cwd=tmp_path, env={"REVIEWBOT_DATA_DIR": str(data)})
    assert done.returncode == 2
    line = done.stderr.strip().splitlines()[-1]
    assert "Traceback" not in done.stderr
    assert line.startswith(f"reviewbot: data_dir {data}: cannot write there (Not a directory)")
    assert "set REVIEWBOT_DATA_DIR" in line


@pytest.mark.skipif(AS_ROOT, reason="root can write to any folder; run as a normal user")
def test_data_dir_without_write_permission_is_one_line(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=stat.S_IRUSR | stat.S_IXUSR)
    try:
        done = run_reviewbot(
            "token", "create", "--name", "t", "--scopes", "read",
            cwd=tmp_path, env={"REVIEWBOT_DATA_DIR": str(data)},
        )  # fmt: skip
    finally:
        data.chmod(stat.S_IRWXU)
    assert done.returncode == 2
    assert "cannot write there (Permission denied)" in one_line(done.stderr)


@pytest.mark.parametrize("content", [b"ghp_a-token-not-a-key\n", b""])
def test_app_key_that_is_not_a_pem_key_stops_serve_at_load(tmp_path: Path, content: bytes) -> None:
    key = tmp_path / "app.pem"
    key.write_bytes(content)
    env = {"REVIEWBOT_GITHUB__APP_ID": "7", "REVIEWBOT_GITHUB__PRIVATE_KEY_PATH": str(key)}
    done = run_reviewbot("serve", "--port", "0", cwd=tmp_path, env=env)
    assert done.returncode == 2
    assert one_line(done.stderr).startswith(
        f"reviewbot: github.private_key_path: {key} is not a PEM private key"
    )
    assert not (tmp_path / "reviewbot-data").exists()  # refused before anything was opened


def test_real_app_key_passes_the_load_check(tmp_path: Path) -> None:
    key = tmp_path / "app.pem"
    key.write_bytes(pem_key())
    make_store(tmp_path / "reviewbot-data")
    env = {"REVIEWBOT_GITHUB__APP_ID": "7", "REVIEWBOT_GITHUB__PRIVATE_KEY_PATH": str(key)}
    done = run_reviewbot("token", "list", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr


def test_toml_syntax_error_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "reviewbot.toml").write_text('[repos."gitea:acme/api"\nautomerge = true\n')
    done = run_reviewbot("serve", cwd=tmp_path)
    assert done.returncode == 2
    assert one_line(done.stderr).startswith(
        "reviewbot: config file reviewbot.toml: TOML syntax error: "
    )


def test_mistyped_key_gets_did_you_mean(tmp_path: Path) -> None:
    (tmp_path / "reviewbot.toml").write_text('[repos."gitea:acme/api"]\nrequried_checks = []\n')
    done = run_reviewbot("explain", "gitea:acme/api#1", cwd=tmp_path)
    assert done.returncode == 2
    assert one_line(done.stderr) == (
        'reviewbot: invalid setting repos."gitea:acme/api".requried_checks (in reviewbot.toml): '
        "unknown key; did you mean required_checks?"
    )


def test_url_without_scheme_is_refused_at_load(tmp_path: Path) -> None:
    env = {"REVIEWBOT_GITEA__URL": "gitea.example.com", "REVIEWBOT_GITEA__TOKEN": "t"}
    done = run_reviewbot("serve", cwd=tmp_path, env=env)
    assert done.returncode == 2
    assert "write it in full, e.g. https://gitea.example.com" in one_line(done.stderr)


async def test_serve_warns_only_about_the_secret_of_a_configured_forge(tmp_path: Path) -> None:
    env = {"REVIEWBOT_GITEA__URL": "http://127.0.0.1:9", "REVIEWBOT_GITEA__TOKEN": "t"}
    async with serve_process(cwd=tmp_path, env=env) as server:
        stderr = await server.stop()
    assert "no webhook secret for gitea" in stderr
    assert "github" not in stderr


def test_db_apply_help_examples_avoid_the_bot_s_own_migration_names(tmp_path: Path) -> None:
    shown = run_reviewbot("db", "apply", "--help", cwd=tmp_path).stdout
    shown += run_reviewbot("db", "--help", cwd=tmp_path).stdout
    examples = re.findall(r"reviewbot db apply (\S+)", shown)
    assert examples and "site_0001_notes.sql" in examples
    assert [name for name in examples if PACKAGED_NAME.match(name)] == []
