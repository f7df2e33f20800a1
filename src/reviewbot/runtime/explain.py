"""What ``reviewbot explain`` says about a pull request, for every face that shows it.

The command line prints it and the status page's PR view shows it, from the same records
and the same sentences: :func:`pull_facts` reads them, :func:`explain_pull` words them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from reviewbot.config import Settings
from reviewbot.core.clock import iso
from reviewbot.core.findings import Finding
from reviewbot.core.models import PullRef
from reviewbot.store import after_merge, decisions, journal, refused_webhooks, repositories
from reviewbot.store.after_merge import ActionRow
from reviewbot.store.database import Database
from reviewbot.store.decisions import DecisionRecord
from reviewbot.store.journal import StoredDelivery
from reviewbot.store.queue import QueueEvent, QueueStore
from reviewbot.store.refused_webhooks import RefusedWebhook
from reviewbot.store.reviews import ReviewDecision, ReviewStore

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
    "routed_to_listener": "a part of the bot registered for that commit; the event went to it",
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
    "protection_unreadable": (
        "the forge's rules for the branch could not be read with the bot's credentials"
    ),
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
    "lane_lost": "automerge lost its branch's merge lane before the merge call; nothing sent",
    "restart_required": (
        "this process is not the code, configuration or schema on disk: it reviews and "
        "merges nothing until it restarts"
    ),
    "queue_culprit": "the entry failed alone in a queue car and was ejected",
    "queue_flaky": "the entry's batch failed twice while it passed alone; ejected as flaky",
    "car_timed_out": "a queue car's CI did not finish in time; counted as a failure",
    "not_first_car": "only the first car of a train lands",
    "car_not_green": "the queue car is not green at its tested commit yet",
    "base_moved": "the base is no longer an ancestor of the car's tested commit; rebuilt",
    "queue_frozen": "a freeze window holds; cars are tested, nothing lands",
    "queue_outside_window": "outside every merge window; cars are tested, nothing lands",
    "queue_paused": "the queue is paused: nothing is admitted, starts or lands",
    "queue_draining": "the queue is draining: no new admissions, the queued run on",
    "branch_not_found": "the forge has no such branch",
    "not_queued": "the PR is in no merge queue",
    "dequeued": "taken out of the merge queue on request",
    "missing_scope": "the token lacks a scope the action needs",
    "repo_not_allowed": "the token is bound to another repository",
    "worker_unproven": "no worker with that identity is registered",
    "not_worker_owner": "another caller registered that worker",
    "worker_stale": "the worker was not heard from within one lease term; it holds nothing",
    "self_approval": "the only approval is the author's own",
}


@dataclass(frozen=True)
class PullFacts:
    """Everything ``explain`` shows about one PR; ``shown`` is ``FORGE:Owner/Name#N``."""

    pr: PullRef
    shown: str
    decisions: list[DecisionRecord]
    reviews: list[ReviewDecision]
    merge: dict[str, Any] | None
    # The external reviewers' findings at the newest reviewed head: the whole list, of
    # which a review shows at most a bounded part inline.
    findings: tuple[Finding, ...] = ()
    # What the bot did after the merge (deleted the head branch, closed issues), oldest first.
    after_merge: tuple[ActionRow, ...] = ()
    # Its merge-queue events and those of the cars that carried it, oldest first.
    queue: tuple[QueueEvent, ...] = ()

    def text(self) -> str:
        text = explain_pull(self.shown, self.decisions, self.reviews, self.merge)
        if self.after_merge:
            lines = "\n".join("  " + r.line() for r in self.after_merge)
            text += f"\nAfter the merge:\n{lines}"
        if self.queue:
            if not self.known_outside_queue:
                text = ""
            text += ("\n" if text else "") + f"Merge queue events for {self.shown}, oldest first:\n"
            text += "\n".join(explain_queue_event(event, indent="  ") for event in self.queue)
        if self.findings and self.reviews:
            head = self.reviews[0].head_sha[:12]
            text += f"\nExternal reviewers' findings at {head} ({len(self.findings)}):\n"
            text += "\n".join(
                f"  - {f.severity.value} {f.path}:{f.line}: {' '.join(f.message.split())}"
                for f in self.findings
            )
        return text

    @property
    def known_outside_queue(self) -> bool:
        return bool(self.decisions or self.reviews or self.merge is not None)

    @property
    def known(self) -> bool:
        return self.known_outside_queue or bool(self.queue)

    def to_json(self, lease_history: list[dict[str, Any]]) -> dict[str, Any]:
        """The sections ``explain --json`` prints and the MCP tool answers."""
        return {
            "pull": str(self.pr),
            "shown": self.shown,
            "decisions": [r.to_json() for r in self.decisions],
            "reviews": [r.to_json() for r in self.reviews],
            "merge": self.merge,
            "after_merge": self.after_merge_json(),
            "findings": self.findings_json(),
            "lease_history": lease_history,
            "queue": [event.to_json() for event in self.queue],
        }

    def after_merge_json(self) -> list[dict[str, Any]]:
        return [r.to_json() for r in self.after_merge]

    def findings_json(self) -> list[dict[str, Any]]:
        return [
            {"path": f.path, "line": f.line, "severity": f.severity.value, "message": f.message}
            for f in self.findings
        ]


