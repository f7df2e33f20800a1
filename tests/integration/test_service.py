"""The composition root on a real store: a start that fails half-way leaves nothing held."""

from __future__ import annotations

from pathlib import Path

import pytest

from reviewbot.config import ConfigError, GitHubSettings
from reviewbot.service import Role, build_service
from tests.integration.server_support import make_settings


async def test_a_start_that_fails_after_the_store_opened_releases_what_it_took(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    # The GitHub App's key is missing: the forges fail after the store opened and the
    # workers' lock was taken.
    broken = make_settings(
        data,
        github=GitHubSettings(app_id=1, private_key_path=tmp_path / "missing.pem"),
    )
    service = build_service(broken, role=Role.ALL)
    with pytest.raises(ConfigError, match=r"missing\.pem"):
        await service.start()

    # The next start on the same store is not told another process gates it.
    async with build_service(make_settings(data), role=Role.ALL, forges={}) as again:
        assert again.pool is not None and again.workers_lock is not None
