"""``reviewbot explain``: why the bot did or did not act, in plain words.

Give a delivery id (as answered by the webhook or the API) or a PR reference
``FORGE:OWNER/REPO#N``. Every recorded decision is shown with all its reasons: the gate's
(was the delivery for a PR head the bot should look at?), the review verdicts (what the
required checks said, and what was posted at which head) and, for a PR, its merge.
``--json`` prints the same records for scripts (the shape of the HTTP API).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from typing import Any

from reviewbot.cli import CommandError
from reviewbot.config import load_settings
from reviewbot.core.clock import iso
from reviewbot.core.models import PullRef
from reviewbot.store import decisions, journal, repositories
from reviewbot.store.database import Database
from reviewbot.store.decisions import DecisionRecord
from reviewbot.store.reviews import ReviewDecision, ReviewStore
from reviewbot.workflowdb.access import DBAccess, effective_access, require
from reviewbot.workflowdb.bootstrap import open_existing_store

# What each reason code means, for people; the detail says the specifics.
PLAIN_WORDS: dict[str, str] = {
    "eligible": "the pull request can be reviewed",
    "not_pull_request_event": "the event is not about a pull request, so there is nothing to do",
    "action_ignored": "this kind of change to a pull request needs no review",
    "pr_closed": "the pull request is closed",
    "pr_draft": "the pull request is a draft",
    "head_moved": "the event is about an older commit; the pull request has moved on",
    "author_is_bot": "the pull request is the bot's own; it never reviews itself",
    "base_branch_excluded": "the target branch is not one the bot reviews",
    "skip_label": "the pull request carries a label that tells the bot to stay away",
    "repo_not_configured": "the repository has no rules in the configuration",
    "forge_not_configured": "no connection to that forge is configured",
    "duplicate_delivery": "the same event arrived before; it was handled once",
    "delivery_unresolved": "the delivery could not be read",
    "pr_not_found": "the forge does not know that pull request (or hides it)",
    "no_open_pull_requests": "no open pull request has that commit as its head",
    "forge_error": "the forge answered with an error",
    "app_not_installed": "the GitHub App is not installed on the repository",
    "forge_auth_failed": "the forge refused the bot's credentials",
    "forge_unreachable": "the forge could not be reached",
    "forge_url_wrong": "the configured forge URL does not answer like the forge's API",
    "head_unknown": "the forge does not know that commit",
    "wrong_endpoint": "a webhook of one forge was sent to the other forge's endpoint",
    "permission_denied": "the user lacks the permission the request needs",
    "recorded": "noted; nothing to review",
    "internal_error": "the bot failed; its log has the details",
    "delivery_failed": "the delivery could not be recorded after every attempt; it is parked",
    "no_required_checks": "no check is required for the target branch: nothing to judge",
    "checks_pending": "required checks are still running or have not reported yet",
    "checks_failed": "a required check failed",
    "checks_passed": "every required check passed",
    "reviewer_findings": "an external reviewer reported errors",
    "reviewer_error": "an external reviewer could not be run or gave unreadable output",
    "sandbox_unavailable": "external reviewers did not run: the sandbox cannot run here",
    "review_posted": "the review was posted on the forge",
    "review_dismissed": "someone dismissed the bot's review, so the head is evaluated again",
    "not_approved": "no approval by someone other than the author at exactly this head",
    "changes_requested": "a reviewer's latest review requests changes",
    "checks_not_green": "the required checks are not all green",
    "not_mergeable": "the forge says the pull request cannot be merged",
    "superseded": "a newer head or a newer lease holder took over",
    "lease_not_held": "the caller does not hold the lease it claims",
    "lease_held": "another worker holds the lease",
}


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
            rows = decisions.for_pull(
                db, forge=pr.forge, repo=pr.full_name, number=pr.number, limit=args.limit
            )
            reviews = ReviewStore(db, time.time).decisions(
                pr.forge, pr.full_name, pr.number, limit=args.limit
            )
            merge = merge_of(db, pr)
            shown = (
                f"{pr.forge}:{repositories.display_name(db, pr.forge, pr.full_name)}#{pr.number}"
            )
            if args.json:
                print(
                    json.dumps(
                        {
                            "pull": str(pr),
                            "decisions": [r.to_json() for r in rows],
                            "reviews": [r.to_json() for r in reviews],
                            "merge": merge,
                        }
                    )
                )
            else:
                print(explain_pull(shown, rows, reviews, merge))
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
                f"received {_when(stored.received_at)}, "
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


def merge_of(db: Database, pr: PullRef) -> dict[str, Any] | None:
    """The recorded merge of a PR, if any (read directly: no lease is involved in reading)."""
    with db.read() as tx:
        row = tx.one(
            "SELECT head_sha, merge_commit_sha, method, holder, epoch FROM merged_pulls "
            "WHERE forge = ? AND repo = ? AND number = ?",
            (pr.forge, pr.full_name, pr.number),
        )
    return None if row is None else dict(row)


def explain_pull(
    pr: str,
    rows: list[DecisionRecord],
    reviews: Sequence[ReviewDecision] = (),
    merge: dict[str, Any] | None = None,
) -> str:
    if not rows and not reviews and merge is None:
        return f"No decision recorded for {pr}."
    lines: list[str] = []
    if merge is not None:
        lines.append(
            f"{pr} was merged at {merge['head_sha'][:12]} as {str(merge['merge_commit_sha'])[:12]}"
            f" ({merge['method']}, by {merge['holder']} under lease epoch {merge['epoch']})."
        )
    if reviews:
        lines.append(f"Review verdicts for {pr}, newest first:")
        lines += [explain_review(r, indent="  ") for r in reviews]
    if rows:
        lines.append(f"Gate decisions for {pr}, newest first:")
        lines += [explain_decision(r, indent="  ", with_delivery=True) for r in rows]
    return "\n".join(lines)


def explain_review(row: ReviewDecision, *, indent: str = "") -> str:
    via = f" (delivery {row.delivery_id})" if row.delivery_id else ""
    lines = [
        f"{indent}{_when(row.decided_at)}  at {row.head_sha[:12]}: {row.decision.upper()}{via}"
    ]
    plain = PLAIN_WORDS.get(row.reason_code, row.reason_code.replace("_", " "))
    detail = f": {row.detail}" if row.detail else ""
    lines.append(f"{indent}  - {plain} [{row.reason_code}]{detail}")
    return "\n".join(lines)


def explain_decision(row: DecisionRecord, *, indent: str = "", with_delivery: bool = False) -> str:
    what = f"{row.forge}:{row.repo}#{row.number}" if row.repo and row.number else "no PR"
    at = f" at {row.head_sha[:12]}" if row.head_sha else ""
    event = f"{row.event}{'/' + row.action if row.action else ''}" if row.event else ""
    via = f" (delivery {row.delivery_id}, {event})" if with_delivery else ""
    lines = [f"{indent}{_when(row.decided_at)}  {what}{at}: {row.decision.upper()}{via}"]
    for reason in row.reasons:
        plain = PLAIN_WORDS.get(reason.code, reason.code.replace("_", " "))
        detail = f": {reason.detail}" if reason.detail else ""
        lines.append(f"{indent}  - {plain} [{reason.code}]{detail}")
    return "\n".join(lines)


def _when(ts: float) -> str:
    """A record's moment as the explain lines always showed it."""
    return iso(ts, timespec="microseconds")