def pull_facts(db: Database, clock: Callable[[], float], pr: PullRef, limit: int) -> PullFacts:
    """The newest ``limit`` gate decisions and review verdicts of a PR, and its merge."""
    rows = decisions.for_pull(db, forge=pr.forge, repo=pr.full_name, number=pr.number, limit=limit)
    store = ReviewStore(db, clock)
    reviews = store.decisions(pr.forge, pr.full_name, pr.number, limit=limit)
    shown = f"{pr.forge}:{repositories.display_name(db, pr.forge, pr.full_name)}#{pr.number}"
    findings = (
        store.reviewer_findings(pr.forge, pr.full_name, pr.number, reviews[0].head_sha)
        if reviews
        else None
    )
    actions = tuple(after_merge.for_pull(db, pr.forge, pr.full_name, pr.number))
    queue = queue_events(QueueStore(db, clock), pr, limit=QUEUE_EVENTS)
    return PullFacts(pr, shown, rows, reviews, merge_of(db, pr), findings or (), actions, queue)


# The newest this many events of each queue a PR was in are searched for its cars' events.
QUEUE_EVENTS = 2000


def queue_events(store: QueueStore, pr: PullRef, *, limit: int) -> tuple[QueueEvent, ...]:
    """The PR's own queue events and those of every car that carried it (a car's build,
    result and cancellation name no PR), oldest first."""
    own = store.events_of_pull(pr.forge, pr.full_name, pr.number)
    bases = sorted({e.base for e in own})
    found = {e.id: e for e in own}
    for base in bases:
        cars = {
            c.id
            for c in store.cars(pr.forge, pr.full_name, base, live_only=False)
            if pr.number in c.batch
        }
        for event in store.events(pr.forge, pr.full_name, base, limit=limit):
            if event.number is None and event.car in cars:
                found[event.id] = event
    return tuple(found[i] for i in sorted(found))


def explain_queue_event(event: QueueEvent, *, indent: str = "") -> str:
    """One queue event: when, what, its reason code in plain words, and its evidence."""
    where = f" car {event.car}" if event.car is not None else ""
    at = f" at {event.sha[:12]}" if event.sha else ""
    line = f"{indent}{when(event.at)}  {event.base}{where}: {event.kind.upper()}{at}"
    if event.code:
        plain = PLAIN_WORDS.get(event.code, event.code.replace("_", " "))
        line += f"\n{indent}  - {plain} [{event.code}]"
        line += f": {event.detail}" if event.detail else ""
    elif event.detail:
        line += f"\n{indent}  - {event.detail}"
    evidence = ", ".join(f"{k}={v}" for k, v in sorted(event.evidence.items()))
    if evidence:
        line += f"\n{indent}    evidence: {evidence}"
    return line


def unknown_pull(settings: Settings, pr: PullRef) -> str:
    """Why nothing is recorded for ``pr``, and what to do, as far as ``settings`` (the
    configuration this process read) tells."""
    repo = f"{pr.forge}:{pr.full_name}"
    if settings.rules_for(pr.repo) is None:
        return (
            f"nothing is recorded for {pr}, and the configuration read here gives {repo} no "
            "rules: the bot does nothing on a repository without rules. Add "
            f'[repos."{repo}"] (or [defaults]) to reviewbot.toml, or check the name'
        )
    return (
        f"nothing is recorded for {pr}: no delivery about it was gated yet. If one was just "
        f"sent, ask again in a moment; otherwise check that the forge's webhook points at "
        f"/webhooks/{pr.forge} (reviewbot doctor checks the connection)"
    )


