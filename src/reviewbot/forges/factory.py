"""Build the :class:`Forge` of a configured forge from :class:`~reviewbot.config.Settings`."""

from __future__ import annotations

import asyncio
import time

import httpx

from reviewbot.config import Settings
from reviewbot.core.clock import Clock
from reviewbot.forges.base import Forge
from reviewbot.forges.http import ForgeWatcher, OnWait, RetryPolicy, Sleep
from reviewbot.forges.kinds import AdapterOptions, adapter_kind


def make_forge(
    settings: Settings,
    forge_name: str,
    *,
    client: httpx.AsyncClient | None = None,
    policy: RetryPolicy | None = None,
    sleep: Sleep = asyncio.sleep,
    clock: Clock = time.time,
    on_wait: OnWait | None = None,
    watch: ForgeWatcher | None = None,
) -> Forge:
    """The adapter for ``forge_name`` (a row of the adapter table: ``github``, ``gitea``);
    ``watch`` hears of every HTTP exchange (the service's metrics and logs).

    Raises :class:`~reviewbot.config.ConfigError` (one line naming the setting) when the
    forge is unknown, not configured, or its credentials cannot be read. ``on_wait`` hears
    every retry wait.
    """
    kind = adapter_kind(forge_name)
    options = AdapterOptions(
        policy=policy or RetryPolicy(timeout_s=settings.forge_timeout_s),
        client=client,
        sleep=sleep,
        clock=clock,
        on_wait=on_wait,
        watch=watch,
    )
    return kind.build(settings, options)
