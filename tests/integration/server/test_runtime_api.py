"""GET /api/v1/runtime: the running version, schema, configuration and sandbox, and whether
the code or configuration on disk differs from what runs. The configuration test changes
the file under a real ``reviewbot serve`` process."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from reviewbot.core.clock import iso
from reviewbot.runtime import parity
from reviewbot.workflowdb.bootstrap import open_store
from reviewbot.workflowdb.paths import WorkflowPaths
from tests.integration.process_support import run_reviewbot, serve_process
from tests.integration.server_support import (
    GITEA_SECRET,
    Running,
    make_settings,
    running_server,
)
from tests.support.clock import FakeClock


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Running]:
    async with running_server(make_settings(tmp_path / "data"), forges={}, clock=FakeClock()) as r:
        yield r


async def test_runtime_reports_what_runs_and_hides_secrets(server: Running) -> None:
    status, body = await server.get("/api/v1/runtime", server.token("read"))
    assert status == 200, body
    assert body["version"] == parity.reviewbot.__version__
    assert body["started_at"] == iso(1_800_000_000.0)
    assert body["schema_version"] >= 14
    assert re.fullmatch(r"\d{4}_[a-z0-9_]+\.sql", body["last_migration"]["file_name"])
    assert body["config_hash"].startswith("sha256:")
    assert body["sandbox"]["status"] in ("enforced", "off", "unavailable")
    assert (body["code_changed"], body["restart_needed"], body["reasons"]) == (False, False, [])
    assert body["config_changed"] is None  # settings given in code: no file to compare
    # The secret is never shown, and the hash does not contain it either.
    text = json.dumps(body)
    assert GITEA_SECRET not in text
    assert body["config"]["gitea"]["webhook_secret"] == "<secret>"

    bound = server.token("read", repo="gitea:acme/api")
    status, body = await server.get("/api/v1/runtime", bound)
    assert status == 200 and "config" not in body  # it names every repository
    status, body = await server.get("/api/v1/runtime", server.token("lease"))
    assert (status, body["error"]) == (403, "missing_scope")
    status, body = await server.get("/api/v1/runtime", None)
    assert status == 401


def test_a_secret_changes_the_hash_but_never_shows(tmp_path: Path) -> None:
    one = make_settings(tmp_path)
    two = make_settings(tmp_path, gitea={"webhook_secret": "another"})
    assert parity.config_hash(one) != parity.config_hash(two)
    assert parity.config_view(one) == parity.config_view(two)


def test_changed_code_on_disk_needs_a_restart(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "a.py").write_text("x = 1\n")
    db = open_store(WorkflowPaths(tmp_path / "data"))
    try:
        boot = parity.boot_snapshot(make_settings(tmp_path), started_at=0.0, package_dir=package)
        assert parity.runtime_report(boot, db, {}).restart_needed is False
        (package / "a.py").write_text("x = 2\n")
        report = parity.runtime_report(boot, db, {})
        assert report.code_changed and report.restart_needed
        assert report.reasons == ("the code on disk differs from the running code",)
    finally:
        db.close()


def test_a_commit_that_cannot_be_read_now_is_not_a_moved_checkout(tmp_path: Path) -> None:
    # The package folder is no checkout, so git answers nothing, as when git is slow or gone;
    # the process started from a commit: unknown now is not "moved".
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "a.py").write_text("x = 1\n")
    db = open_store(WorkflowPaths(tmp_path / "data"))
    try:
        boot = parity.boot_snapshot(make_settings(tmp_path), started_at=0.0, package_dir=package)
        boot = dataclasses.replace(boot, commit="a" * 40)
        report = parity.runtime_report(boot, db, {})
        assert report.restart_needed is False, report.reasons
    finally:
        db.close()


def _get(url: str, token: str) -> Any:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=20) as response:
        return json.load(response)


async def test_a_changed_config_file_under_a_running_serve_needs_a_restart(
    tmp_path: Path,
) -> None:
    config = tmp_path / "reviewbot.toml"
    config.write_text('[defaults]\nrequired_checks = ["ci/test"]\n')
    env = {"REVIEWBOT_DATA_DIR": str(tmp_path / "data"), "REVIEWBOT_CONFIG": str(config)}
    done = run_reviewbot(
        "token", "create", "--name", "ops", "--scopes", "read", "--json", cwd=tmp_path, env=env
    )
    assert done.returncode == 0, done.stderr
    token = json.loads(done.stdout)["token"]
    async with serve_process(cwd=tmp_path, env=env) as server:
        url = server.base + "/api/v1/runtime"
        before = await asyncio.to_thread(_get, url, token)
        assert (before["config_changed"], before["restart_needed"]) == (False, False)
        assert before["config"]["defaults"]["required_checks"] == ["ci/test"]

        config.write_text('[defaults]\nrequired_checks = ["ci/test", "lint"]\n')
        after = await asyncio.to_thread(_get, url, token)
        assert (after["config_changed"], after["restart_needed"]) == (True, True)
        assert after["config_hash"] == before["config_hash"]  # what runs did not change
        assert after["config_on_disk_hash"] != before["config_hash"]
        assert after["reasons"] == ["the configuration on disk differs from the running one"]

        config.write_text("[defaults\n")  # a broken file is a reason as well, not a crash
        broken = await asyncio.to_thread(_get, url, token)
        assert broken["restart_needed"] is True
        assert broken["reasons"][0].startswith("the configuration on disk does not load")