@dataclass(frozen=True)
class DeliveryFacts:
    """Everything ``explain DELIVERY_ID`` shows: the journalled delivery (if it was
    accepted), its gate decisions, the review verdicts and merges it led to, and every
    time a delivery of that id was refused at the door."""

    delivery_id: str
    stored: StoredDelivery | None
    decisions: list[DecisionRecord]
    refused: list[RefusedWebhook]
    reviews: list[ReviewDecision]
    merges: list[dict[str, Any]]  # each with "pull": FORGE:OWNER/NAME#N

    @property
    def known(self) -> bool:
        return self.stored is not None or bool(self.refused)

    def text(self) -> str:
        lines: list[str] = []
        stored = self.stored
        if stored is not None:
            lines.append(
                f"Delivery {stored.delivery_id} ({stored.source}"
                f"{' ' + stored.event if stored.event else ''}), "
                f"received {when(stored.received_at)}, {stored.status}."
            )
            if not self.decisions:
                lines.append("  No decision yet: it waits for a worker.")
            lines += [explain_decision(row, indent="  ") for row in self.decisions]
        for merge in self.merges:
            lines.append(
                f"It led to the merge of {merge['pull']} at {merge['head_sha'][:12]} as "
                f"{str(merge['merge_commit_sha'])[:12]} ({merge['method']}, by "
                f"{merge['holder']} under lease epoch {merge['epoch']})."
            )
        if self.reviews:
            lines.append("Review verdicts it led to, newest first:")
            lines += [explain_review(r, indent="  ") for r in self.reviews]
        for r in self.refused:
            event = f" {r.event}" if r.event else ""
            lines.append(
                f"Delivery {r.delivery_id} ({r.forge}{event}) was refused at "
                f"{when(r.received_at)}, before it was recorded: {r.detail} [{r.code}]. "
                "Nothing was done with it; the forge shows it as failed, and it can be "
                "redelivered from the webhook's settings once the cause is fixed."
            )
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        rows = [r.to_json() for r in self.decisions]
        if self.stored is not None:
            body = journal.delivery_json(self.stored, rows)
        else:
            body = {"delivery_id": self.delivery_id, "status": "refused", "decisions": rows}
        return {
            **body,
            "reviews": [r.to_json() for r in self.reviews],
            "merges": self.merges,
            "refused": [r.to_json() for r in self.refused],
        }


def delivery_facts(
    db: Database, clock: Callable[[], float], delivery_id: str, limit: int = 20
) -> DeliveryFacts:
    """What is known of ``delivery_id``: accepted and gated, refused, or nothing."""
    stored = journal.get_delivery(db, delivery_id)
    rows = decisions.for_delivery(db, delivery_id) if stored is not None else []
    refused = refused_webhooks.for_delivery(db, delivery_id, limit=limit)
    store = ReviewStore(db, clock)
    reviews: list[ReviewDecision] = []
    merges: list[dict[str, Any]] = []
    pulls = {(r.forge, r.repo, r.number) for r in rows if r.forge and r.repo and r.number}
    for forge, repo, number in sorted(pulls):
        led = [
            v
            for v in store.decisions(forge, repo, number, limit=limit)
            if v.delivery_id == delivery_id
        ]
        reviews += led
        owner, _, name = repo.partition("/")
        try:
            pr = PullRef(forge, owner, name, number)
        except ValueError:
            continue
        merge = merge_of(db, pr)
        # The merge this delivery led to: at a head it decided on or had reviewed.
        heads = {r.head_sha for r in rows} | {v.head_sha for v in led}
        if merge is not None and merge["head_sha"] in heads:
            shown = repositories.display_name(db, forge, repo)
            merges.append({"pull": f"{forge}:{shown}#{number}", **merge})
    reviews.sort(key=lambda v: v.id, reverse=True)
    return DeliveryFacts(delivery_id, stored, rows, refused, reviews, merges)


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
    lines = [f"{indent}{when(row.decided_at)}  at {row.head_sha[:12]}: {row.decision.upper()}{via}"]
    plain = PLAIN_WORDS.get(row.reason_code, row.reason_code.replace("_", " "))
    detail = f": {row.detail}" if row.detail else ""
    lines.append(f"{indent}  - {plain} [{row.reason_code}]{detail}")
    return "\n".join(lines)


def explain_decision(row: DecisionRecord, *, indent: str = "", with_delivery: bool = False) -> str:
    what = f"{row.forge}:{row.repo}#{row.number}" if row.repo and row.number else "no PR"
    at = f" at {row.head_sha[:12]}" if row.head_sha else ""
    event = f"{row.event}{'/' + row.action if row.action else ''}" if row.event else ""
    via = f" (delivery {row.delivery_id}, {event})" if with_delivery else ""
    lines = [f"{indent}{when(row.decided_at)}  {what}{at}: {row.decision.upper()}{via}"]
    for reason in row.reasons:
        plain = PLAIN_WORDS.get(reason.code, reason.code.replace("_", " "))
        detail = f": {reason.detail}" if reason.detail else ""
        lines.append(f"{indent}  - {plain} [{reason.code}]{detail}")
    return "\n".join(lines)


def when(ts: float) -> str:
    """A record's moment as the explain lines always showed it."""
    return iso(ts, timespec="microseconds")
