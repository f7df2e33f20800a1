"""Deployment files reference real commands, settings, paths and ports, so they cannot rot."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from reviewbot.cli import build_parser
from reviewbot.config import ENV_PREFIX, Settings

from .test_docs_configuration import SETTING_VARS

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
FILES = sorted(p for p in DEPLOY.iterdir() if p.is_file())
# Variables that are not settings but are read by reviewbot itself.
OTHER_VARS = {f"{ENV_PREFIX}CONFIG"}


def _subcommands() -> set[str]:
    parser = build_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    return set(action.choices)  # type: ignore[arg-type]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_environment_variables_are_real_settings(path: Path) -> None:
    used = set(re.findall(r"\b(REVIEWBOT_[A-Z0-9_]+)", path.read_text()))
    unknown = used - set(SETTING_VARS) - OTHER_VARS
    assert not unknown, f"{path.name} sets variables reviewbot does not read: {sorted(unknown)}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_reviewbot_commands_exist(path: Path) -> None:
    text = path.read_text()
    commands = set(re.findall(r"bin/reviewbot (\w+)", text))
    if path.name == "Dockerfile":
        commands |= set(re.findall(r'^CMD \["(\w+)"', text, re.M))
    assert commands <= _subcommands(), f"{path.name}: unknown commands {commands - _subcommands()}"


def test_port_and_health_path_agree_with_the_server() -> None:
    default_port = Settings.model_fields["port"].default
    for name in ("Dockerfile", "compose.yaml", "reviewbot.service", "reviewbot.example.toml"):
        text = (DEPLOY / name).read_text()
        ports = set(re.findall(r"(?:PORT[=:]\s*\"?|EXPOSE |port = |\"|:)(\d{4,5})\b", text))
        assert ports == {str(default_port)}, f"{name}: ports {ports}"
    for name in ("Dockerfile", "compose.yaml"):
        assert "/healthz" in (DEPLOY / name).read_text()


def test_health_route_exists() -> None:
    from reviewbot.server.app import create_app
    from reviewbot.service import build_service

    app = create_app(build_service(Settings(), forges={}))
    routes = {(r.method, r.resource.canonical) for r in app.router.routes() if r.resource}
    assert ("GET", "/healthz") in routes


def test_dockerfile_runs_as_non_root_with_a_data_volume() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    user = re.findall(r"^USER (\S+)", text, re.M)
    assert user and user[-1] not in ("root", "0")
    assert 'VOLUME ["/data"]' in text and "REVIEWBOT_DATA_DIR=/data" in text
    assert "HEALTHCHECK" in text
    for src in re.findall(r"^COPY (.+) \S+$", text, re.M):
        for part in src.split():
            assert (ROOT / part).exists(), f"Dockerfile copies missing {part}"


def test_compose_points_at_real_files() -> None:
    text = (DEPLOY / "compose.yaml").read_text()
    assert "dockerfile: deploy/Dockerfile" in text
    assert "./reviewbot.example.toml:" in text and (DEPLOY / "reviewbot.example.toml").exists()


def test_systemd_unit_is_hardened() -> None:
    text = (DEPLOY / "reviewbot.service").read_text()
    for option in (
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "ProtectHome=yes",
        "PrivateTmp=yes",
        "CapabilityBoundingSet=",
        "ReadWritePaths=/var/lib/reviewbot",
    ):
        assert option in text
    assert re.search(r"^User=(?!root)\w+", text, re.M)


def test_example_config_is_loadable() -> None:
    Settings.model_validate(tomllib.loads((DEPLOY / "reviewbot.example.toml").read_text()))
