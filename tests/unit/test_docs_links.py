"""Every relative link in the README and docs/ points at a file that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_resolve(page: Path) -> None:
    targets = [t for t in LINK.findall(page.read_text()) if "://" not in t]
    missing = [t for t in targets if not (page.parent / t).exists()]
    assert not missing, f"{page.name} links to missing {missing}"


def test_readme_links_every_docs_page() -> None:
    readme = (ROOT / "README.md").read_text()
    unlinked = [p.name for p in PAGES[1:] if f"docs/{p.name}" not in readme]
    assert not unlinked, f"README does not link {unlinked}"


def test_the_readme_documentation_table_lists_each_page_once() -> None:
    rows = [
        line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("| [")
    ]
    pages = [m[1] for line in rows if (m := re.match(r"\| \[[^\]]+\]\(([^)]+)\)", line))]
    assert pages, "the README has no documentation table"
    twice = sorted({p for p in pages if pages.count(p) > 1})
    assert not twice, f"listed more than once: {twice}"
