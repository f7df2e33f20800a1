"""Deployment files work as shipped: real commands, settings, paths and ports.

The compose file is parsed as YAML and its default service is started as the real command
with its own environment; the Dockerfile's health check is run against that server; the
systemd unit is parsed (and checked by ``systemd-analyze verify`` where it exists).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import sysconfig
import tempfile
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from reviewbot.cli import build_parser
from reviewbot.config import ENV_PREFIX, Settings
from tests.integration.process_support import clean_env, run_reviewbot, serve_process
from tests.integration.server_support import WAIT_S

from .test_docs_configuration import SETTING_VARS

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
FILES = sorted(p for p in DEPLOY.iterdir() if p.is_file())
# Variables that are not settings but are read by reviewbot itself.
OTHER_VARS = {f"{ENV_PREFIX}CONFIG"}
DEFAULT_PORT = Settings.model_fields["port"].default


def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return data


def dockerfile() -> dict[str, list[str]]:
    """Each instruction's arguments, continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", (DEPLOY / "Dockerfile").read_text())
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            word, _, rest = line.strip().partition(" ")
            found.setdefault(word.upper(), []).append(rest.strip())
    return found


def unit() -> dict[str, list[tuple[str, str]]]:
    """``[Section]`` -> ``(key, value)`` in order (systemd allows repeated keys)."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current = ""
    for line in (DEPLOY / "reviewbot.service").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = line.strip("[]")
            sections[current] = []
            continue
        key, _, value = line.partition("=")
        sections[current].append((key, value))
    return sections


def unit_values(key: str, section: str = "Service") -> list[str]:
    return [v for k, v in unit()[section] if k == key]


def unit_environment() -> dict[str, str]:
    return dict(v.split("=", 1) for v in unit_values("Environment"))


def parses_as_a_command(argv: list[str]) -> None:
    """``reviewbot ARGV`` is a real command line (argparse exits on anything else)."""
    args = build_parser().parse_args(argv)
    assert callable(args.func)


def _docker_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for item in dockerfile()["ENV"]:
        env.update(dict(pair.split("=", 1) for pair in shlex.split(item)))
    return env


# --- every file -------------------------------------------------------------------------------


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_environment_variables_are_real_settings(path: Path) -> None:
    used = set(re.findall(r"\b(REVIEWBOT_[A-Z0-9_]+)", path.read_text()))
    unknown = used - set(SETTING_VARS) - OTHER_VARS
    assert not unknown, f"{path.name} sets variables reviewbot does not read: {sorted(unknown)}"


def test_example_config_is_loadable() -> None:
    Settings.model_validate(tomllib.loads((DEPLOY / "reviewbot.example.toml").read_text()))


# --- compose ----------------------------------------------------------------------------------


def test_default_compose_service_needs_no_edits() -> None:
    services = compose()["services"]
    default = [name for name, svc in services.items() if not svc.get("profiles")]
    assert default == ["reviewbot"]
    svc = services["reviewbot"]
    assert svc["command"] == ["serve", "--sim"]
    parses_as_a_command(svc["command"])
    # Nothing the user has to provide: no config file, no key, no required env file.
    assert "REVIEWBOT_CONFIG" not in svc["environment"]
    assert "env_file" not in svc
    assert all(str(v).split(":")[0].endswith("-data") for v in svc["volumes"])


@pytest.mark.parametrize("name", ["reviewbot", "reviewbot-forge"])
def test_compose_service_agrees_with_the_image_and_settings(name: str) -> None:
    data = compose()
    svc = data["services"][name]
    assert svc["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}
    env = svc["environment"]
    port = int(env["REVIEWBOT_PORT"])
    # Published on this machine's loopback only; a proxy in front serves others.
    assert svc["ports"][0] == f"127.0.0.1:{port}:{port}"
    assert all(str(p).startswith("127.0.0.1:") for p in svc["ports"])
    assert port == DEFAULT_PORT and env["REVIEWBOT_HOST"] == "0.0.0.0"
    mounts = [v for v in svc["volumes"] if isinstance(v, str)]
    named = {m.split(":")[0]: m.split(":")[1] for m in mounts if not m.startswith(".")}
    assert env["REVIEWBOT_DATA_DIR"] in named.values()
    assert set(named) <= set(data["volumes"])
    # A configuration error exits 2; retrying it forever would only crash-loop.
    assert svc["restart"].startswith("on-failure:")
    parses_as_a_command(svc["command"])


def test_forge_service_mounts_its_config_and_fails_when_it_is_missing() -> None:
    svc = compose()["services"]["reviewbot-forge"]
    assert svc["profiles"] == ["forge"]
    binds = [v for v in svc["volumes"] if isinstance(v, dict)]
    config = next(b for b in binds if b["target"] == svc["environment"]["REVIEWBOT_CONFIG"])
    assert config["source"] == "./reviewbot.toml" and config["read_only"] is True
    assert config["bind"]["create_host_path"] is False  # not an empty folder named .toml
    assert svc["env_file"] == [{"path": "reviewbot.env", "required": False}]
    # The user's files next to the compose file are never committed.
    ignored = (ROOT / ".gitignore").read_text().split()
    assert {"deploy/reviewbot.toml", "deploy/reviewbot.env", "deploy/*.pem"} <= set(ignored)


async def test_default_compose_service_starts_and_the_image_health_check_passes(
    tmp_path: Path,
) -> None:
    svc = compose()["services"]["reviewbot"]
    env = {k: str(v) for k, v in svc["environment"].items()}
    # The container's paths and port, moved to this machine; everything else as shipped.
    env |= {"REVIEWBOT_DATA_DIR": str(tmp_path / "data"), "REVIEWBOT_HOST": "127.0.0.1"}
    args = svc["command"][1:]
    async with serve_process(*args, cwd=tmp_path, env=env) as server:
        port = server.base.rsplit(":", 1)[1]
        check = json.loads(dockerfile()["HEALTHCHECK"][0].split("CMD", 1)[1])
        assert check[0] == "python"
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, *check[1:]],
            env={"REVIEWBOT_PORT": port},
            capture_output=True,
            timeout=30,
            check=False,
        )
        assert done.returncode == 0, done.stderr


# --- the try-it steps, as printed -------------------------------------------------------------

COMPOSE_ARG = "-f deploy/compose.yaml"
EXEC = f"docker compose {COMPOSE_ARG} exec reviewbot reviewbot "
UP = f"docker compose {COMPOSE_ARG} up -d --build --wait"
# Where the steps are printed: the compose file's header, and a fenced block of each doc.
STEP_DOCS = [ROOT / "README.md", ROOT / "docs" / "operations.md"]


def compose_steps() -> list[str]:
    """The commands of the compose file's "Try it" comment, in order."""
    text = (DEPLOY / "compose.yaml").read_text()
    block = text.split("# Try it:", 1)[1].split("\n#\n", 1)[0]
    lines = [line.removeprefix("#").strip() for line in block.splitlines()]
    return [line for line in lines if line.startswith(("docker compose", "curl "))]


