"""A hostile external reviewer run by a real ``reviewbot serve`` process, as root and as an
unprivileged user: whoever runs the bot, the reviewer holds no capability, cannot write
outside its grants, and cannot reach the database by any path or handle.

The forge is the simulator (in this process); the serve is ``python -m reviewbot serve``
with its own environment and data folder; the reviewer is ``hostile_reviewer.py``, which
tries every way out it knows (open_by_handle_at, mount, a new user namespace, /proc/1/root,
ptrace...) and writes what each attempt gave into a writable grant. The tests read that
report after the bot posted its review.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from reviewbot.runtime.reviewers.sandbox import probe
from reviewbot.sim.server import SimServer
from reviewbot.sim.simulator import Simulator
from tests.integration.process_support import clean_env, serve_process
from tests.integration.review_support import (
    APPROVED,
    BOT,
    REPO,
    SECRET,
    START_S,
    prepare_sim,
    wait_for,
)
from tests.integration.runtime.reviewers.test_sandbox import (
    GREEDY,
    HOSTILE,
    SERVER_SECRET,
    assert_bounded,
    assert_contained,
)
from tests.support.paths import SRC

pytestmark = pytest.mark.slow

NOBODY = 65534
STATE = probe("on")


def as_nobody(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``argv`` run as uid and gid 65534; a program it cannot start exits 127."""
    try:
        return _as_nobody(argv, env)
    except OSError as exc:
        return subprocess.CompletedProcess(argv, 127, "", str(exc))


