"""Every real payload in the fixture folders goes through its endpoint, signed, and
ends in a recorded decision. Parametrized over the folders: a new example file is tested
automatically."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.integration.server_support import running_server, sim_world

FOLDERS = [
    "github/webhooks",
    "gitea/webhooks/gitea",
    "gitea/webhooks/forgejo",
    "gitea/webhooks/legacy-go-scm-2018",
]


def gitea_event_types(reference_dir: Path) -> dict[str, dict[str, Any]]:
    index = json.loads((reference_dir / "gitea/webhooks/index.json").read_text())
    return {entry["file"]: entry for entry in index["examples"]}


@pytest.mark.parametrize("folder", FOLDERS)
async def test_every_reference_payload_ends_in_a_recorded_decision(
    reference_dir: Path, tmp_path: Path, folder: str
) -> None:
    root = reference_dir / folder
    files = sorted(p for p in root.rglob("*.json") if p.name != "index.json")
    assert files, f"no payloads under {root}"
    forge = folder.split("/")[0]
    gitea_index = gitea_event_types(reference_dir) if forge == "gitea" else {}
    async with sim_world(tmp_path / "data") as world, running_server(world.settings) as server:
        sent: dict[str, str] = {}
        for n, path in enumerate(files):
            body = path.read_bytes()
            delivery_id = f"ref-{n}"
            if forge == "github":
                status, answer = await server.github(
                    path.parent.name, body, delivery_id=delivery_id
                )
            else:
                rel = str(path.relative_to(reference_dir / "gitea/webhooks"))
                entry = gitea_index[rel]
                status, answer = await server.gitea(
                    entry["x_gitea_event_type"],
                    body,
                    delivery_id=delivery_id,
                    forgejo=folder.endswith("forgejo"),
                    extra={"X-Gitea-Event": entry["x_gitea_event"]},
                )
            assert status in (200, 202), f"{path.name}: {status} {answer}"
            sent[delivery_id] = str(path.relative_to(reference_dir))
        for delivery_id, name in sent.items():
            rows = await server.decisions_of(delivery_id)
            assert rows, f"{name}: no decision recorded"
            for row in rows:
                assert row.reason_code != "internal_error", f"{name}: {row.detail}"
                assert row.decision in ("eligible", "skip", "error"), name
