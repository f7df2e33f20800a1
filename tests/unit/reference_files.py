"""Listing reference example files at collection time, for parametrized tests.

The tests themselves read the files through the ``reference_dir`` fixture; this only lists
them, from the same place (``REVIEWBOT_REFERENCE_DIR`` or the folder beside the checkout).
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.conftest import REFERENCE_DIR


def example_files(folder: str, pattern: str) -> list[str]:
    """Paths under ``folder`` of the reference material matching ``pattern``, sorted."""
    override = os.environ.get("REVIEWBOT_REFERENCE_DIR")
    root = (Path(override) if override else REFERENCE_DIR) / folder
    return sorted(str(p.relative_to(root)) for p in root.glob(pattern))
