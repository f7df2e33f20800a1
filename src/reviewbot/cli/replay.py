"""``reviewbot replay DELIVERY_ID``: run the gate again on a stored delivery.

The delivery's stored bytes and headers are parsed again and gated against the live PR;
the new decisions are recorded beside the earlier ones (``explain`` shows both). A delivery
that replays another one (same semantic key) stays ``duplicate_delivery``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from reviewbot.cli import CommandError
from reviewbot.config import Settings, load_settings
from reviewbot.runtime.gate_runner import GateRunner
from reviewbot.store import journal
from reviewbot.store.bootstrap import open_store
from reviewbot.store.decisions import DecisionRecord
from reviewbot.workflowdb.access import DBAccess, effective_access, require


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "replay",
        help="run the gate again on a stored delivery",
        description=__doc__,
        epilog="Example:\n  reviewbot replay 72d3162e-cc78-11e3-81ab-4c9367dc0958 --json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("delivery_id", metavar="DELIVERY_ID")
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = load_settings()
    require(effective_access(settings.db_access), DBAccess.READ_WRITE)
    rows = asyncio.run(replay(settings, args.delivery_id))
    if args.json:
        print(
            json.dumps({"delivery_id": args.delivery_id, "decisions": [r.to_json() for r in rows]})
        )
    else:
        from reviewbot.cli.explain import explain_decision

        print(f"Replayed delivery {args.delivery_id}:")
        for row in rows:
            print(explain_decision(row, indent="  "))
    return 0


async def replay(settings: Settings, delivery_id: str) -> list[DecisionRecord]:
    from reviewbot.app import configured_forges

    db = await asyncio.to_thread(open_store, settings)
    forges = configured_forges(settings)
    try:
        stored = await asyncio.to_thread(journal.get_delivery, db, delivery_id)
        if stored is None:
            raise CommandError(f"no delivery {delivery_id!r} in the journal")
        recorded = await GateRunner(db, settings, forges).process(stored)
        return list(recorded.records)
    finally:
        for forge in forges.values():
            await forge.aclose()
        db.close()