def doc_steps(path: Path) -> list[str]:
    """The commands of the ``sh`` block that starts with the compose ``up`` of ``path``."""
    blocks = re.findall(r"```sh\n(.*?)```", path.read_text(), flags=re.S)
    (block,) = [b for b in blocks if b.startswith(UP)]
    return [line for line in block.splitlines() if line and not line.startswith("#")]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_compose_needs_a_version_that_reads_its_env_file_form_and_says_so() -> None:
    # `env_file` entries with `path:`/`required:` came with Docker Compose 2.24.0.
    forms = [f for svc in compose()["services"].values() for f in svc.get("env_file", [])]
    assert forms and all(isinstance(f, dict) and "required" in f for f in forms)
    assert "Docker Compose 2.24 or newer" in (DEPLOY / "compose.yaml").read_text()
    assert "Docker Compose 2.24 or newer" in (ROOT / "docs" / "operations.md").read_text()


def test_the_docs_print_the_compose_files_try_it_steps() -> None:
    steps = compose_steps()
    assert steps[0] == UP and len(steps) > 5
    for path in STEP_DOCS:
        assert doc_steps(path) == steps, path.name


async def test_the_printed_try_it_steps_reach_an_approval_and_a_merge(tmp_path: Path) -> None:
    """The default service as compose starts it, and each printed step run as printed: the
    ``curl`` lines as they are, ``docker compose exec reviewbot reviewbot ...`` as reviewbot
    with the container's environment. Only the container's paths and ports are moved to this
    machine (a free loopback port for each published one)."""
    svc = compose()["services"]["reviewbot"]
    env = {k: str(v) for k, v in svc["environment"].items()}
    published = {}
    for mapping in svc["ports"]:
        address, host_port, container_port = str(mapping).split(":")
        published[f"{address}:{host_port}"] = int(container_port)
    # The steps talk to the simulator where compose publishes its port.
    sim_at = next(a for a, port in published.items() if port == int(env["REVIEWBOT_SIM_PORT"]))
    bot_at = next(a for a, port in published.items() if port == int(env["REVIEWBOT_PORT"]))
    assert env["REVIEWBOT_SIM_HOST"] == "0.0.0.0"  # in the container, so the port reaches it
    sim_port = free_port()
    env |= {
        "REVIEWBOT_DATA_DIR": str(tmp_path / "data"),
        "REVIEWBOT_HOST": "127.0.0.1",
        "REVIEWBOT_SIM_HOST": "127.0.0.1",
        "REVIEWBOT_SIM_PORT": str(sim_port),
    }
    steps = compose_steps()
    assert steps[0] == UP
    async with serve_process(*svc["command"][1:], cwd=tmp_path, env=env) as server:
        moved = {sim_at: f"127.0.0.1:{sim_port}", bot_at: server.base.split("//", 1)[1]}

        def run(step: str) -> str:
            for published_at, here in moved.items():
                step = step.replace(f"http://{published_at}", f"http://{here}")
            if step.startswith(EXEC):
                done = run_reviewbot(*shlex.split(step.removeprefix(EXEC)), cwd=tmp_path, env=env)
            else:
                argv = shlex.split(step)
                assert argv[0] == "curl", step
                done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
            assert done.returncode == 0, (step, done.stdout, done.stderr)
            return done.stdout

        async def until(step: str, wanted: Callable[[str], bool]) -> str:
            """Run ``step`` again until its output is what the comment before it says (the
            bot works on each webhook in the background)."""
            loop = asyncio.get_running_loop()
            deadline = loop.time() + WAIT_S
            while not wanted(out := await asyncio.to_thread(run, step)):
                assert loop.time() < deadline, (step, out)
                await asyncio.sleep(0.2)
            return out

        explains = [s for s in steps if s.startswith(f"{EXEC}explain ")]
        for step in steps[1:]:
            if step == explains[0]:  # 2. waiting for the required checks
                await until(step, lambda out: "WAITING" in out and "checks_pending" in out)
            elif step.startswith("curl -s http") and "/_sim/pulls/" in step:  # 4. merged
                pull = json.loads(await until(step, lambda out: json.loads(out)["merged"]))
                assert pull["reviews"] and pull["merged"] is True
            elif step == explains[-1] and step is not explains[0]:
                out = run(step)
                assert "was merged at" in out and "APPROVE" in out
            elif step.startswith(f"{EXEC}token link "):
                link = run(step).split()[0]
            else:
                run(step)
        # 5. the link signs a browser in to the status page, which shows the merge.
        assert link.startswith(server.base + "/login?link=")
        async with aiohttp.ClientSession() as http:
            async with http.get(link) as form:
                csrf = re.search(r'name="csrf" value="([^"]+)"', await form.text())
                assert form.status == 200 and csrf
                cookie = form.cookies["reviewbot_csrf"].value
            async with http.post(
                server.base + "/login",
                data={"csrf": csrf.group(1), "link": link.split("link=", 1)[1]},
                headers={"Cookie": f"reviewbot_csrf={cookie}"},
                allow_redirects=False,
            ) as signed:
                assert signed.status == 303
                session = signed.cookies["reviewbot_session"].value
            async with http.get(
                server.base + "/", headers={"Cookie": f"reviewbot_session={session}"}
            ) as page:
                text = await page.text()
        assert page.status == 200 and "gitea:acme/demo#1" in text
        assert '<span class="badge merged">' in text