def _as_nobody(
    argv: tuple[str, ...], env: dict[str, str] | None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        user=NOBODY,
        group=NOBODY,
        extra_groups=[],
        env=env,
        cwd="/",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def python_for_nobody() -> tuple[str, dict[str, str]]:
    """An interpreter (and the variables it needs) with which uid 65534 can import
    reviewbot: this one, or, when this one lives where that user cannot go (under /root),
    the system's Python of the same version reading this environment's packages. Skips,
    saying why, when there is none."""
    if os.geteuid() != 0:
        pytest.skip("running serve as another user needs root")
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is not installed")
    check = "import reviewbot, sys; print(sys.version_info[:2])"
    if as_nobody(sys.executable, "-c", check, env=clean_env()).returncode == 0:
        return sys.executable, {}
    paths = dict.fromkeys(
        [str(SRC), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    )
    extra = {"PYTHONPATH": os.pathsep.join(paths)}
    wanted = str(tuple(sys.version_info[:2]))
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if not os.access(candidate, os.X_OK):
            continue
        done = as_nobody(candidate, "-c", check, env=clean_env(extra))
        if done.returncode == 0 and done.stdout.strip() == wanted:
            return candidate, extra
    pytest.skip(
        f"uid {NOBODY} can run neither {sys.executable} (its folders are closed to it) nor "
        f"a system Python {wanted[1:-1].replace(', ', '.')} that imports this environment"
    )


@contextlib.contextmanager
def workdir(tmp_path: Path, owner: int | None) -> Iterator[Path]:
    """A folder for the serve's configuration and data: ``tmp_path``, or one ``owner`` can
    use (pytest's own temporary folders are closed to other users)."""
    if owner is None:
        yield tmp_path
        return
    base = Path(tempfile.mkdtemp(prefix="reviewbot-serve-"))
    try:
        os.chown(base, owner, owner)
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def serve_env(
    base: Path, sim_server: SimServer, tokens: dict[str, str], python: str, greedy: bool
) -> dict[str, str]:
    """The serve's environment and configuration: the hostile reviewer (or, ``greedy``, the
    one that measures its bounds, under small [reviewer_limits])."""
    data = base / "data"
    out, rules, outside = data / "out", base / "rules", data / "outside.txt"
    rules.mkdir(exist_ok=True)
    (rules / "rules.txt").write_text("no print()")
    db_file = data / "db" / "db.sqlite"
    if greedy:
        (base / "greedy.py").write_text(GREEDY)
        argv = [python, str(base / "greedy.py"), str(out)]
    else:
        argv = [python, str(HOSTILE), str(out), str(db_file), str(outside), str(rules)]
    entry = (
        f"{{ command = {json.dumps(shlex.join(argv))}, grants = ["
        f'{{ path = {json.dumps(str(out))}, mode = "rw" }}, '
        f'{{ path = {json.dumps(str(rules))}, mode = "ro" }}] }}'
    )
    config = base / "reviewbot.toml"
    config.write_text(
        "".join(f'[repos."{f}:{REPO}"]\nreviewers = [{entry}]\n' for f in ("github", "gitea"))
        + (GREEDY_LIMITS if greedy else "")
    )
    return clean_env(
        {
            "REVIEWBOT_CONFIG": str(config),
            "REVIEWBOT_DATA_DIR": str(data),
            "REVIEWBOT_GITHUB__API_URL": sim_server.github_api_url,
            "REVIEWBOT_GITHUB__TOKEN": tokens["github"],
            "REVIEWBOT_GITHUB__WEBHOOK_SECRET": SECRET,
            "REVIEWBOT_GITEA__URL": sim_server.gitea_url,
            "REVIEWBOT_GITEA__TOKEN": tokens["gitea"],
            "REVIEWBOT_GITEA__WEBHOOK_SECRET": SECRET,
            "REVIEWBOT_WORKERS": "2",
            "FORGE_DEPLOY_TOKEN": SERVER_SECRET,  # a secret of the server's environment
        }
    )


async def hostile_review(
    tmp_path: Path, forge: str, *, user: int | None, greedy: bool = False
) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """Run the hostile reviewer through a real serve (as ``user``, or as this process's
    user); return its report, the serve's /readyz answer and the secrets the reviewer must
    not have seen. What it may have done to the host is checked here."""
    python, extra = python_for_nobody() if user is not None else (sys.executable, {})
    sim = Simulator()
    async with SimServer(sim) as sim_server:
        tokens = prepare_sim(sim)
        with workdir(tmp_path, user) as base:
            env = {**serve_env(base, sim_server, tokens, python, greedy), **extra}
            for path in base.iterdir():  # the config and the read-only grant: the bot's own
                if user is not None:
                    os.chown(path, user, user)
            pr = sim.open_pr(forge, REPO, author="alice")
            sim.set_status(forge, REPO, pr.head_sha, "ci/test", "success")
            async with serve_process(
                cwd=base, env=env, start_s=START_S, user=user, python=python
            ) as bot:
                sim.set_webhook(forge, url=f"{bot.base}/webhooks/{forge}", secret=SECRET)
                await sim.deliver_pull_request(forge, REPO, pr.number, action="opened")

                def reviewed() -> bool:
                    reviews = sim.pull(forge, REPO, pr.number).reviews
                    return any(r.user == BOT and r.commit_id == pr.head_sha for r in reviews)

                await wait_for(reviewed, "the bot's review", limit_s=90)
                async with httpx.AsyncClient() as client:
                    ready = (await client.get(f"{bot.base}/readyz", timeout=30)).json()
                log = await bot.stop()
            reviews = [r for r in sim.pull(forge, REPO, pr.number).reviews if r.user == BOT]
            assert [(r.state, r.commit_id) for r in reviews] == [(APPROVED[forge], pr.head_sha)]
            report_file = base / "data" / "out" / "report.json"
            assert report_file.exists(), log
            report = json.loads(report_file.read_text())
            leaked = [SERVER_SECRET, SECRET, *tokens.values()]
            assert not (base / "data" / "outside.txt").exists()
            assert not (base / "rules" / "planted").exists()
            assert not (base / "data" / "db" / "planted").exists()
            assert not (base / "data" / "planted").exists()
            assert not (base / "data" / "runs" / "planted").exists()
            assert (base / "data" / "db" / "db.sqlite").stat().st_size > 0
            return report, ready, leaked


def assert_no_secret(report: dict[str, Any], secrets: list[str]) -> None:
    seen = json.dumps(report)
    for secret in secrets:
        assert secret not in seen


@pytest.mark.skipif(not STATE.enforced, reason=f"the sandbox cannot run here: {STATE.reason}")
@pytest.mark.skipif(os.geteuid() != 0, reason="this one runs serve as root; run the tests as root")
@pytest.mark.parametrize("forge", ["github", "gitea"])
async def test_a_root_serve_hands_a_hostile_reviewer_no_privilege_and_no_database(
    tmp_path: Path, forge: str
) -> None:
    report, ready, secrets = await hostile_review(tmp_path, forge, user=None)
    assert_contained(report)
    assert_no_secret(report, secrets)
    (sandbox,) = [c for c in ready["checks"] if c["name"] == "sandbox"]
    assert sandbox["ok"] and sandbox["detail"].endswith(f"as host uid {NOBODY}")


@pytest.mark.skipif(not STATE.enforced, reason=f"the sandbox cannot run here: {STATE.reason}")
async def test_an_unprivileged_serve_hands_a_hostile_reviewer_no_privilege_and_no_database(
    tmp_path: Path,
) -> None:
    report, ready, secrets = await hostile_review(tmp_path, "github", user=NOBODY)
    assert_contained(report)
    assert_no_secret(report, secrets)
    (sandbox,) = [c for c in ready["checks"] if c["name"] == "sandbox"]
    assert sandbox["ok"] and sandbox["detail"].endswith(f"as host uid {NOBODY}")


GREEDY_LIMITS = """
[reviewer_limits]
processes = 32
memory_bytes = 268435456
cpu_s = 1
open_files = 64
file_bytes = 12582912
folder_bytes = 8388608
"""


@pytest.mark.skipif(not STATE.enforced, reason=f"the sandbox cannot run here: {STATE.reason}")
async def test_an_unprivileged_serve_bounds_its_reviewers_as_configured(tmp_path: Path) -> None:
    """The process limit counts the serve's own threads too (same host user): it is set over
    what that user runs when the reviewer starts."""
    report, _, _ = await hostile_review(tmp_path, "gitea", user=NOBODY, greedy=True)
    assert_bounded(report)
