"""The review, explain and PR-state calls, written once for every entry path.

Like ``actions.py``: the HTTP routes (``entry.py``, ``reads.py``) and the MCP tools call
these with the caller's token; each checks its scope and the token's binding itself.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import asdict, replace
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from reviewbot.core.clock import iso
from reviewbot.core.errors import Refused
from reviewbot.core.leases import lease_json
from reviewbot.core.models import MAX_NUMBER, PullRef, repo_key
from reviewbot.core.prstate import LeaseLine, PRStateRecords, live_of, parse_pr_state, state_view
from reviewbot.core.quota import RouteClass
from reviewbot.forges.errors import ForgeError, reason_for
from reviewbot.ingress.api import ReviewRequestBody, api_trigger, parse_review_request
from reviewbot.ingress.errors import TriggerError
from reviewbot.runtime.explain import delivery_facts, pull_facts, unknown_pull
from reviewbot.runtime.ingestion.gate_runner import parse_stored_delivery
from reviewbot.runtime.lease_history import read_lease_history
from reviewbot.runtime.merge.facts import configured_checks, read_readiness_facts
from reviewbot.server.actions import current_name, database, merge_parts
from reviewbot.server.auth import bound_target, check_binding, require_scope
from reviewbot.server.quota import admit, token_caller
from reviewbot.service import Service
from reviewbot.store import decisions as decision_store
from reviewbot.store import repositories
from reviewbot.store.decisions import DecisionRecord
from reviewbot.store.journal import NewDelivery, StoredDelivery
from reviewbot.store.reviews import ReviewStore
from reviewbot.store.tokens import TokenInfo

# The newest this many decisions, verdicts and lease-history rows of one PR in an explain.
MAX_EXPLAIN = 100


class PullBody(BaseModel):
    """One pull request: ``FORGE``, ``OWNER/NAME`` (any casing) and its number."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    forge: str = Field(min_length=1, max_length=20)
    repo: str = Field(min_length=3, max_length=200, description="OWNER/NAME, any casing")
    number: int = Field(ge=1, le=MAX_NUMBER)

    @field_validator("repo")
    @classmethod
    def _canonical(cls, value: str) -> str:
        return repo_key(value)


# --- reviews: journaled and gated like every delivery --------------------------------------


async def review_delivery(
    service: Service, info: TokenInfo, raw: bytes, *, source: str = "api"
) -> NewDelivery:
    """A review request, validated now and bound-checked, as the delivery to journal. The
    gate reads it again from the journal (``source`` names the entry path)."""
    require_scope(info, "review")
    delivery_id = f"{source}:{uuid.uuid4().hex}"
    try:
        trigger = api_trigger(
            parse_review_request(raw),
            delivery_id=delivery_id,
            configured_forges=tuple(service.forges),
            sender=info.name,
            source=source,
        )
    except TriggerError as exc:
        raise Refused(exc.detail, code="invalid_request") from None
    await bound_request(service, info, trigger.forge, trigger.repo_full_name)
    return NewDelivery(
        delivery_id=delivery_id,
        source=source,
        body=raw,
        received_at=service.clock(),
        forge=trigger.forge,
        event=trigger.event,
        headers={"X-Reviewbot-Token": info.name},
    )


async def request_review(
    service: Service, info: TokenInfo, body: ReviewRequestBody, *, source: str
) -> dict[str, Any]:
    """Journal a review request; a worker gates it (``explain`` shows the decision)."""
    raw = json.dumps(body.model_dump(exclude_none=True)).encode()
    delivery = await review_delivery(service, info, raw, source=source)
    if service.journal is None:
        raise Refused("this process does not journal deliveries", code="not_found")
    await service.journal.append(delivery)
    return {"delivery_id": delivery.delivery_id, "status": "queued"}


async def bound_request(
    service: Service, info: TokenInfo, forge: str | None, repo: str | None
) -> None:
    """The binding check of a request that names a repository, after resolving the name: a
    renamed repository's old name (an alias) is the repository it now names, so a token bound
    to the old name does not reach the renamed one's PRs."""
    check_binding(info, forge, repo)
    if info.repo is not None and forge and repo:
        db = database(service)
        check_binding(info, forge, await db.run(repositories.resolve, db, forge, repo))


# --- reads ---------------------------------------------------------------------------------


