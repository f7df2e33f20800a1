"""``reviewbot doctor``: the readiness checks of ``GET /readyz``, from the command line.

It checks the store (a write commits), the queue (the oldest delivery waiting to be gated
is younger than ready_max_queue_age_s), each configured forge (it answers) and the reviewer
sandbox (probed here as serve would, as this user: run it as the bot's user). The workers
run inside ``reviewbot serve``: with --server URL their check is read from that server's
/readyz. Exit status 0 when every check passes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

import httpx

from reviewbot.config import Settings, load_settings
from reviewbot.runtime.health import Check, readiness
from reviewbot.runtime.reviewers.sandbox import Sandbox
from reviewbot.workflowdb.bootstrap import open_store


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "doctor",
        help="check that the bot is ready: store, queue, forges, sandbox, workers",
        description=__doc__,
        epilog="Examples:\n  reviewbot doctor\n  reviewbot doctor --server http://127.0.0.1:8080",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--server", help="a running server whose workers to check")
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = load_settings()
    checks = asyncio.run(local_checks(settings))
    if args.server:
        checks.append(server_workers(args.server))
    ready = all(c.ok for c in checks)
    if args.json:
        print(json.dumps({"ready": ready, "checks": [c.to_json() for c in checks]}))
    else:
        for check in checks:
            print(f"{'ok  ' if check.ok else 'FAIL'} {check.name}: {check.detail}")
        print("ready" if ready else "not ready: " + ", ".join(c.name for c in checks if not c.ok))
    return 0 if ready else 1


async def local_checks(settings: Settings) -> list[Check]:
    # Start-up cost: the forge clients load only for this command.
    from reviewbot.service import configured_forges

    db = await asyncio.to_thread(open_store, settings)
    forges = configured_forges(settings)
    sandbox = await asyncio.to_thread(Sandbox.from_settings, settings)
    try:
        return await readiness(
            settings, db, forges, time.time, expect_workers=False, sandbox=sandbox.state
        )
    finally:
        for forge in forges.values():
            await forge.aclose()
        db.close()


def server_workers(base: str) -> Check:
    """The server's own workers check, from its /readyz."""
    try:
        body = httpx.get(base.rstrip("/") + "/readyz", timeout=10).json()
    except (httpx.HTTPError, ValueError) as exc:
        return Check("server", False, f"{base} did not answer: {exc}")
    for check in body.get("checks", []):
        if check.get("name") == "workers_alive":
            return Check("workers_alive", bool(check["ok"]), str(check["detail"]))
    return Check("workers_alive", False, f"{base}/readyz reports no workers check")
