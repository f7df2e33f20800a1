"""``reviewbot gate --delivery FILE``: gate a delivery file as a step, like the server would.

The file holds a delivery envelope (``{"delivery_id"?, "variables", "payload", "headers"?}``);
``VAR_*`` environment variables fill what the file leaves out. The delivery is journalled and
gated, its decisions are recorded, and ``--out DIR`` receives ``route_selection.json``
(``decision``, ``reasons``, ``forge``, ``repo``, ``number``, ``head_sha``, ``delivery_id``).
A missing, unreadable or malformed file is still recorded (an ``error`` with the reason) and
still gets a route file, and so does a delivery whose gating met a store fault
(``store_unavailable``: nothing decided, the delivery back in the queue). Exit status: 0 for
eligible or skip, 2 for an error.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from reviewbot.cli import CommandError
from reviewbot.config import Settings, load_settings
from reviewbot.core.gate import unresolved_decision
from reviewbot.core.reasons import Outcome
from reviewbot.ingress.delivery_file import DeliveryFile, read_delivery_file
from reviewbot.ingress.envelope import ENV_PREFIX, FIELD_NAMES
from reviewbot.ingress.errors import DeliveryFileError
from reviewbot.runtime.ingestion.gate_runner import ENV_HEADER_PREFIX, GateRunner
from reviewbot.store import decisions, journal
from reviewbot.store.database import Database, is_transient
from reviewbot.store.decisions import DecisionRecord
from reviewbot.store.journal import NewDelivery
from reviewbot.workflowdb.access import DBAccess, effective_access, require
from reviewbot.workflowdb.bootstrap import open_store

ROUTE_FILE = "route_selection.json"
EXIT_ERROR = 2


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "gate",
        help="gate a delivery file and write route_selection.json",
        description=__doc__,
        epilog="Example:\n  VAR_NUMBER=12 reviewbot gate --delivery delivery.json --out run/",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--delivery", required=True, type=Path, metavar="FILE")
    parser.add_argument("--out", type=Path, metavar="DIR", help="where route_selection.json goes")
    parser.add_argument("--json", action="store_true", help="print the route as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = load_settings()
    require(effective_access(settings.db_access), DBAccess.READ_WRITE)
    route = asyncio.run(gate_file(settings, args.delivery, dict(os.environ)))
    if args.out is not None:
        write_route(args.out, route)
    if args.json:
        print(json.dumps(route))
    else:
        reasons = "; ".join(f"{r['code']}: {r['detail']}" for r in route["reasons"])
        where = f"{route['forge']}:{route['repo']}#{route['number']}" if route["repo"] else "-"
        print(f"{route['decision']} {where} (delivery {route['delivery_id']}): {reasons}")
    return EXIT_ERROR if route["decision"] == Outcome.ERROR.value else 0


def write_route(out: Path, route: dict[str, Any]) -> Path:
    try:
        out.mkdir(parents=True, exist_ok=True)
        target = out / ROUTE_FILE
        tmp = out / f".{ROUTE_FILE}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(route, indent=2) + "\n", encoding="utf-8")
        tmp.replace(target)
    except OSError as exc:
        raise CommandError(f"cannot write {out / ROUTE_FILE}: {exc.strerror or exc}") from None
    return target


def route_of(delivery_id: str, rows: list[DecisionRecord]) -> dict[str, Any]:
    """The route file: the first decision at the top, every decision in ``decisions``."""
    first = rows[0]
    return {
        "decision": first.decision,
        "reasons": [{"code": r.code, "detail": r.detail} for r in first.reasons],
        "forge": first.forge,
        "repo": first.repo,
        "number": first.number,
        "head_sha": first.head_sha,
        "delivery_id": delivery_id,
        "decisions": [r.to_json() for r in rows],
    }


async def gate_file(settings: Settings, path: Path, environ: dict[str, str]) -> dict[str, Any]:
    """Journal, gate and record one delivery file; the route it selects. A store fault
    before the delivery was gated (opening the store, journalling or claiming it) is the
    route ``store_unavailable``; one while it is gated, see :func:`_store_failed`."""
    try:
        db = await asyncio.to_thread(open_store, settings)
        try:
            return await _gate_file(settings, db, path, environ)
        finally:
            db.close()
    except Exception as exc:
        if not is_transient(exc):
            raise
        loaded, _ = await asyncio.to_thread(_load, path, time.time())
        named = loaded.delivery_id if isinstance(loaded, DeliveryFile) else loaded
        return _unavailable(named, f"the store failed ({exc}) before the delivery was gated")


async def _gate_file(
    settings: Settings, db: Database, path: Path, environ: dict[str, str]
) -> dict[str, Any]:
    now = time.time()
    env = {
        f"{ENV_HEADER_PREFIX}{ENV_PREFIX}{name.upper()}": environ[ENV_PREFIX + name.upper()]
        for name in FIELD_NAMES
        if ENV_PREFIX + name.upper() in environ
    }
    parsed, body = await asyncio.to_thread(_load, path, now)
    if not isinstance(parsed, DeliveryFile):
        assert isinstance(body, str)
        return await db.run(_record_unreadable, db, parsed, body, now)
    assert isinstance(body, bytes)
    delivery_id = parsed.delivery_id
    new = NewDelivery(
        delivery_id=delivery_id,
        source="file",
        body=body,
        received_at=now,
        event="delivery_file",
        headers={**parsed.headers, **env},
    )
    await db.run(journal.insert_delivery, db, new)
    earlier = await db.run(decisions.for_delivery, db, delivery_id)
    if earlier:  # the same delivery was gated before: its decisions stand, no second action
        return route_of(delivery_id, earlier)
    stored = await db.run(journal.claim, db, delivery_id)
    if stored is None:
        raise CommandError(f"delivery {delivery_id} is being gated by another process")
    # Start-up cost: the forge clients load only when a delivery file is gated.
    from reviewbot.service import configured_forges

    forges = configured_forges(settings)
    runner = GateRunner(db, settings, forges)
    try:
        recorded = await runner.process(stored)
    except Exception as exc:
        if not is_transient(exc):
            raise
        return await _store_failed(db, delivery_id, exc)
    finally:
        await runner.aclose()
        for forge in forges.values():
            await forge.aclose()
    return route_of(delivery_id, list(recorded.records))


async def _store_failed(db: Database, delivery_id: str, exc: BaseException) -> dict[str, Any]:
    """The route of a delivery whose gating met a store fault. Decisions the store did
    commit stand (a lost answer to a commit); otherwise nothing was decided, and the
    delivery goes back to the queue (the next run of the step, ``replay`` or a ``serve``
    start gates it) with ``store_unavailable``."""
    try:
        earlier = await db.run(decisions.for_delivery, db, delivery_id)
        if earlier:
            return route_of(delivery_id, earlier)
        await db.run(functools.partial(journal.requeue, uncharge=True), db, [delivery_id])
        where, then = "it is back in the queue", "run the step again"
    except Exception as again:
        if not is_transient(again):
            raise
        where = "it stays claimed (a serve start puts it back in the queue)"
        then = f"reviewbot replay {delivery_id} gates it"
    return _unavailable(
        delivery_id,
        f"the store failed while it was gated ({exc}); nothing was decided, {where}",
        then,
    )


def _unavailable(delivery_id: str, detail: str, then: str = "run the step again") -> dict[str, Any]:
    """The route of a step the store failed: an error, ``store_unavailable``, decided
    nothing; ``then`` says what to do."""
    return {
        "decision": Outcome.ERROR.value,
        "reasons": [{"code": "store_unavailable", "detail": f"{detail}: {then}"}],
        "forge": None,
        "repo": None,
        "number": None,
        "head_sha": None,
        "delivery_id": delivery_id,
        "decisions": [],
    }


def _load(path: Path, now: float) -> tuple[DeliveryFile, bytes] | tuple[str, str]:
    """The checked file and its bytes, or (a delivery id, why it cannot be read)."""
    try:
        parsed = read_delivery_file(path)
        return parsed, path.read_bytes()
    except (DeliveryFileError, OSError) as exc:
        detail = exc.detail if isinstance(exc, DeliveryFileError) else f"{path}: {exc}"
        known = exc.delivery_id if isinstance(exc, DeliveryFileError) else None
        # Nothing readable names the delivery: name this attempt by the path and the time.
        attempt = hashlib.sha256(f"{path.resolve()}|{now}".encode()).hexdigest()[:32]
        return known or f"file-error:{attempt}", detail


def _record_unreadable(db: Database, delivery_id: str, detail: str, now: float) -> dict[str, Any]:
    journal.insert_delivery(
        db,
        NewDelivery(
            delivery_id=delivery_id,
            source="file",
            body=b"",
            received_at=now,
            event="delivery_file",
        ),
    )
    decision = unresolved_decision(detail)
    row = DecisionRecord(
        delivery_id=delivery_id,
        source="file",
        decision=str(decision.outcome),
        reasons=decision.reasons,
        decided_at=now,
        event="delivery_file",
    )
    recorded = decisions.record(db, [row], finish_delivery=(False, detail))
    return route_of(delivery_id, list(recorded.records))
