"""``reviewbot explain``: why the bot did or did not act, in plain words.

Give a delivery id (as answered by the webhook or the API) or a PR reference
``FORGE:OWNER/REPO#N``. Every recorded decision is shown with all its reasons: the gate's
(was the delivery for a PR head the bot should look at?), the review verdicts (what the
required checks said, and what was posted at which head) and, for a PR, its merge, its
lease history (who held the reviewer and merger leases, and how each claim ended) and every
finding of the external reviewers at the newest reviewed head (a review shows only a
bounded part of them inline).
``--json`` prints the same records for scripts (the shape of the HTTP API).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from reviewbot.cli import CommandError
from reviewbot.config import load_settings
from reviewbot.core.models import PullRef
from reviewbot.runtime.explain import PLAIN_WORDS as PLAIN_WORDS
from reviewbot.runtime.explain import explain_decision, pull_facts, when
from reviewbot.runtime.lease_history import read_lease_history
from reviewbot.store import decisions, journal
from reviewbot.store.leases import LeaseStore
from reviewbot.workflowdb.access import DBAccess, effective_access, require
from reviewbot.workflowdb.bootstrap import open_existing_store


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "explain",
        help="why the bot did or did not act on a delivery or a PR",
        description=__doc__,
        epilog="Examples:\n  reviewbot explain gitea:acme/api#12\n"
        "  reviewbot explain 72d3162e-cc78-11e3-81ab-4c9367dc0958 --json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("target", metavar="DELIVERY_ID|FORGE:OWNER/REPO#N")
    parser.add_argument("--limit", type=int, default=20, help="newest N decisions of a PR")
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = load_settings()
    require(effective_access(settings.db_access), DBAccess.READ)
    db = open_existing_store(settings)  # read-only: never creates a store
    try:
        pr = _as_pr(args.target)
        if pr is not None:
            facts = pull_facts(db, time.time, pr, args.limit)
            history = read_lease_history(LeaseStore.open(db, settings.leases), pr, limit=args.limit)
            if args.json:
                print(
                    json.dumps(
                        {
                            "pull": str(pr),
                            "decisions": [r.to_json() for r in facts.decisions],
                            "reviews": [r.to_json() for r in facts.reviews],
                            "merge": facts.merge,
                            "findings": facts.findings_json(),
                            "lease_history": history.to_json()["history"],
                        }
                    )
                )
            else:
                print(facts.text())
                if history.entries:
                    print(f"Lease history for {facts.shown}, oldest first:")
                    print("\n".join("  " + line for line in history.lines()))
            return 0
        stored = journal.get_delivery(db, args.target)
        if stored is None:
            raise CommandError(f"no delivery {args.target!r} and not a PR reference")
        rows = decisions.for_delivery(db, args.target)
        if args.json:
            print(json.dumps(journal.delivery_json(stored, [r.to_json() for r in rows])))
        else:
            head = (
                f"Delivery {stored.delivery_id} ({stored.source}"
                f"{' ' + stored.event if stored.event else ''}), "
                f"received {when(stored.received_at)}, "
                f"{stored.status}."
            )
            print(head)
            if not rows:
                print("  No decision yet: it waits for a worker.")
            for row in rows:
                print(explain_decision(row, indent="  "))
        return 0
    finally:
        db.close()


def _as_pr(text: str) -> PullRef | None:
    try:
        return PullRef.parse(text)
    except ValueError:
        return None
