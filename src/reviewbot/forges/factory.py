"""Build the :class:`Forge` of a configured forge from :class:`~reviewbot.config.Settings`."""

from __future__ import annotations

import asyncio
import time

import httpx

from reviewbot.config import ConfigError, Settings, read_private_key
from reviewbot.core.clock import Clock
from reviewbot.forges.app_auth import GitHubAppAuth
from reviewbot.forges.base import Forge
from reviewbot.forges.gitea import GiteaForge
from reviewbot.forges.github import GitHubForge
from reviewbot.forges.http import OnWait, RetryPolicy, Sleep


def make_forge(
    settings: Settings,
    forge_name: str,
    *,
    client: httpx.AsyncClient | None = None,
    policy: RetryPolicy | None = None,
    sleep: Sleep = asyncio.sleep,
    clock: Clock = time.time,
    on_wait: OnWait | None = None,
) -> Forge:
    """The adapter for ``forge_name`` (``github`` or ``gitea``).

    Raises :class:`ConfigError` (one line naming the setting) when the forge is not
    configured or its credentials cannot be read. ``on_wait`` hears every retry wait.
    """
    if forge_name == "github":
        gh = settings.github
        if gh.app_id is not None and gh.private_key_path is not None:
            key = read_private_key(gh.private_key_path)
            return GitHubForge(
                api_url=gh.api_url,
                app_auth=GitHubAppAuth(gh.app_id, key, clock=clock),
                bot_login=gh.bot_login,
                client=client,
                policy=policy,
                sleep=sleep,
                clock=clock,
                on_wait=on_wait,
            )
        if gh.token is not None:
            return GitHubForge(
                api_url=gh.api_url,
                token=gh.token.get_secret_value(),
                bot_login=gh.bot_login,
                client=client,
                policy=policy,
                sleep=sleep,
                clock=clock,
                on_wait=on_wait,
            )
        raise ConfigError(
            "github: not configured (set REVIEWBOT_GITHUB__TOKEN, or REVIEWBOT_GITHUB__APP_ID "
            "and REVIEWBOT_GITHUB__PRIVATE_KEY_PATH)"
        )
    if forge_name == "gitea":
        gt = settings.gitea
        if gt.url is None:
            raise ConfigError(
                "gitea.url: not configured (set REVIEWBOT_GITEA__URL to the instance's base URL)"
            )
        if gt.token is None:
            raise ConfigError(
                "gitea.token: not configured (set REVIEWBOT_GITEA__TOKEN to an access token "
                "of the bot's account)"
            )
        return GiteaForge(
            url=gt.url,
            token=gt.token.get_secret_value(),
            bot_login=gt.bot_login,
            client=client,
            policy=policy,
            sleep=sleep,
            clock=clock,
            on_wait=on_wait,
        )
    raise ConfigError(f"unknown forge {forge_name!r}: expected github or gitea")
