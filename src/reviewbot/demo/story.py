"""The demo's scripted story: seven steps, each played through real signed webhooks and
checked against what the forge and the store show afterwards ("did what it said")."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from reviewbot.demo.merge import merge_through_lease
from reviewbot.demo.steps import StepFailed, expect, short
from reviewbot.demo.world import BOT, GITEA_REPO, GITHUB_REPO, DemoWorld, Timeout
from reviewbot.sim import Delivery
from reviewbot.sim.webhooks import github_signature_headers

Say = Callable[[str], None]

# Faults a test (or a curious user) can inject to see a step fail: name -> what breaks.
FAULTS = {
    "review-refused": "the forge refuses every review the bot posts on github:acme/api (403)",
}


@dataclass
class StepResult:
    number: int
    title: str
    ok: bool
    lines: list[str] = field(default_factory=list)
    expected: str = ""
    happened: str = ""
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "step": self.number,
            "title": self.title,
            "ok": self.ok,
            "lines": self.lines,
            "seconds": round(self.seconds, 3),
        }
        if not self.ok:
            out["expected"] = self.expected
            out["happened"] = self.happened
        return out


class Story:
    """Plays the steps in order; stops at the first step that did not do what it said."""

    def __init__(self, world: DemoWorld, say: Say, *, fault: str | None = None) -> None:
        self.world = world
        self.say = say
        self.fault = fault
        self.results: list[StepResult] = []
        self._lines: list[str] = []
        # What later steps build on.
        self.gh_number = 0
        self.first_head = ""
        self.second_head = ""
        self.gitea_number = 0
        self.gitea_head = ""
        self.merge_commit = ""
        self.last_github_delivery: Delivery | None = None

    @property
    def steps(self) -> list[tuple[str, Callable[[], Awaitable[None]]]]:
        return [
            ("A GitHub pull request opens while its checks are still running", self.pending),
            ("The checks turn green", self.green),
            ("A second commit is pushed", self.pushed),
            ("A required check fails on the new commit", self.failing),
            ("A Gitea pull request is approved and merged at its pinned head", self.merged),
            ("A forged delivery with a bad signature arrives", self.forged),
            ("A webhook is delivered a second time", self.redelivered),
        ]

    def note(self, line: str) -> None:
        self._lines.append(line)
        self.say(f"  {line}")

    async def play(self) -> list[StepResult]:
        steps = self.steps
        if self.fault is not None:
            self._inject(self.fault)
        for number, (title, run) in enumerate(steps, start=1):
            self.say(f"\nStep {number}/{len(steps)}  {title}")
            self._lines = []
            started = time.monotonic()
            result = StepResult(number, title, ok=True)
            try:
                await run()
            except StepFailed as exc:
                result.ok, result.expected, result.happened = False, exc.expected, exc.happened
            except Timeout as exc:
                result.ok, result.expected, result.happened = False, "an outcome", str(exc)
            result.seconds = time.monotonic() - started
            result.lines = list(self._lines)
            self.results.append(result)
            if not result.ok:
                self.say(f"  FAILED: expected {result.expected}")
                self.say(f"          happened: {result.happened}")
                break
            self.say(f"  done: did what it said ({result.seconds:.2f} s)")
        return self.results

    def _inject(self, fault: str) -> None:
        if fault == "review-refused":
            self.world.sim.faults.add(
                forge="github",
                method="POST",
                path=f"/repos/{GITHUB_REPO}/pulls/*/reviews",
                status=403,
                times=None,
            )
            self.say(f"(fault injected: {FAULTS[fault]})")
        else:
            raise ValueError(f"unknown fault {fault!r}; known: {', '.join(FAULTS)}")

    # -- helpers ---------------------------------------------------------------------------

    async def deliver(self, sent: Awaitable[Delivery], what: str) -> Delivery:
        delivery = await sent
        if delivery.forge == "github":
            self.last_github_delivery = delivery
        answer = _answer(delivery)
        self.note(f"the simulator sends a signed {what} webhook: the bot answers {answer}")
        expect(
            delivery.status in (200, 202),
            f"the bot to accept the signed {what} delivery",
            f"it answered {answer}",
        )
        await self.world.settle(delivery.id)
        return delivery

    def _decisions_text(self, forge: str, repo: str, number: int) -> str:
        rows = self.world.decisions(forge, repo, number)
        listed = ", ".join(f"{d.decision} at {short(d.head_sha)}" for d in rows) or "none"
        last = f" (the last: {rows[-1].detail})" if rows and rows[-1].detail else ""
        return f"decisions recorded: {listed}{last}"

    def _reviews_text(self, forge: str, repo: str, number: int) -> str:
        rows = self.world.bot_reviews(forge, repo, number)
        listed = ", ".join(f"{r.state} at {short(r.commit_id)}" for r in rows) or "none"
        return f"reviews by {BOT}: {listed}"

    def _happened(self, forge: str, repo: str, number: int) -> Callable[[], str]:
        return lambda: (
            f"{self._decisions_text(forge, repo, number)}; "
            f"{self._reviews_text(forge, repo, number)}"
        )

    # -- the steps -------------------------------------------------------------------------

    async def pending(self) -> None:
        w, sim = self.world, self.world.sim
        pr = sim.open_pr(
            "github", GITHUB_REPO, author="alice", head_ref="rate-limit", title="Add rate limiting"
        )
        self.gh_number, self.first_head = pr.number, pr.head_sha
        sim.set_status("github", GITHUB_REPO, pr.head_sha, "ci/test", "pending")
        self.note(
            f"alice opens github:{GITHUB_REPO}#{pr.number} at {short(pr.head_sha)}; "
            "ci/test is pending and ci/lint has not reported yet"
        )
        await self.deliver(
            sim.deliver_pull_request("github", GITHUB_REPO, pr.number, action="opened"),
            "pull_request (opened)",
        )
        latest = w.latest("github", GITHUB_REPO, pr.number)
        happened = self._happened("github", GITHUB_REPO, pr.number)
        expect(
            latest is not None
            and latest.decision == "waiting"
            and latest.head_sha == pr.head_sha
            and "ci/test" in latest.pending
            and "ci/lint" in latest.missing,
            f"a WAITING decision at {short(pr.head_sha)} naming ci/test (pending) and ci/lint "
            "(missing)",
            happened,
        )
        assert latest is not None
        expect(
            not w.bot_reviews("github", GITHUB_REPO, pr.number),
            "no review while checks are pending",
            happened,
        )
        self.note(f"the bot waits: WAITING at {short(pr.head_sha)} ({latest.detail})")
        self.note("no review is posted while a required check is pending or missing")

    async def green(self) -> None:
        w, sim = self.world, self.world.sim
        number, head = self.gh_number, self.first_head
        for context in ("ci/test", "ci/lint"):
            status = sim.set_status("github", GITHUB_REPO, head, context, "success")
            self.note(f"CI reports {context}: success at {short(head)}")
            await self.deliver(
                sim.deliver_status("github", GITHUB_REPO, status.id), f"status ({context})"
            )
        happened = self._happened("github", GITHUB_REPO, number)
        reviews = w.bot_reviews("github", GITHUB_REPO, number)
        expect(
            [(r.state, r.commit_id) for r in reviews] == [("APPROVED", head)],
            f"one APPROVE review by {BOT} at {short(head)}",
            happened,
        )
        latest = w.latest("github", GITHUB_REPO, number)
        expect(
            latest is not None and latest.decision == "approve" and latest.head_sha == head,
            f"an APPROVE decision at {short(head)}",
            happened,
        )
        assert latest is not None
        self.note(f"the bot approves: APPROVE at {short(head)} ({latest.detail})")
        self.note(f"the review on the forge is pinned to commit {short(reviews[0].commit_id)}")

    async def pushed(self) -> None:
        w, sim = self.world, self.world.sim
        number, old = self.gh_number, self.first_head
        new = sim.push("github", GITHUB_REPO, number, message="Tune the limits")
        self.second_head = new
        self.note(f"alice pushes a second commit: the head moves {short(old)} -> {short(new)}")
        await self.deliver(
            sim.deliver_pull_request(
                "github", GITHUB_REPO, number, action="synchronize", before=old
            ),
            "pull_request (synchronize)",
        )
        happened = self._happened("github", GITHUB_REPO, number)
        rows = w.decisions("github", GITHUB_REPO, number)
        expect(
            any(d.decision == "superseded" and d.head_sha == old for d in rows),
            f"the decision at {short(old)} marked SUPERSEDED",
            happened,
        )
        latest = w.latest("github", GITHUB_REPO, number)
        expect(
            latest is not None and latest.head_sha == new and latest.decision == "waiting",
            f"a new decision (WAITING) for the new head {short(new)}",
            happened,
        )
        assert latest is not None
        approvals = [
            r for r in w.bot_reviews("github", GITHUB_REPO, number) if r.state == "APPROVED"
        ]
        expect(
            all(r.commit_id == old for r in approvals),
            f"no approval at {short(new)}",
            happened,
        )
        self.note(
            f"the approval at {short(old)} no longer counts: it names {short(old)}, "
            f"the pull request's head is {short(new)} (decision SUPERSEDED at {short(old)})"
        )
        self.note(f"the new head gets its own decision: WAITING at {short(new)} ({latest.detail})")

    async def failing(self) -> None:
        w, sim = self.world, self.world.sim
        number, head = self.gh_number, self.second_head
        status = sim.set_status("github", GITHUB_REPO, head, "ci/test", "success")
        self.note(f"CI reports ci/test: success at {short(head)}")
        await self.deliver(sim.deliver_status("github", GITHUB_REPO, status.id), "status (ci/test)")
        url = f"https://ci.example.com/acme/api/lint/{uuid.uuid4().hex[:6]}"
        status = sim.set_status("github", GITHUB_REPO, head, "ci/lint", "failure", target_url=url)
        self.note(f"CI reports ci/lint: failure at {short(head)} ({url})")
        await self.deliver(sim.deliver_status("github", GITHUB_REPO, status.id), "status (ci/lint)")
        happened = self._happened("github", GITHUB_REPO, number)
        at_head = [r for r in w.bot_reviews("github", GITHUB_REPO, number) if r.commit_id == head]
        expect(
            len(at_head) == 1
            and at_head[0].state == "CHANGES_REQUESTED"
            and "ci/lint" in at_head[0].body,
            f"one REQUEST_CHANGES review at {short(head)} naming ci/lint",
            happened,
        )
        latest = w.latest("github", GITHUB_REPO, number)
        expect(
            latest is not None
            and latest.decision == "request_changes"
            and latest.failed == ("ci/lint",),
            "a REQUEST_CHANGES decision naming ci/lint as the failed check",
            happened,
        )
        assert latest is not None
        self.note(f"the bot requests changes: REQUEST_CHANGES at {short(head)} ({latest.detail})")
        self.note("the review names the failing check and links its run")

    async def merged(self) -> None:
        w, sim = self.world, self.world.sim
        pr = sim.open_pr(
            "gitea", GITEA_REPO, author="bob", head_ref="fix-footer", title="Fix the footer"
        )
        self.gitea_number, self.gitea_head = pr.number, pr.head_sha
        sim.set_status("gitea", GITEA_REPO, pr.head_sha, "ci/test", "success")
        self.note(
            f"bob opens gitea:{GITEA_REPO}#{pr.number} at {short(pr.head_sha)}; ci/test is "
            "green already"
        )
        await self.deliver(
            sim.deliver_pull_request("gitea", GITEA_REPO, pr.number, action="opened"),
            "pull_request (opened)",
        )
        happened = self._happened("gitea", GITEA_REPO, pr.number)
        reviews = w.bot_reviews("gitea", GITEA_REPO, pr.number)
        expect(
            [(r.state, r.commit_id) for r in reviews] == [("APPROVED", pr.head_sha)],
            f"one APPROVE review by {BOT} at {short(pr.head_sha)}",
            happened,
        )
        self.note(f"the bot approves: APPROVE at {short(pr.head_sha)}")
        await merge_step(self, pr.number, pr.head_sha)

    async def forged(self) -> None:
        w, sim = self.world, self.world.sim
        template = self.last_github_delivery
        expect(template is not None, "an earlier GitHub delivery to forge", "none was sent")
        assert template is not None
        before_size = w.journal_size()
        before_refused = await w.counter(
            "reviewbot_deliveries_refused_total", source="github", reason="bad_signature"
        )
        forged_id = str(uuid.uuid4())
        headers = github_signature_headers("not-the-webhook-secret", template.body)
        headers["X-GitHub-Delivery"] = forged_id
        self.note(
            f"someone replays a status payload signed with the wrong secret (delivery {forged_id})"
        )
        delivery = await sim.deliver_raw(
            "github", template.event, template.body, headers_override=headers
        )
        answer = _answer(delivery)
        self.note(f"the bot answers {answer}")
        expect(delivery.status == 401, "401 (signature invalid)", f"it answered {answer}")
        await w.settle()
        after_refused = await w.counter(
            "reviewbot_deliveries_refused_total", source="github", reason="bad_signature"
        )
        expect(
            w.journal_size() == before_size and not w.in_journal(forged_id),
            "nothing recorded in the delivery journal",
            f"the journal went from {before_size} to {w.journal_size()} deliveries",
        )
        expect(
            after_refused == before_refused + 1,
            "the refused-deliveries counter (bad_signature) to count it",
            f"it went from {before_refused:g} to {after_refused:g}",
        )
        self.note(
            f"nothing is recorded: the journal still holds {before_size} deliveries; only the "
            "counter reviewbot_deliveries_refused_total{reason=bad_signature} went up "
            f"({before_refused:g} -> {after_refused:g})"
        )

    async def redelivered(self) -> None:
        w, sim = self.world, self.world.sim
        original = self.last_github_delivery
        expect(original is not None, "an earlier GitHub delivery to redeliver", "none was sent")
        assert original is not None
        number = self.gh_number
        decisions_before = len(w.decisions("github", GITHUB_REPO, number))
        reviews_before = len(w.bot_reviews("github", GITHUB_REPO, number))
        duplicates_before = await w.counter("reviewbot_deliveries_duplicate_total", source="github")
        self.note(f"GitHub redelivers delivery {original.id} (same id, same bytes)")
        again = await sim.redeliver(original)
        answer = _answer(again)
        self.note(f"the bot answers {answer}")
        expect(
            again.status == 200 and b'"duplicate"' in again.response_body,
            "200 with status duplicate",
            f"it answered {answer}",
        )
        await w.settle()
        happened = self._happened("github", GITHUB_REPO, number)
        expect(
            len(w.decisions("github", GITHUB_REPO, number)) == decisions_before
            and len(w.bot_reviews("github", GITHUB_REPO, number)) == reviews_before,
            f"no new decision and no second review (still {reviews_before} reviews)",
            happened,
        )
        duplicates = await w.counter("reviewbot_deliveries_duplicate_total", source="github")
        expect(
            duplicates == duplicates_before + 1,
            "the duplicate-deliveries counter to count it",
            f"it went from {duplicates_before:g} to {duplicates:g}",
        )
        self.note(
            f"ignored as a duplicate: still {reviews_before} reviews by {BOT} and "
            f"{decisions_before} decisions on github:{GITHUB_REPO}#{number}"
        )


def _answer(delivery: Delivery) -> str:
    if delivery.status is None:
        return f"nothing ({delivery.error})"
    text = delivery.response_body.decode("utf-8", "replace")
    try:
        body = json.loads(text)
    except ValueError:
        return str(delivery.status)
    if isinstance(body, dict):
        word = body.get("status") or body.get("error") or ""
        return f"{delivery.status} {word}".strip()
    return str(delivery.status)


async def merge_step(story: Story, number: int, head: str) -> None:
    """Merged at the pinned head through the merger lease (see :mod:`reviewbot.demo.merge`)."""

    await merge_through_lease(story, number, head)