def test_the_printed_key_step_lets_the_image_user_read_a_0600_key(tmp_path: Path) -> None:
    """A GitHub App key saved with mode 0600 by someone else is unreadable by the image's
    user (uid 10001) through a bind mount, which keeps owner and mode; the compose file's
    step makes it readable to that user alone."""
    if os.geteuid() != 0:
        pytest.skip("running as uid 10001 needs root")
    uid = 10001
    assert re.search(rf"--uid\s+{uid}\b", " ".join(dockerfile()["RUN"]))
    (step,) = [
        line.removeprefix("#").strip()
        for line in (DEPLOY / "compose.yaml").read_text().splitlines()
        if "chown" in line and "github-app.pem" in line
    ]
    folder = Path(tempfile.mkdtemp(prefix="reviewbot-key-"))
    try:
        folder.chmod(0o755)  # pytest's own folders are closed to other users
        key = folder / "github-app.pem"
        key.write_bytes(_pem())
        key.chmod(0o600)
        config = _example_with(folder, app_id="123456", private_key_path=f'"{key}"')
        config.chmod(0o644)
        (folder / "data").mkdir()
        os.chown(folder / "data", uid, uid)  # as the image's /data volume

        python, paths = _python_for(uid)

        def start_as_image_user() -> str:
            env = clean_env({"REVIEWBOT_CONFIG": str(config), "REVIEWBOT_PORT": "0", **paths})
            env["REVIEWBOT_DATA_DIR"] = str(folder / "data")
            done = subprocess.run(
                [python, "-m", "reviewbot", "serve"],
                cwd=folder, env=env, capture_output=True, text=True, timeout=60, check=False,
                user=uid, group=uid, extra_groups=[],
            )  # fmt: skip
            assert done.returncode == 2, done.stderr
            return done.stderr.splitlines()[-1]

        # As saved, the host user's: the start stops at the key, with one line.
        assert start_as_image_user() == (
            f"reviewbot: github.private_key_path: cannot read {key}: Permission denied (point "
            "REVIEWBOT_GITHUB__PRIVATE_KEY_PATH at the App's private key file, or mount it there)"
        )
        # The printed step, on this copy of the key (as root already: without sudo).
        here = step.replace("sudo ", "").replace("deploy/github-app.pem", shlex.quote(str(key)))
        subprocess.run(["sh", "-c", here], check=True, timeout=30)
        assert (key.stat().st_uid, key.stat().st_mode & 0o777) == (uid, 0o400)
        # The key is read now: the start goes on to the next missing setting.
        assert start_as_image_user().startswith("reviewbot: gitea.token: not configured")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _python_for(uid: int) -> tuple[str, dict[str, str]]:
    """An interpreter with which ``uid`` imports reviewbot, and the variables it needs:
    this one, or the system's Python of the same version reading this environment's
    packages (this one may live where that user cannot go). Skips when there is none."""
    check = "import reviewbot, sys; print(sys.version_info[:2])"
    wanted = str(tuple(sys.version_info[:2]))
    folders = [
        str(ROOT / "src"),
        sysconfig.get_paths()["purelib"],
        sysconfig.get_paths()["platlib"],
    ]
    for python, extra in (
        (sys.executable, {}),
        ("/usr/bin/python3", {"PYTHONPATH": os.pathsep.join(dict.fromkeys(folders))}),
    ):
        try:
            done = subprocess.run(
                [python, "-c", check], env=clean_env(extra), cwd="/", capture_output=True,
                text=True, timeout=60, check=False, user=uid, group=uid, extra_groups=[],
            )  # fmt: skip
        except OSError:
            continue
        if done.returncode == 0 and done.stdout.strip() == wanted:
            return python, extra
    pytest.skip(f"no Python {wanted} that uid {uid} can run and that imports reviewbot")


