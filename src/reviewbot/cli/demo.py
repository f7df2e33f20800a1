"""``reviewbot demo``: see the bot work in one command, with nothing to configure.

It starts a forge simulator (GitHub and Gitea APIs) and the real bot on free loopback
ports, with a throw-away data dir (kept afterwards, or ``--data-dir``), then plays a
scripted story through real signed webhooks, printing each step as it happens: a pull
request with pending checks, checks turning green (approval at the head), a new commit
(the old approval no longer counts), a failing check (changes requested), a Gitea pull
request merged at its pinned head through the merger lease, a forged delivery refused,
and a redelivered webhook ignored. Every step is checked; the exit code is 0 only if
every step did what it said. It ends with a summary table and the ``reviewbot explain``
commands to dig into any pull request.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from pathlib import Path
from typing import Any

from reviewbot.cli import CommandError


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "demo",
        help="see the bot review and merge against a simulated forge (start here)",
        description=__doc__,
        epilog="Examples:\n  reviewbot demo\n  reviewbot demo --data-dir ./demo-data --json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        metavar="DIR",
        help="an empty (or new) directory for the bot's store (default: a new temp dir)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the report as JSON on stdout (the steps still show on stderr)",
    )
    # For tests and the curious: break something on purpose and watch a step fail.
    parser.add_argument("--inject-fault", metavar="FAULT", help=argparse.SUPPRESS)
    parser.set_defaults(func=run)


LOG_NAME = "reviewbot.log"


def run(args: argparse.Namespace) -> int:
    # Start-up cost: the demo (a simulator and a whole server) loads only when it runs.
    from reviewbot.demo import FAULTS, DataDirInUse, fresh_data_dir, run_demo

    if args.inject_fault is not None and args.inject_fault not in FAULTS:
        raise CommandError(f"unknown fault {args.inject_fault!r}; known: {', '.join(FAULTS)}")
    try:
        data_dir = fresh_data_dir(args.data_dir)
    except DataDirInUse as exc:
        raise CommandError(str(exc)) from None
    stream = sys.stderr if args.json else sys.stdout

    def say(line: str) -> None:
        print(line, file=stream, flush=True)

    # The story reports what happens on the screen; the bot's own log lines (one per
    # delivery, decision, review and merge) go to a file beside its store, not in between.
    log_path = data_dir / LOG_NAME
    with log_path.open("a", encoding="utf-8") as log:
        report = asyncio.run(run_demo(data_dir, say, fault=args.inject_fault, log=log))
        logging.getLogger().handlers.clear()  # nothing writes to the file once it is closed
    report.log_file = log_path
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(report.render(), flush=True)
    return 0 if report.ok else 1
