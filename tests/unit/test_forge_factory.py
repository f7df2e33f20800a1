"""make_forge: the adapter a configuration names, or a one-line ConfigError."""

from __future__ import annotations

from pathlib import Path

import pytest

from reviewbot.config import ConfigError, Settings
from reviewbot.forges.factory import make_forge
from reviewbot.forges.gitea import GiteaForge
from reviewbot.forges.github import GitHubForge

from .test_config import pem_key


async def test_github_token() -> None:
    forge = make_forge(Settings(github={"token": "t", "bot_login": "bot"}), "github")
    assert isinstance(forge, GitHubForge) and forge.name == "github"
    assert await forge.bot_login() == "bot"
    await forge.aclose()


async def test_github_app_reads_the_key_file(tmp_path: Path) -> None:
    key = tmp_path / "app.pem"
    key.write_bytes(pem_key())
    forge = make_forge(Settings(github={"app_id": 7, "private_key_path": key}), "github")
    assert isinstance(forge, GitHubForge)
    await forge.aclose()


def test_github_app_key_missing(tmp_path: Path) -> None:
    settings = Settings(github={"app_id": 7, "private_key_path": tmp_path / "nope.pem"})
    with pytest.raises(ConfigError, match=r"github\.private_key_path: cannot read"):
        make_forge(settings, "github")


def test_github_app_key_that_is_not_pem(tmp_path: Path) -> None:
    key = tmp_path / "app.pem"
    key.write_text("not a key")
    settings = Settings(github={"app_id": 7, "private_key_path": key})
    with pytest.raises(ConfigError, match=r"is not a PEM private key"):
        make_forge(settings, "github")


def test_gitea_without_token_names_the_variable() -> None:
    settings = Settings(gitea={"url": "https://gitea.example.com"})
    with pytest.raises(ConfigError, match=r"gitea\.token: not configured \(set REVIEWBOT_GITEA__"):
        make_forge(settings, "gitea")


def test_github_not_configured() -> None:
    with pytest.raises(ConfigError, match="github: not configured"):
        make_forge(Settings(), "github")


async def test_gitea() -> None:
    forge = make_forge(Settings(gitea={"url": "https://git.example", "token": "t"}), "gitea")
    assert isinstance(forge, GiteaForge) and forge.name == "gitea"
    await forge.aclose()


@pytest.mark.parametrize(
    ("gitea", "message"),
    [({}, r"gitea\.url"), ({"url": "https://git.example"}, r"gitea\.token")],
)
def test_gitea_not_configured(gitea: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make_forge(Settings(gitea=gitea), "gitea")


def test_unknown_forge() -> None:
    with pytest.raises(ConfigError, match="unknown forge 'gitlab'"):
        make_forge(Settings(), "gitlab")