def _pem() -> bytes:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


# --- the real-forge path ----------------------------------------------------------------------


def _example_with(tmp_path: Path, **uncomment: str) -> Path:
    text = (DEPLOY / "reviewbot.example.toml").read_text()
    for key, value in uncomment.items():
        text, n = re.subn(rf"^# {key} = .*$", f"{key} = {value}", text, flags=re.M)
        assert n == 1, f"the example lost its commented {key}"
    path = tmp_path / "reviewbot.toml"
    path.write_text(text)
    return path


def test_example_with_an_app_key_nobody_mounted_fails_with_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "github-app.pem"
    config = _example_with(tmp_path, app_id="123456", private_key_path=f'"{missing}"')
    env = {"REVIEWBOT_CONFIG": str(config), "REVIEWBOT_DATA_DIR": str(tmp_path / "data")}
    done = run_reviewbot("serve", "--port", "0", cwd=tmp_path, env=env)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"reviewbot: github.private_key_path: cannot read {missing}: No such file or directory "
        "(point REVIEWBOT_GITHUB__PRIVATE_KEY_PATH at the App's private key file, or mount it "
        "there)"
    ]


def test_example_without_the_gitea_token_fails_with_one_line(tmp_path: Path) -> None:
    env = {
        "REVIEWBOT_CONFIG": str(DEPLOY / "reviewbot.example.toml"),
        "REVIEWBOT_DATA_DIR": str(tmp_path / "data"),
        "REVIEWBOT_HOST": "127.0.0.1",
        "REVIEWBOT_PORT": "0",
    }
    done = run_reviewbot("serve", cwd=tmp_path, env=env)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1].startswith(
        "reviewbot: gitea.token: not configured (set REVIEWBOT_GITEA__TOKEN"
    )