async def pr_state(service: Service, info: TokenInfo, body: PullBody) -> dict[str, Any]:
    """The PR as the forge shows it now, its live leases, the state comment the bot renders
    for it from its records (``None`` before any review decision), and ``canonical``: the
    fields of that comment's ``reviewbot-state`` block (STATE, WHO_IS_NEXT, NEXT_ACTION...),
    from the same core renderer, also before the first decision."""
    require_scope(info, "read")
    body = await current_name(service, body)
    check_binding(info, body.forge, body.repo)
    admit(service, token_caller(info), RouteClass.FORGE_READS)  # it reads the forge live
    forge = service.forges.get(body.forge)
    if forge is None:
        raise Refused(f"no {body.forge} forge is configured", code="forge_not_configured")
    try:
        # One read of the live facts: MERGE_READY is the merge-readiness answer on them.
        facts = await read_readiness_facts(forge, body.repo, body.number)
        bot = await forge.bot_login()
    except ForgeError as exc:
        raise Refused(str(exc), code=reason_for(exc).value) from None
    pull = facts.pull
    api = merge_parts(service)
    leases = await database(service).run(
        lambda: api.leases.list_leases(
            forge=body.forge, repo=body.repo, number=body.number, role=None, live_only=True
        )
    )
    comment = None
    if service.review is not None:
        review = service.review
        comment = await review.store.run(
            review.comments.render, body.forge, body.repo, body.number, facts, bot
        )
    now = api.leases.clock()
    state = "merged" if pull.merged else pull.state
    pr = f"{body.forge}:{body.repo}#{body.number}"
    if comment is not None:
        view = parse_pr_state(comment)  # the very fields an agent reads off the comment
    else:  # before the first review decision the bot posts no comment; the core still says
        configured = configured_checks(service.settings, body.forge, body.repo)
        lines = tuple(
            LeaseLine(x.target.role.value, x.holder, x.phase.value, x.head_sha, iso(x.expires_at))
            for x in leases
        )
        view = state_view(
            PRStateRecords(
                pr=pr,
                pr_state=state,
                head_sha=pull.head_sha,
                author=pull.author or "the author",
                decision=None,
                leases=lines,
                draft=pull.draft,
                live=live_of(facts, configured, bot),
            )
        )
    return {
        "pr": pr,
        "state": state,
        "draft": pull.draft,
        "head_sha": pull.head_sha,
        "author": pull.author,
        "title": pull.title,
        "leases": [lease_json(lease, now) for lease in leases],
        "state_comment": comment,
        "canonical": asdict(view),
    }


async def explain_delivery(service: Service, info: TokenInfo, delivery_id: str) -> dict[str, Any]:
    """A delivery's status, every decision recorded for it, the review verdicts and merge
    it led to, and every time a delivery of that id was refused at the door.

    A token bound to one repository sees only that repository's deliveries; any other is
    answered exactly as a delivery that does not exist, so the answer never tells whether
    another repository's delivery id is known. A refused webhook names no repository (its
    body was never read), so only a token bound to none sees refusals."""
    require_scope(info, "read")
    db = database(service)
    facts = await db.run(delivery_facts, db, service.clock, delivery_id)
    if info.repo is not None:
        facts = replace(facts, refused=[])
    stored = facts.stored
    if not facts.known or (
        stored is not None and not _shown_to(service, info, stored, facts.decisions)
    ):
        raise Refused(f"no delivery {delivery_id!r}", code="not_found")
    return facts.to_json()


def _shown_to(
    service: Service, info: TokenInfo, stored: StoredDelivery, rows: list[DecisionRecord]
) -> bool:
    """Whether ``info`` may see the delivery: every token bound to no repository; a bound
    one when every decision names its repository or, before the gate decided, when the
    delivery itself names it."""
    if info.repo is None:
        return True
    if rows:
        return all(info.allows_repo(row.forge, row.repo) for row in rows)
    try:
        trigger = parse_stored_delivery(stored, tuple(service.forges))
    except TriggerError:
        return False  # nothing shows it belongs to the bound repository
    return info.allows_repo(trigger.forge, trigger.repo_full_name)


async def explain_pull(
    service: Service, info: TokenInfo, forge: str | None, repo: str | None, number: int | None
) -> dict[str, Any]:
    """Decisions, newest first; for one PR also its review verdicts."""
    require_scope(info, "read")
    forge, repo = bound_target(info, forge, repo)
    db = database(service)
    rows = await db.run(decision_store.for_pull, db, forge=forge, repo=repo, number=number)
    shown = await db.run(repositories.display_names, db)
    answer: dict[str, Any] = {
        "decisions": [
            {**r.to_json(), "display_name": shown.get((r.forge, r.repo), r.repo)} for r in rows
        ]
    }
    if forge and repo and number is not None:
        # For one PR, the sections `reviewbot explain` shows: review verdicts (what the
        # checks said and what was posted), the merge, the reviewers' findings, the lease
        # history and its merge-queue events.
        reviews = ReviewStore(db, service.clock)
        verdicts = await db.run(reviews.decisions, forge, repo, number)
        answer["reviews"] = [v.to_json() for v in verdicts]
        owner, _, name = repo.partition("/")
        try:
            pr = PullRef(forge, owner, name, number)
        except ValueError as exc:
            raise Refused(str(exc), code="invalid_request") from None
        facts = await db.run(pull_facts, db, service.clock, pr, MAX_EXPLAIN)
        history: list[dict[str, Any]] = []
        if service.merge is not None:
            leases = service.merge.leases
            trail = await leases.run(lambda: read_lease_history(leases, pr, limit=MAX_EXPLAIN))
            history = trail.to_json()["history"]
        answer.update(
            pull=str(pr),
            shown=facts.shown,
            merge=facts.merge,
            after_merge=facts.after_merge_json(),
            findings=facts.findings_json(),
            lease_history=history,
            queue=[event.to_json() for event in facts.queue],
        )
        if not facts.known and not history:
            answer["note"] = unknown_pull(service.settings, pr)
    return answer
