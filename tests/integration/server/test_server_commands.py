"""The server's commands: gate (delivery files as a step), explain, replay, token."""

from __future__ import annotations

import asyncio
import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from reviewbot.cli import main
from reviewbot.store import decisions, journal
from reviewbot.store.database import SQLiteDatabase
from tests.integration.server_support import SimWorld, sim_world
from tests.support.store_faults import disk_io_error


def configure(
    monkeypatch: pytest.MonkeyPatch, data_dir: Path, world: SimWorld | None = None
) -> None:
    monkeypatch.setenv("REVIEWBOT_DATA_DIR", str(data_dir))
    if world is None:
        return
    gh = world.settings.github
    assert gh.token is not None
    monkeypatch.setenv("REVIEWBOT_GITHUB__API_URL", gh.api_url)
    monkeypatch.setenv("REVIEWBOT_GITHUB__TOKEN", gh.token.get_secret_value())
    monkeypatch.setenv("REVIEWBOT_GITHUB__BOT_LOGIN", "reviewbot")
    monkeypatch.setenv("REVIEWBOT_DEFAULTS__AUTOMERGE", "false")


async def run_cli(*argv: str) -> int:
    return await asyncio.to_thread(main, list(argv))


def route(out: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / "route_selection.json").read_text())
    return data


@pytest.mark.parametrize("kind", ["missing", "directory", "empty", "not json", "a list"])
async def test_unreadable_delivery_file_is_recorded_with_a_route_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    configure(monkeypatch, tmp_path / "data")
    path = tmp_path / "delivery.json"
    if kind == "directory":
        path.mkdir()
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "not json":
        path.write_text("variables: {number: 3}")
    elif kind == "a list":
        path.write_text("[1, 2]")
    out = tmp_path / "out"
    assert await run_cli("gate", "--delivery", str(path), "--out", str(out)) == 2
    found = route(out)
    assert found["decision"] == "error"
    assert found["reasons"][0]["code"] == "delivery_unresolved"
    assert found["reasons"][0]["detail"]
    capsys.readouterr()
    # Recorded: explain finds it by its delivery id.
    assert await run_cli("explain", found["delivery_id"], "--json") == 0
    shown = json.loads(capsys.readouterr().out)
    assert [d["reason_code"] for d in shown["decisions"]] == ["delivery_unresolved"]


async def test_delivery_file_without_pr_number_is_an_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    configure(monkeypatch, tmp_path / "data")
    path = tmp_path / "delivery.json"
    path.write_text(json.dumps({"variables": {"forge": "github", "repository": "acme/api"}}))
    out = tmp_path / "out"
    assert await run_cli("gate", "--delivery", str(path), "--out", str(out)) == 2
    assert "number" in route(out)["reasons"][0]["detail"]


async def test_delivery_file_is_gated_like_the_server_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    async with sim_world(tmp_path / "data") as world:
        configure(monkeypatch, tmp_path / "data", world)
        pr = world.sim.open_pr("github", "acme/api", author="alice")
        path = tmp_path / "delivery.json"
        path.write_text(
            json.dumps(
                {
                    "delivery_id": "step-1",
                    "variables": {"forge": "github", "repository": "acme/api"},
                    "payload": {"function": "review", "args": {}},
                }
            )
        )
        monkeypatch.setenv("VAR_NUMBER", str(pr.number))  # the step's input, read last
        out = tmp_path / "out"
        assert await run_cli("gate", "--delivery", str(path), "--out", str(out)) == 0
        found = route(out)
        assert {k: found[k] for k in ("decision", "forge", "repo", "number", "head_sha")} == {
            "decision": "eligible",
            "forge": "github",
            "repo": "acme/api",
            "number": pr.number,
            "head_sha": pr.head_sha,
        }
        assert found["delivery_id"] == "step-1"
        # The same file again is the same delivery: its decision stands, no second action.
        assert await run_cli("gate", "--delivery", str(path), "--out", str(out)) == 0
        capsys.readouterr()
        assert await run_cli("explain", f"github:acme/api#{pr.number}") == 0
        text = capsys.readouterr().out
        assert text.count("ELIGIBLE") == 1
        assert "the pull request can be reviewed" in text

        # Replay runs the gate again on the stored delivery (VAR_NUMBER was stored with it).
        monkeypatch.delenv("VAR_NUMBER")
        world.sim.update_pr("github", "acme/api", pr.number, draft=True)
        assert await run_cli("replay", "step-1", "--json") == 0
        replayed = json.loads(capsys.readouterr().out)
        assert replayed["decisions"][0]["decision"] == "skip"
        assert replayed["decisions"][0]["reason_code"] == "pr_draft"


