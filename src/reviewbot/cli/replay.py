"""``reviewbot replay DELIVERY_ID...``: run the gate again on stored deliveries.

The delivery's stored bytes and headers are parsed again and gated against the live PR;
the new decisions are recorded beside the earlier ones (``explain`` shows both). A delivery
that replays another one (same semantic key) stays ``duplicate_delivery``. With several
ids, a progress line per delivery goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from reviewbot.cli import CommandError
from reviewbot.config import Settings, load_settings
from reviewbot.progress import Progress
from reviewbot.runtime.explain import explain_decision
from reviewbot.runtime.ingestion.gate_runner import GateRunner
from reviewbot.store import journal
from reviewbot.store.decisions import DecisionRecord
from reviewbot.workflowdb.access import DBAccess, effective_access, require
from reviewbot.workflowdb.bootstrap import open_store


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "replay",
        help="run the gate again on stored deliveries",
        description=__doc__,
        epilog="Examples:\n  reviewbot replay 72d3162e-cc78-11e3-81ab-4c9367dc0958 --json\n"
        "  reviewbot replay $(cat failed-ids.txt)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("delivery_ids", metavar="DELIVERY_ID", nargs="+")
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = load_settings()
    require(effective_access(settings.db_access), DBAccess.READ_WRITE)
    ids: list[str] = list(dict.fromkeys(args.delivery_ids))
    progress = Progress("replay", len(ids)) if len(ids) > 1 else None
    replayed = asyncio.run(replay_many(settings, ids, progress))
    if args.json:
        docs = [
            {"delivery_id": did, "decisions": [r.to_json() for r in rows]} for did, rows in replayed
        ]
        print(json.dumps(docs[0] if len(docs) == 1 else {"replayed": docs}))
    else:
        for did, rows in replayed:
            print(f"Replayed delivery {did}:")
            for row in rows:
                print(explain_decision(row, indent="  "))
    return 0


async def replay(settings: Settings, delivery_id: str) -> list[DecisionRecord]:
    return (await replay_many(settings, [delivery_id]))[0][1]


async def replay_many(
    settings: Settings, delivery_ids: list[str], progress: Progress | None = None
) -> list[tuple[str, list[DecisionRecord]]]:
    """Gate each stored delivery again, in order (all ids must be in the journal)."""
    # Start-up cost: the forge clients load only when deliveries are replayed.
    from reviewbot.service import configured_forges

    db = await asyncio.to_thread(open_store, settings)
    forges = configured_forges(settings)
    out: list[tuple[str, list[DecisionRecord]]] = []
    runner: GateRunner | None = None
    try:
        stored = [await db.run(journal.get_delivery, db, d) for d in delivery_ids]
        missing = [d for d, s in zip(delivery_ids, stored, strict=True) if s is None]
        if missing:
            raise CommandError(f"no delivery {missing[0]!r} in the journal")
        runner = GateRunner(db, settings, forges)
        for delivery in stored:
            assert delivery is not None
            recorded = await runner.process(delivery)
            out.append((delivery.delivery_id, list(recorded.records)))
            if progress is not None:
                outcomes = ", ".join(r.decision for r in recorded.records) or "no decision"
                progress.advance(f"{delivery.delivery_id}: {outcomes}")
        return out
    finally:
        if runner is not None:
            await runner.aclose()
        for forge in forges.values():
            await forge.aclose()
        db.close()
