"""``reviewbot db``: placeholder until the workflow DB commands land."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser("db", help="workflow database")
    parser.set_defaults(func=lambda args: 0)