async def test_token_commands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    configure(monkeypatch, tmp_path / "data")
    assert (
        await run_cli("token", "create", "--name", "ci", "--scopes", "read,review", "--json") == 0
    )
    created = json.loads(capsys.readouterr().out)
    assert created["token"].startswith("rbt_") and created["scopes"] == ["read", "review"]
    assert await run_cli("token", "list", "--json") == 0
    listed = capsys.readouterr().out
    assert created["token"] not in listed  # never shown again
    assert json.loads(listed)[0]["name"] == "ci"
    db_file = tmp_path / "data" / "db" / "db.sqlite"
    assert created["token"].encode() not in db_file.read_bytes()  # stored hashed only
    assert await run_cli("token", "create", "--name", "x", "--scopes", "root") == 1
    assert "unknown scope 'root'" in capsys.readouterr().err
    assert (
        await run_cli("token", "create", "--name", "y", "--scopes", "read", "--repo", "acme") == 1
    )
    assert "FORGE:OWNER/NAME" in capsys.readouterr().err
    assert await run_cli("token", "revoke", "ci") == 0
    assert await run_cli("token", "revoke", "ci") == 1


def test_every_server_command_has_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (
        ["serve"],
        ["gate"],
        ["explain"],
        ["replay"],
        ["token"],
        ["token", "create"],
        ["token", "list"],
        ["token", "revoke"],
    ):
        with pytest.raises(SystemExit):
            main([*argv, "--help"])
        assert "Example" in capsys.readouterr().out, argv


async def test_a_store_fault_while_a_delivery_file_is_gated_fails_the_step_and_keeps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The disk fails as the step's decision is recorded: nothing was decided, so the route
    file says ``store_unavailable`` (exit 2) and the delivery goes back to the queue; the
    step run again gates it. ``replay`` meeting the same fault says so in one line."""
    async with sim_world(tmp_path / "data") as world:
        configure(monkeypatch, tmp_path / "data", world)
        pr = world.sim.open_pr("github", "acme/api", author="alice")
        path = tmp_path / "delivery.json"
        path.write_text(
            json.dumps(
                {
                    "delivery_id": "step-7",
                    "variables": {
                        "forge": "github",
                        "repository": "acme/api",
                        "number": pr.number,
                    },
                }
            )
        )
        record_many = decisions.record_many
        faults = [0]

        def failing_disk(*args: Any, **kwargs: Any) -> Any:
            faults[0] += 1
            raise disk_io_error()

        monkeypatch.setattr(decisions, "record_many", failing_disk)
        out = tmp_path / "out"
        assert await run_cli("gate", "--delivery", str(path), "--out", str(out)) == 2
        found = route(out)
        assert (found["decision"], found["delivery_id"]) == ("error", "step-7")
        (reason,) = found["reasons"]
        assert reason["code"] == "store_unavailable"
        assert "back in the queue" in reason["detail"], reason
        db = SQLiteDatabase(tmp_path / "data" / "db" / "db.sqlite")
        try:
            stored = journal.get_delivery(db, "step-7")
            assert stored is not None and stored.status == journal.QUEUED
            assert decisions.for_delivery(db, "step-7") == []
        finally:
            db.close()
        capsys.readouterr()
        assert await run_cli("replay", "step-7") == 1
        assert "the store failed (disk I/O error)" in capsys.readouterr().err
        assert faults[0] == 2

        monkeypatch.setattr(decisions, "record_many", record_many)  # the disk is back
        assert await run_cli("gate", "--delivery", str(path), "--out", str(out)) == 0
        assert route(out)["decision"] == "eligible"


def test_a_reader_that_goes_away_is_no_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``reviewbot … | head`` ends quietly with 0 when ``head`` has what it wanted."""
    configure(monkeypatch, tmp_path / "data")
    from reviewbot.cli import explain

    def gone(args: Any) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(explain, "run", gone)
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # main() closes it, as on a real pipe
    assert main(["explain", "x"]) == 0


@pytest.mark.parametrize("where", ["journal", "record, its answer lost"])
async def test_a_store_fault_around_the_gate_of_a_delivery_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """A fault as the file's delivery is journalled: the route file says
    ``store_unavailable`` and the step run again gates it. A record the store committed
    but whose answer was lost stands: the route is its decision, not an error."""
    async with sim_world(tmp_path / "data") as world:
        configure(monkeypatch, tmp_path / "data", world)
        pr = world.sim.open_pr("github", "acme/api", author="alice")
        path = tmp_path / "delivery.json"
        variables = {"forge": "github", "repository": "acme/api", "number": pr.number}
        path.write_text(json.dumps({"delivery_id": "step-8", "variables": variables}))
        out = tmp_path / "out"
        name = "insert_delivery" if where == "journal" else "record_many"
        module: Any = journal if where == "journal" else decisions
        real = getattr(module, name)

        def fault(*args: Any, **kwargs: Any) -> Any:
            if where != "journal":
                real(*args, **kwargs)  # committed; the answer is what fails
            raise disk_io_error()

        monkeypatch.setattr(module, name, fault)
        status = await run_cli("gate", "--delivery", str(path), "--out", str(out))
        found = route(out)
        if where == "journal":
            assert (status, found["decision"]) == (2, "error")
            assert found["reasons"][0]["code"] == "store_unavailable"
            assert found["reasons"][0]["detail"].endswith("run the step again")
            monkeypatch.setattr(module, name, real)
            assert await run_cli("gate", "--delivery", str(path), "--out", str(out)) == 0
        assert route(out)["decision"] == "eligible"
        assert route(out)["delivery_id"] == "step-8"
