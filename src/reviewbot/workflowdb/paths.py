"""The workflow folder: ``db/db.sqlite``, ``db/migrations/`` (with ``.backups/``), ``runs/``,
and ``git/`` (the forges' git clones, made on use and safe to delete)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from reviewbot.config import GIT_FOLDER

if TYPE_CHECKING:
    from reviewbot.config import Settings


@dataclass(frozen=True)
class WorkflowPaths:
    data_dir: Path
    # ``REVIEWBOT_DATABASE_URL=sqlite:///PATH`` puts the database file elsewhere; migrations
    # and their backups stay in the workflow folder.
    database_file: Path | None = None
    # ``REVIEWBOT_DATABASE_URL=postgresql://...``: the store is that server database; the
    # workflow folder still holds the migrations folder, backups and runs.
    database_url: str | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> WorkflowPaths:
        if settings.postgres_url is not None:
            return cls(settings.data_dir, None, settings.postgres_url)
        return cls(settings.data_dir, settings.database_path)

    @property
    def db_dir(self) -> Path:
        return self.data_dir / "db"

    @property
    def db_file(self) -> Path:
        return self.database_file or self.db_dir / "db.sqlite"

    @property
    def migrations_dir(self) -> Path:
        return self.db_dir / "migrations"

    @property
    def backups_dir(self) -> Path:
        return self.migrations_dir / ".backups"

    @property
    def runs_dir(self) -> Path:
        return self.data_dir / "runs"

    @property
    def git_dir(self) -> Path:
        """Bare clones for ref operations git does where the forge cannot (merge commits on
        Gitea); recreated on next use when deleted."""
        return self.data_dir / GIT_FOLDER

    def ensure(self) -> WorkflowPaths:
        """Create the folders (idempotent): a writable folder that is missing is made."""
        for folder in (self.db_dir, self.migrations_dir, self.runs_dir):
            folder.mkdir(parents=True, exist_ok=True)
        return self