# --- Dockerfile -------------------------------------------------------------------------------


def test_dockerfile_command_port_and_health_check() -> None:
    found = dockerfile()
    env = _docker_env()
    assert found["EXPOSE"] == [env["REVIEWBOT_PORT"]] == [str(DEFAULT_PORT)]
    cmd = json.loads(found["ENTRYPOINT"][0]) + json.loads(found["CMD"][0])
    assert cmd[0] == "reviewbot"
    parses_as_a_command(cmd[1:])
    check = found["HEALTHCHECK"][0]
    assert "/healthz" in check and "os.environ.get('REVIEWBOT_PORT'" in check
    assert re.findall(r"\d{4,5}", check.split("CMD", 1)[1]) == [str(DEFAULT_PORT)]  # fallback


def test_dockerfile_runs_as_non_root_with_a_data_volume() -> None:
    found = dockerfile()
    user = found["USER"][-1].split(":")[0]
    assert user not in ("root", "0") and user.isidentifier()
    # A name the image creates itself, with a uid that is not 0.
    created = [r for r in found["RUN"] if re.search(rf"useradd\b.*\b{user}\b", r)]
    assert created, f"the Dockerfile never creates the user {user!r}"
    uid = re.search(r"--uid\s+(\d+)", created[0])
    assert uid is not None and int(uid.group(1)) != 0
    assert found["VOLUME"] == ['["/data"]'] and _docker_env()["REVIEWBOT_DATA_DIR"] == "/data"
    for src in found["COPY"]:
        for part in src.split()[:-1]:
            assert (ROOT / part).exists(), f"Dockerfile copies missing {part}"


