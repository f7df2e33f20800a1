"""Listing reference example files at collection time, for parametrized tests.

The tests themselves read the files through the ``reference_dir`` fixture; this only lists
them, from the same place (``tests/fixtures``). An empty listing fails collection
(``empty_parameter_set_mark`` in pyproject.toml) rather than skipping the test.
"""

from __future__ import annotations

from tests.conftest import REFERENCE_DIR


def example_files(folder: str, pattern: str) -> list[str]:
    """Paths under ``folder`` of the reference material matching ``pattern``, sorted."""
    root = REFERENCE_DIR / folder
    return sorted(str(p.relative_to(root)) for p in root.glob(pattern))
