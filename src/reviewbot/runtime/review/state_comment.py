"""The canonical PR state comment: one per PR, edited in place, rendered from the records.

:class:`StateComments` is shared by the review pipeline, the outbox drainer (after a row is
finished) and the merger (after a merge or a moved head); it takes the PR's lock, so it
never races an evaluation of the same PR.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from reviewbot.config import Settings
from reviewbot.core.clock import iso
from reviewbot.core.lease_history import EndReason, LeaseEvent
from reviewbot.core.merge import PrFacts
from reviewbot.core.models import PullRequestSnapshot, RepoRef
from reviewbot.core.prstate import (
    STATE_MARKER,
    Change,
    DeliveryLine,
    LeaseLine,
    PostedReview,
    PRStateRecords,
    live_of,
    render_pr_state,
)
from reviewbot.forges.base import Forge
from reviewbot.forges.errors import ForgeError, NotFound
from reviewbot.runtime.merge.facts import configured_checks, read_readiness_facts
from reviewbot.runtime.pull_locks import PullLocks
from reviewbot.runtime.queue.spot import queue_line
from reviewbot.runtime.review.outbox import ReviewerLeases
from reviewbot.store import repositories
from reviewbot.store.queue import QueueStore
from reviewbot.store.review_outbox import OutboxRow, OutboxStore
from reviewbot.store.reviews import ReviewDecision, ReviewStore, body_sha256
from reviewbot.store.state_comments import StateCommentStore

log = logging.getLogger(__name__)

# The verdict of an outbox row that only reports checks missing past their grace period.
MISSING_CHECKS = "missing_checks"


class StateComments:
    def __init__(
        self,
        settings: Settings,
        store: ReviewStore,
        outbox: OutboxStore,
        rows: StateCommentStore,
        forges: Mapping[str, Forge],
        leases: ReviewerLeases,
        locks: PullLocks,
    ) -> None:
        """``store``: the decisions the comment reports; ``outbox``: the reviews posted or
        queued; ``rows``: which comment is the PR's and what it last said."""
        self.settings = settings
        self.store = store
        self.outbox = outbox
        self.rows = rows
        self.forges = forges
        self.leases = leases
        self.locks = locks

    async def sync(
        self, forge: str, repo: str, number: int, pull: PullRequestSnapshot | None = None
    ) -> str:
        async with self.locks.hold(forge, repo, number):
            return await self.sync_locked(forge, repo, number, pull)

    async def sync_locked(
        self,
        forge_name: str,
        repo: str,
        number: int,
        pull: PullRequestSnapshot | None,
        live: PullRequestSnapshot | None = None,
    ) -> str:
        """``pull``: the pull as the caller knows it (a webhook's may be old); ``live``: one
        the caller read from the forge a moment ago, which serves as the read of the pull."""
        forge = self.forges[forge_name]
        try:
            # MERGE_READY and the other live fields: one read, judged as a merge would be.
            facts = await read_readiness_facts(forge, repo, number, pull, live=live)
            bot = await forge.bot_login()
            body = await self.store.run(self.render, forge_name, repo, number, facts, bot)
            if body is None:
                return "unchanged"
            known = await self.rows.run(self.rows.get, forge_name, repo, number)
            if known is not None:
                comment_id, sha = known
                if sha == body_sha256(body):
                    return "unchanged"
                try:
                    await forge.edit_comment(repo, comment_id, body)
                except NotFound:
                    known = None  # deleted by someone: look for another, else create
                else:
                    await self.rows.run(self.rows.save, forge_name, repo, number, comment_id, body)
                    return "edited"
            found = await forge.find_comment(repo, number, STATE_MARKER)
            if found is not None:
                if found.body != body:
                    await forge.edit_comment(repo, found.id, body)
                await self.rows.run(self.rows.save, forge_name, repo, number, found.id, body)
                return "edited"
            created = await forge.create_comment(repo, number, body)
            await self.rows.run(self.rows.save, forge_name, repo, number, created.id, body)
            return "created"
        except ForgeError as exc:
            log.warning("state comment of %s:%s#%s: %s", forge_name, repo, number, exc)
            return "failed"

    def render(
        self,
        forge: str,
        repo: str,
        number: int,
        facts: PrFacts | None,
        bot_login: str | None = None,
    ) -> str | None:
        """The state comment from the records and the PR's live ``facts`` (``None`` before
        any decision); ``bot_login`` finds the bot's own review at the head."""
        latest = self.store.latest_verdict(forge, repo, number)
        if latest is None:
            return None
        pull = None if facts is None else facts.pull
        head = latest.head_sha
        pr_state = "open"
        author = ""
        draft = False
        if pull is not None:
            head = pull.head_sha if pull.head_sha else head
            pr_state = "merged" if pull.merged else pull.state
            author = pull.author
            draft = pull.draft
        decision = latest if latest.head_sha == head else None
        rows = [
            r
            for r in self.outbox.for_pull(forge, repo, number)
            if r.head_sha == head and r.verdict != MISSING_CHECKS
        ]
        review = None
        if rows:
            newest = rows[-1]
            review = PostedReview(
                newest.verdict, newest.head_sha, newest.status, newest.forge_review_id
            )
        leases = tuple(
            LeaseLine(
                lease.target.role.value,
                lease.holder,
                lease.phase.value,
                lease.head_sha,
                iso(lease.expires_at),
            )
            for lease in self.leases.active(forge, repo, number)
        )
        seen = self.rows.last_delivery(forge, repo, number)
        delivery = None
        if seen is not None:
            delivery = DeliveryLine(
                str(seen["delivery_id"]),
                str(seen["source"]),
                str(seen["event"]),
                seen["action"],
                iso(float(seen["received_at"]), timespec="microseconds"),
            )
        rules = self.settings.rules_for(RepoRef.parse(repo, forge=forge))
        configured = configured_checks(self.settings, forge, repo)
        live = None if facts is None else live_of(facts, configured, bot_login)
        queue = ""
        if rules is not None:
            store = QueueStore(self.store.db, self.store.clock)
            queue = queue_line(store, rules.merge_queue, forge, repo, number, self.store.clock())
        records = PRStateRecords(
            pr=f"{forge}:{repositories.display_name(self.store.db, forge, repo)}#{number}",
            pr_state=pr_state,
            head_sha=head,
            author=author or "the author",
            decision=decision.decision if decision else None,
            decision_detail=decision.detail if decision else "",
            blockers=decision.blockers if decision else (),
            reason_code=decision.reason_code if decision else "",
            review=review,
            leases=leases,
            last_delivery=delivery,
            automerge=bool(rules and rules.automerge),
            draft=draft,
            changes=self._changes(forge, repo, number, latest, rows),
            live=live,
            queue=queue,
        )
        return render_pr_state(records)

    def _changes(
        self, forge: str, repo: str, number: int, latest: ReviewDecision, rows: list[OutboxRow]
    ) -> tuple[Change, ...]:
        """What happened lately, from the records: the verdict, the posted review and the
        last lease event that was not a renewal; the comment shows the newest."""
        why = f"{latest.reason_code}: {latest.detail}" if latest.detail else latest.reason_code
        changes = [
            Change(
                latest.decided_at,
                "reviewbot",
                f"evaluated head {latest.head_sha[:12]}: {latest.decision}",
                why[:300],
            )
        ]
        for row in rows:
            if row.status == "posted" and row.finished_at is not None:
                changes.append(
                    Change(
                        row.finished_at,
                        "reviewbot",
                        f"posted the {row.verdict} review at {row.head_sha[:12]}",
                        f"review {row.forge_review_id}" if row.forge_review_id else "",
                    )
                )
        # Renewals, and the bot's reviewer releasing its lease after every review, are routine.
        events = [
            e
            for e in self.leases.history(forge, repo, number)
            if e.event is not LeaseEvent.RENEWED and e.reason != EndReason.REVIEWED
        ]
        if events:
            e = events[-1]
            changes.append(
                Change(
                    e.at,
                    e.actor or e.holder,
                    f"{e.target.role.value} lease {e.event.value}: {e.holder}",
                    e.reason,
                )
            )
        return tuple(changes)