def _apt_installs(found: dict[str, list[str]]) -> set[str]:
    """The packages the image's RUN lines install with apt-get (or apt)."""
    packages: set[str] = set()
    for run in found.get("RUN", []):
        for command in re.split(r"&&|;|\|\|", run):
            words = shlex.split(command)
            if words[:1] in (["apt-get"], ["apt"]) and "install" in words:
                rest = words[words.index("install") + 1 :]
                packages |= {w for w in rest if not w.startswith("-")}
    return packages


def test_dockerfile_installs_bubblewrap_for_the_reviewer_sandbox() -> None:
    """Without it configured reviewers never run in the image (sandbox_unavailable)."""
    assert "bubblewrap" in _apt_installs(dockerfile())


def test_health_route_exists() -> None:
    from reviewbot.server.app import create_app
    from reviewbot.service import build_service

    app = create_app(build_service(Settings(), forges={}))
    routes = {(r.method, r.resource.canonical) for r in app.router.routes() if r.resource}
    assert ("GET", "/healthz") in routes


# --- systemd ----------------------------------------------------------------------------------


def test_systemd_unit_needs_no_user_and_owns_its_state_directory() -> None:
    assert unit_values("DynamicUser") == ["yes"]
    assert unit_values("User") == [] and unit_values("Group") == []
    state = unit_values("StateDirectory")
    assert state == ["reviewbot"]
    assert unit_environment()["REVIEWBOT_DATA_DIR"] == f"/var/lib/{state[0]}"
    assert unit_environment()["REVIEWBOT_PORT"] == str(DEFAULT_PORT)


def test_systemd_unit_runs_a_real_command_and_stops_on_configuration_errors() -> None:
    (exec_start,) = unit_values("ExecStart")
    program, *argv = shlex.split(exec_start)
    assert program.endswith("/bin/reviewbot")
    parses_as_a_command(argv)
    assert unit_values("RestartPreventExitStatus") == ["2"]


def test_systemd_unit_is_hardened() -> None:
    for key, value in (
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("CapabilityBoundingSet", ""),
    ):
        assert unit_values(key) == [value], key


def test_systemd_unit_tells_how_to_read_its_data() -> None:
    text = (DEPLOY / "reviewbot.service").read_text()
    data_dir = unit_environment()["REVIEWBOT_DATA_DIR"]
    assert f"REVIEWBOT_DATA_DIR={data_dir}" in text and "reviewbot explain" in text


def test_systemd_analyze_verify(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed on this machine")
    reviewbot = Path(sys.executable).with_name("reviewbot")
    if not reviewbot.exists():
        pytest.skip(f"no reviewbot entry point next to {sys.executable}")
    # The unit as shipped, with ExecStart pointing at this machine's reviewbot.
    text = (DEPLOY / "reviewbot.service").read_text()
    copy = tmp_path / "reviewbot.service"
    copy.write_text(text.replace("/opt/reviewbot/venv/bin/reviewbot", str(reviewbot)))
    done = subprocess.run(
        [analyze, "verify", "--man=no", str(copy)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    problems = [line for line in done.stderr.splitlines() if str(copy) in line]
    assert done.returncode == 0 and not problems, done.stderr


def test_postgres_service_is_opt_in_and_keeps_its_data() -> None:
    data = compose()
    svc = data["services"]["postgres"]
    assert svc["profiles"] == ["postgres"]  # the default `up` never starts it
    assert "POSTGRES_PASSWORD" not in svc["environment"]  # a secret: from postgres.env only
    assert svc["healthcheck"]["test"][:2] == ["CMD", "pg_isready"]
    (volume,) = svc["volumes"]
    name, target = volume.split(":")
    assert name in data["volumes"] and target == "/var/lib/postgresql/data"
    # The URL the comment tells operators to set names this service and its database.
    user, db = svc["environment"]["POSTGRES_USER"], svc["environment"]["POSTGRES_DB"]
    assert (
        f"postgresql://{user}:THE_PASSWORD@postgres/{db}" in (DEPLOY / "compose.yaml").read_text()
    )
