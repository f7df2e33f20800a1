"""The table of forge kinds for the adapters: one row per forge.

A row says how to read the forge's section of :class:`~reviewbot.config.Settings`, where
that section points (for messages), and how to build the adapter from it. Every place that
depends on the forge's settings or adapter reads its row; a name without a row is a
:class:`~reviewbot.config.ConfigError` naming the known forges. The names are those of
:data:`reviewbot.core.models.FORGES` (a test holds the two to each other).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import httpx
from pydantic import SecretStr

from reviewbot.config import ConfigError, Settings, read_private_key
from reviewbot.core.clock import Clock
from reviewbot.forges.app_auth import GitHubAppAuth
from reviewbot.forges.base import Forge
from reviewbot.forges.gitea import GiteaForge
from reviewbot.forges.github import GitHubForge
from reviewbot.forges.http import ForgeWatcher, OnWait, RetryPolicy, Sleep


class ForgeSection(Protocol):
    """What every forge's settings section has (``GitHubSettings``, ``GiteaSettings``)."""

    @property
    def token(self) -> SecretStr | None: ...

    @property
    def webhook_secret(self) -> SecretStr | None: ...

    @property
    def configured(self) -> bool: ...


@dataclass(frozen=True)
class AdapterOptions:
    """How an adapter talks HTTP: the same for every forge."""

    policy: RetryPolicy
    client: httpx.AsyncClient | None = None
    sleep: Sleep = asyncio.sleep
    clock: Clock = field(default=time.time)
    on_wait: OnWait | None = None
    watch: ForgeWatcher | None = None


@dataclass(frozen=True)
class AdapterKind:
    """What the adapters need of one forge."""

    name: str
    section: Callable[[Settings], ForgeSection]
    # The address a person would check when the forge does not answer.
    address: Callable[[Settings], str]
    # The adapter, or a one-line ConfigError naming the setting that is missing.
    build: Callable[[Settings, AdapterOptions], Forge]


def _github(settings: Settings, o: AdapterOptions) -> Forge:
    gh = settings.github
    if gh.app_id is not None and gh.private_key_path is not None:
        key = read_private_key(gh.private_key_path)
        return GitHubForge(
            api_url=gh.api_url,
            app_auth=GitHubAppAuth(gh.app_id, key, clock=o.clock),
            bot_login=gh.bot_login,
            graphql=gh.graphql,
            client=o.client,
            policy=o.policy,
            sleep=o.sleep,
            clock=o.clock,
            on_wait=o.on_wait,
            watch=o.watch,
        )
    if gh.token is not None:
        return GitHubForge(
            api_url=gh.api_url,
            token=gh.token.get_secret_value(),
            bot_login=gh.bot_login,
            graphql=gh.graphql,
            client=o.client,
            policy=o.policy,
            sleep=o.sleep,
            clock=o.clock,
            on_wait=o.on_wait,
            watch=o.watch,
        )
    raise ConfigError(
        "github: not configured (set REVIEWBOT_GITHUB__TOKEN, or REVIEWBOT_GITHUB__APP_ID "
        "and REVIEWBOT_GITHUB__PRIVATE_KEY_PATH)"
    )


def _gitea(settings: Settings, o: AdapterOptions) -> Forge:
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
        client=o.client,
        policy=o.policy,
        sleep=o.sleep,
        clock=o.clock,
        on_wait=o.on_wait,
        watch=o.watch,
        git_root=settings.git_dir,
    )


FORGE_ADAPTERS: dict[str, AdapterKind] = {
    "github": AdapterKind(
        name="github",
        section=lambda settings: settings.github,
        address=lambda settings: settings.github.api_url,
        build=_github,
    ),
    "gitea": AdapterKind(
        name="gitea",
        section=lambda settings: settings.gitea,
        address=lambda settings: str(settings.gitea.url),
        build=_gitea,
    ),
}


def adapter_kind(name: str) -> AdapterKind:
    """The row of ``name``; a :class:`ConfigError` naming the known forges when it has none."""
    kind = FORGE_ADAPTERS.get(name)
    if kind is None:
        raise ConfigError(
            f"unknown forge {name!r}: expected one of {', '.join(FORGE_ADAPTERS)}",
            code="unknown_forge",
        )
    return kind
