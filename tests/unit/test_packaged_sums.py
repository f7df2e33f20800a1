"""The shipped checksum manifest matches the packaged migrations it describes."""

from __future__ import annotations

import pytest

from reviewbot.workflowdb.packaged_sums import DIALECTS, compute_sums, packaged_sums, render


@pytest.mark.parametrize("dialect", DIALECTS)
def test_the_manifest_describes_every_packaged_migration_as_it_is(dialect: str) -> None:
    shipped = packaged_sums(dialect)
    now = compute_sums(dialect)
    assert render(shipped) == render(now), (
        "store/migrations checksums.json is stale: run "
        "`python -m reviewbot.workflowdb.packaged_sums` and commit the result"
    )
