"""``reviewbot explain``: why the bot did or did not act, in plain words.

Give a delivery id (as answered by the webhook or the API, or as the forge shows it, also
for a delivery the bot refused: a wrong signature, an unknown event, a body too large) or a
PR reference ``FORGE:OWNER/REPO#N``. A delivery shows its decisions and the review verdicts
and merge it led to. Every recorded decision is shown with all its reasons: the gate's
(was the delivery for a PR head the bot should look at?), the review verdicts (what the
required checks said, and what was posted at which head) and, for a PR, its merge, its
lease history (who held the reviewer and merger leases, and how each claim ended) and every
finding of the external reviewers at the newest reviewed head (a review shows only a
bounded part of them inline).
``--json`` prints the same records for scripts (the shape of the HTTP API and of the MCP
``explain`` tool). Nothing known (no record of the delivery or the PR) exits 1 with a hint.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from reviewbot.cli import CommandError
from reviewbot.config import Settings, load_settings
from reviewbot.core.models import FORGES, PullRef
from reviewbot.runtime.explain import PLAIN_WORDS as PLAIN_WORDS
from reviewbot.runtime.explain import delivery_facts, pull_facts, unknown_pull
from reviewbot.runtime.lease_history import read_lease_history
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
        pr = _as_pr(args.target, settings)
        if pr is not None:
            facts = pull_facts(db, time.time, pr, args.limit)
            leases = LeaseStore.open(db, settings.leases)
            try:
                history = read_lease_history(leases, pr, limit=args.limit)
            finally:
                leases.close()
            if not facts.known and not history.entries:
                raise CommandError(unknown_pull(settings, pr))
            if args.json:
                print(json.dumps(facts.to_json(history.to_json()["history"])))
            else:
                print(facts.text())
                if history.entries:
                    print(f"Lease history for {facts.shown}, oldest first:")
                    print("\n".join("  " + line for line in history.lines()))
            return 0
        delivery = delivery_facts(db, time.time, args.target, args.limit)
        if not delivery.known:
            raise CommandError(
                f"no delivery {args.target!r} is known (accepted or refused) and it is not a "
                "PR reference; give the id the forge shows for the delivery (X-GitHub-Delivery, "
                "X-Gitea-Delivery) or FORGE:OWNER/REPO#N"
            )
        print(json.dumps(delivery.to_json()) if args.json else delivery.text())
        return 0
    finally:
        db.close()


def _as_pr(text: str, settings: Settings) -> PullRef | None:
    """The PR ``text`` names; ``None`` when it is no PR reference at all (a delivery id)."""
    try:
        return PullRef.parse(text)
    except ValueError as exc:
        if "unknown forge" in str(exc):  # FORGE:OWNER/REPO#N with a forge no one has
            raise CommandError(str(exc)) from None
        if "names no forge" not in str(exc):
            return None
        # OWNER/REPO#N: suggest the forges this configuration connects (else every forge).
        forges = [f for f in FORGES if getattr(settings, f).configured] or list(FORGES)
        tries = " or ".join(f"{forge}:{text.strip()}" for forge in forges)
        raise CommandError(f"{text!r} names no forge: try {tries}") from None
