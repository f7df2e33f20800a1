"""Every process the program builds gives its review runs their tools socket.

The composition root cannot open the socket itself (it lives in the server, above it), so
each entry point passes ``tools_endpoint`` to ``build_service``. One that forgot would run
reviewers that cannot reach their session tools, and the same pull request would pass or
fail by which process claimed its review: this test reads every call in the program.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "reviewbot"


def build_service_calls() -> list[tuple[str, int, set[str]]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
                if name == "build_service":
                    where = str(path.relative_to(PACKAGE))
                    found.append((where, node.lineno, {k.arg for k in node.keywords if k.arg}))
    return found


def test_every_build_service_call_passes_the_tools_endpoint() -> None:
    calls = build_service_calls()
    assert {where for where, _, _ in calls} >= {
        "cli/serve.py",
        "cli/review.py",
        "server/mcp_stdio.py",
    }
    missing = [f"{where}:{line}" for where, line, keys in calls if "tools_endpoint" not in keys]
    assert missing == []
