"""The workflow folder: ``db/db.sqlite``, ``db/migrations/`` (with ``.backups/``), ``runs/``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class WorkflowPaths:
    data_dir: Path

    @property
    def db_dir(self) -> Path:
        return self.data_dir / "db"

    @property
    def db_file(self) -> Path:
        return self.db_dir / "db.sqlite"

    @property
    def migrations_dir(self) -> Path:
        return self.db_dir / "migrations"

    @property
    def backups_dir(self) -> Path:
        return self.migrations_dir / ".backups"

    @property
    def runs_dir(self) -> Path:
        return self.data_dir / "runs"

    def ensure(self) -> WorkflowPaths:
        """Create the folders (idempotent): a writable folder that is missing is made."""
        for folder in (self.db_dir, self.migrations_dir, self.runs_dir):
            folder.mkdir(parents=True, exist_ok=True)
        return self
