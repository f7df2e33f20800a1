"""``reviewbot replay DELIVERY_ID...``: run the gate again on stored deliveries.

Only the gate, unless ``--review``: the delivery's stored bytes and headers are parsed again
and gated against the live PR, and the new decisions are recorded beside the earlier ones
(``explain`` shows both); no review runs and nothing is posted. ``--review`` then also
reviews each delivery the gate finds eligible, at the head the gate decided on, as the
server would have (the verdict is recorded and the native review posted, exactly once).
A delivery that replays another one (same semantic key) stays ``duplicate_delivery``. With
several ids, a progress line per delivery goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from reviewbot.cli import CommandError
from reviewbot.config import Settings, load_settings
from reviewbot.forges.base import Forge
from reviewbot.progress import Progress
from reviewbot.runtime.explain import explain_decision
from reviewbot.runtime.ingestion.gate_runner import GateRunner
from reviewbot.store import journal
from reviewbot.store.database import Database
from reviewbot.store.decisions import DecisionRecord
from reviewbot.workflowdb.access import DBAccess, effective_access, require
from reviewbot.workflowdb.bootstrap import open_store


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "replay",
        help="run the gate again on stored deliveries (--review: and review them)",
        description=__doc__,
        epilog="Examples:\n  reviewbot replay 72d3162e-cc78-11e3-81ab-4c9367dc0958 --json\n"
        "  reviewbot replay $(cat failed-ids.txt)\n"
        "  reviewbot replay 72d3162e-cc78-11e3-81ab-4c9367dc0958 --review",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("delivery_ids", metavar="DELIVERY_ID", nargs="+")
    parser.add_argument(
        "--review",
        action="store_true",
        help="also review each delivery the gate finds eligible (record and post the verdict)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")
    parser.set_defaults(func=run)


ONLY_GATED = (
    "Only the gate ran: no review was started. "
    "Add --review to also review eligible deliveries (or: reviewbot review PR)."
)


def run(args: argparse.Namespace) -> int:
    settings = load_settings()
    require(effective_access(settings.db_access), DBAccess.READ_WRITE)
    ids: list[str] = list(dict.fromkeys(args.delivery_ids))
    progress = Progress("replay", len(ids)) if len(ids) > 1 else None
    reviews: dict[str, list[dict[str, Any]]] = {}
    replayed = asyncio.run(
        replay_many(settings, ids, progress, reviews=reviews if args.review else None)
    )
    if args.json:
        docs: list[dict[str, Any]] = [
            {"delivery_id": did, "decisions": [r.to_json() for r in rows]} for did, rows in replayed
        ]
        if args.review:
            for doc in docs:
                doc["reviews"] = reviews.get(doc["delivery_id"], [])
        print(json.dumps(docs[0] if len(docs) == 1 else {"replayed": docs}))
    else:
        for did, rows in replayed:
            print(f"Replayed delivery {did}:")
            for row in rows:
                print(explain_decision(row, indent="  "))
            for review in reviews.get(did, []):
                print("  " + _review_line(review))
        if not args.review:
            print(ONLY_GATED)
    return 0


def _review_line(review: dict[str, Any]) -> str:
    d = review["decision"]
    posted = [
        f"{row['verdict']} {row['status']}"
        + (f" as review {row['forge_review_id']}" if row["forge_review_id"] else "")
        for row in review["outbox"]
    ]
    return (
        f"review of {review['pr']} at {(d['head_sha'] or '?')[:12]}: {d['decision']} "
        f"({d['reason_code']}); posted: {', '.join(posted) or 'nothing'}"
    )


async def replay(settings: Settings, delivery_id: str) -> list[DecisionRecord]:
    return (await replay_many(settings, [delivery_id]))[0][1]


async def replay_many(
    settings: Settings,
    delivery_ids: list[str],
    progress: Progress | None = None,
    *,
    reviews: dict[str, list[dict[str, Any]]] | None = None,
) -> list[tuple[str, list[DecisionRecord]]]:
    """Gate each stored delivery again, in order (all ids must be in the journal).

    ``reviews``: also review the eligible ones, filling in each delivery's review outcomes.
    """
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
        if reviews is not None:
            await _review_eligible(settings, db, forges, out, reviews)
        return out
    finally:
        if runner is not None:
            await runner.aclose()
        for forge in forges.values():
            await forge.aclose()
        db.close()


async def _review_eligible(
    settings: Settings,
    db: Database,
    forges: dict[str, Forge],
    replayed: list[tuple[str, list[DecisionRecord]]],
    reviews: dict[str, list[dict[str, Any]]],
) -> None:
    """Review each eligible decision at its head, as the server's gate hook would."""
    # Start-up cost: the review pipeline loads only for --review.
    from reviewbot.runtime.review.pipeline import ReviewRequest
    from reviewbot.server.tools_socket import service_tools_sockets
    from reviewbot.service import Parts, build_service

    eligible = [
        (did, r)
        for did, rows in replayed
        for r in rows
        if r.decision == "eligible" and r.forge in forges and r.repo and r.number is not None
    ]
    if not eligible:
        return
    service = build_service(
        settings,
        forges=forges,
        db=db,
        parts=Parts.REVIEW,
        client="reviewbot-cli",
        tools_endpoint=service_tools_sockets,  # each review run's own tools socket
    )
    async with service:
        parts = service.review
        assert parts is not None
        for did, record in eligible:
            assert record.forge is not None and record.repo is not None
            assert record.number is not None
            outcome = await parts.pipeline.review(
                ReviewRequest(
                    record.forge,
                    record.repo,
                    record.number,
                    head_sha=record.head_sha,
                    delivery_id=did,
                    source="replay",
                    event=record.event,
                    action=record.action,
                )
            )
            result = outcome.to_json()
            result["pr"] = f"{record.forge}:{record.repo}#{record.number}"
            reviews.setdefault(did, []).append(result)
