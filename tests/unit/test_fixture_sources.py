"""Every fixture copied from another project says where it comes from and under what licence."""

from __future__ import annotations

from tests.conftest import REFERENCE_DIR

SOURCES = REFERENCE_DIR / "SOURCES.md"
# Covered by a section for the whole folder rather than a row per file.
FOLDER_SECTIONS = ("github/webhook-schemas/",)


def _fixture_files() -> list[str]:
    return sorted(
        str(p.relative_to(REFERENCE_DIR))
        for p in REFERENCE_DIR.rglob("*")
        if p.is_file() and p != SOURCES and p.parent.name != "LICENSES"
    )


def test_every_fixture_file_is_named_in_sources() -> None:
    text = SOURCES.read_text("utf-8")
    unnamed = [
        rel
        for rel in _fixture_files()
        if f"`{rel}`" not in text and not rel.startswith(FOLDER_SECTIONS)
    ]
    assert unnamed == []
    for folder in FOLDER_SECTIONS:
        assert f"`{folder}**`" in text


def test_every_licence_file_is_linked_from_sources() -> None:
    text = SOURCES.read_text("utf-8")
    licences = sorted(p.name for p in (REFERENCE_DIR / "LICENSES").iterdir())
    assert licences
    for name in licences:
        assert f"(LICENSES/{name})" in text, f"{name} is not linked from SOURCES.md"
