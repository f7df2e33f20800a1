"""GitHub's official webhook payload schemas (octokit/webhooks, JSON Schema draft 7)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7

from tests.support.openapi import FORMATS


@cache
def _registry(folder: str) -> Registry[Any]:
    resources = []
    for path in Path(folder).rglob("*.schema.json"):
        contents = json.loads(path.read_text())
        resources.append((contents["$id"], Resource.from_contents(contents, DRAFT7)))
    return Registry().with_resources(resources)


def github_payload_problems(reference_dir: Path, event: str, payload: dict[str, Any]) -> list[str]:
    """Problems of ``payload`` against the schema of ``event`` and its ``action``."""
    folder = reference_dir / "github" / "webhook-schemas"
    name = payload.get("action") or "event"
    registry = _registry(str(folder))
    path = folder / event / f"{name}.schema.json"
    schema_id = json.loads(path.read_text())["$id"]
    validator = jsonschema.Draft7Validator(
        {"$ref": schema_id}, registry=registry, format_checker=FORMATS
    )
    return [
        f"{'/'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message[:300]}"
        for e in sorted(validator.iter_errors(payload), key=lambda e: list(e.absolute_path))[:15]
    ]
