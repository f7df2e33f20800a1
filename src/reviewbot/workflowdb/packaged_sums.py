"""The bot's own migrations' checksums, shipped beside them in ``checksums.json``.

Every start-up and every CLI command opens the store, and the store is almost always up to
date. Recognising that from the ledger needs each file's statement hash, which needs the
SQL parsed (a few hundred milliseconds per process). The manifest holds, per packaged
file, the hash of its bytes and of its statements, so an up-to-date store is recognised by
name and checksum before any parsing. A file whose bytes do not match its manifest line
takes the full route (parse, compare, apply), so a stale manifest costs time, never
correctness; ``tests/unit/test_packaged_sums.py`` keeps it current.

Regenerate after adding or editing a packaged migration::

    python -m reviewbot.workflowdb.packaged_sums
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path

from reviewbot.store.database import SQLITE
from reviewbot.workflowdb.migrations import parse_migration, statements_sha256
from reviewbot.workflowdb.protected import packaged_migrations

MANIFEST = "checksums.json"
DIALECTS = (SQLITE, "postgresql")


@dataclass(frozen=True)
class PackagedSum:
    """One packaged file as the ledger will record it."""

    file_sha256: str  # of the file's bytes: ties this line to the file it was made from
    sha256: str  # of its statements (the ledger's ``sha256``)
    statements: int
    destructive: bool


def file_sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _folder(dialect: str) -> resources.abc.Traversable:
    folder = resources.files("reviewbot.store").joinpath("migrations")
    return folder if dialect == SQLITE else folder.joinpath(dialect)


@functools.cache
def packaged_sums(dialect: str = SQLITE) -> dict[str, PackagedSum]:
    """The shipped manifest for ``dialect`` (empty when it is missing or unreadable: then
    every file takes the full route)."""
    try:
        raw = json.loads(_folder(dialect).joinpath(MANIFEST).read_text("utf-8"))
        return {name: PackagedSum(**fields) for name, fields in raw.items()}
    except (OSError, ValueError, TypeError):
        return {}


def compute_sums(dialect: str = SQLITE) -> dict[str, PackagedSum]:
    """The manifest as the packaged files are now (parses every file)."""
    sums = {}
    for name, data in packaged_migrations(dialect):
        classified = parse_migration(data.decode("utf-8"), name, packaged=True)
        sums[name] = PackagedSum(
            file_sha256=file_sha256(data),
            sha256=statements_sha256([cs.statement for cs in classified]),
            statements=len(classified),
            destructive=any(cs.destructive for cs in classified),
        )
    return sums


def render(sums: dict[str, PackagedSum]) -> str:
    return json.dumps({n: asdict(s) for n, s in sorted(sums.items())}, indent=1) + "\n"


def known_sums(migrations: list[tuple[str, bytes]], dialect: str) -> dict[str, PackagedSum] | None:
    """The manifest's lines for ``migrations``, or None when any file is not in it as it
    is now (edited, new, or no manifest)."""
    sums = packaged_sums(dialect)
    found = {}
    for name, data in migrations:
        line = sums.get(name)
        if line is None or line.file_sha256 != file_sha256(data):
            return None
        found[name] = line
    return found


def main() -> None:  # pragma: no cover - a maintainer's command, checked by the unit test
    for dialect in DIALECTS:
        target = Path(str(_folder(dialect).joinpath(MANIFEST)))
        target.write_text(render(compute_sums(dialect)), "utf-8")
        print(f"wrote {target}")


if __name__ == "__main__":  # pragma: no cover
    main()
