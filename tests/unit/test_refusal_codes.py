"""Every code a refusal can carry is in docs/reason-codes.md: the table of HTTP statuses and
every ``code`` the package's errors and refusals name."""

from __future__ import annotations

import re

from reviewbot.server.errors import STATUS
from tests.conftest import REPO_ROOT

SOURCE = REPO_ROOT / "src" / "reviewbot"
# ``code="..."`` of a raised refusal, ``code = "..."`` of an error class.
CODE = re.compile(r'\bcode ?= ?"([a-z_]+)"')


def named_codes() -> set[str]:
    codes = set(STATUS)
    for path in SOURCE.rglob("*.py"):
        if path.is_relative_to(SOURCE / "sim"):  # the simulator answers as the forges do
            continue
        codes.update(CODE.findall(path.read_text("utf-8")))
    return codes


def test_every_refusal_code_is_documented() -> None:
    text = (REPO_ROOT / "docs" / "reason-codes.md").read_text("utf-8")
    codes = named_codes()
    assert {"wrong_role", "unauthorized", "csrf_failed", "body_timeout"} <= codes
    assert sorted(c for c in codes if f"`{c}`" not in text) == []
