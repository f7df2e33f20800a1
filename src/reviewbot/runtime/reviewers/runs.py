"""Run folders: ``runs/<run id>/`` in the workflow folder, one per execution of a PR head.

A run is one execution of the pipeline for a delivery and a PR head. Its folder is created
when the run starts (idempotently: a resumed or redelivered run finds it in place) and
holds ``delivery.json``, the trigger the run was started for. External reviewers run with
the folder as their working directory and read the delivery from it.

Folder grants follow one rule: a folder a step is granted is created when the grant is
built; a missing read-only folder grants nothing; a missing writable one is created.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reviewbot.core.errors import ReviewbotError
from reviewbot.ingress.crew import SOURCE as CREW_SOURCE
from reviewbot.ingress.crew import crew_call_parts
from reviewbot.ingress.envelope import FIELD_NAMES
from reviewbot.store import journal
from reviewbot.store.database import Database
from reviewbot.workflowdb.paths import WorkflowPaths

DELIVERY_FILE = "delivery.json"

# A run id names a folder: letters, digits, dot, dash and underscore, not starting with a
# dot (no ".", "..", hidden folders or path separators can be expressed).
_RUN_ID = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}$")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class RunFolderError(ReviewbotError, ValueError):
    """A run id or a grant cannot be honoured; the message says which and why."""


@dataclass(frozen=True)
class RunFolder:
    """The folder of one run."""

    run_id: str
    path: Path

    @property
    def delivery_file(self) -> Path:
        return self.path / DELIVERY_FILE

    def read_delivery(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.delivery_file.read_text(encoding="utf-8"))
        return data


@dataclass(frozen=True)
class FolderGrant:
    """A folder a step may use, and whether it may write there."""

    path: Path
    writable: bool


def check_run_id(run_id: str) -> str:
    if not _RUN_ID.match(run_id):
        raise RunFolderError(
            f"invalid run id {run_id!r}: use letters, digits, '.', '_' and '-' "
            "(at most 200, not starting with '.')"
        )
    return run_id


def run_id_for(
    *, forge: str, owner: str, name: str, number: int, head_sha: str, delivery_id: str
) -> str:
    """The id of the run for one delivery at one PR head.

    Deterministic, so a redelivered or resumed delivery finds the same folder; readable, so
    an operator can tell from ``ls runs/`` which PR a folder belongs to.
    """
    digest = hashlib.sha256(
        "\0".join((forge, owner, name, str(number), head_sha, delivery_id)).encode()
    ).hexdigest()[:12]
    readable = _UNSAFE.sub("_", f"{forge}-{owner}-{name}-{number}-{head_sha[:12]}")
    return check_run_id(f"{readable.lstrip('.')[:150]}-{digest}")


def delivery_document(
    *,
    delivery_id: str,
    source: str,
    forge: str,
    owner: str,
    name: str,
    number: int,
    head_sha: str,
    event: str | None = None,
    action: str | None = None,
    payload: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The content of ``delivery.json``: the delivery envelope a step reads.

    ``variables`` name the pull request (``forge``, ``owner``, ``repo``, ``number``,
    ``head_sha``); ``payload`` is the forge's event (or the API body) and ``headers`` the
    forge headers that were kept, when there are any. A Crew call keeps the envelope's
    shape: its ``variables`` join these (the PR's fields win) and ``payload`` is the call
    itself, so its arguments are at ``payload.args`` where the read order looks.
    """
    pr_fields = {"forge": forge, "owner": owner, "repo": name, "number": number}
    body = dict(payload or {})
    call = crew_call_parts(body) if source == CREW_SOURCE else None
    variables: dict[str, Any] = {}
    if call is not None:
        variables, body = call
        # The PR is named once, by the fields below: an alias the envelope used (repository,
        # pr, ...) would be a second naming for a reader to reconcile.
        variables = {k: v for k, v in variables.items() if k not in FIELD_NAMES}
    return {
        "delivery_id": delivery_id,
        "source": source,
        "event": event,
        "action": action,
        "variables": {**variables, **pr_fields, "head_sha": head_sha},
        "payload": body,
        "headers": dict(headers or {}),
    }


def received(db: Database, delivery_id: str | None) -> tuple[dict[str, Any], dict[str, str]]:
    """The payload and kept headers of a journalled delivery, for ``delivery.json``.

    The payload is the body as received: the forge's event for a webhook, the Crew envelope
    (which ``delivery_document`` lays out as an envelope) or the API body otherwise. A
    delivery the journal does not hold (a sweep, the command line) or a body that is not a
    JSON object gives ``{}``; the headers are the ones the journal keeps (never a signature
    or a token).
    """
    if delivery_id is None:
        return {}, {}
    stored = journal.get_delivery(db, delivery_id)
    if stored is None:
        return {}, {}
    try:
        body = json.loads(stored.body)
    except ValueError:  # UnicodeDecodeError included
        body = None
    return (body if isinstance(body, dict) else {}), dict(stored.headers)


def run_folder(paths: WorkflowPaths, run_id: str) -> RunFolder:
    """The folder of ``run_id`` (not created)."""
    return RunFolder(check_run_id(run_id), paths.runs_dir / run_id)


def start_run(paths: WorkflowPaths, run_id: str, delivery: Mapping[str, Any]) -> RunFolder:
    """Create ``runs/<run id>/`` if needed and write ``delivery.json`` into it.

    Idempotent: starting the same run again leaves one folder and one delivery file. The
    file is replaced atomically, so a reader never sees half of it.
    """
    folder = run_folder(paths, run_id)
    folder.path.mkdir(parents=True, exist_ok=True)
    _write_atomically(folder.delivery_file, json.dumps(dict(delivery), indent=2, sort_keys=True))
    return folder


def grant_folder(path: Path, *, writable: bool) -> FolderGrant | None:
    """Build a grant: a writable folder is created if missing; a missing read-only one is
    not a grant (``None``), and a path that exists but is not a folder never is."""
    if writable:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            raise RunFolderError(f"cannot grant {path}: it exists and is not a folder") from None
        return FolderGrant(path, writable=True)
    if path.is_dir():
        return FolderGrant(path, writable=False)
    return None


def grant_folders(requests: Iterable[tuple[Path, bool]]) -> list[FolderGrant]:
    """Grants for ``(path, writable)`` requests; missing read-only folders are left out."""
    grants = [grant_folder(path, writable=writable) for path, writable in requests]
    return [grant for grant in grants if grant is not None]


def _write_atomically(target: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
