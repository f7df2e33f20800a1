"""Where the checkout is, for tests at any depth that read its files (docs, README, src)."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SRC = REPO_ROOT / "src"
