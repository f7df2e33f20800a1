"""``reviewbot review FORGE:OWNER/REPO#N``: run the review pipeline once for the live head.

Reads the PR's live head, evaluates its required checks under the reviewer lease, records
the verdict, posts the native review at the head SHA (exactly once: a review this
pipeline already posted for the same head and verdict is never posted again) and updates
the PR's state comment. Prints the verdict and what was posted; ``--json`` for scripts.
A post that hits a forge outage or a rate limit is retried for up to ``--wait`` seconds;
what is still pending after that is posted by a running server's outbox drainer. While the
forge does not answer, a line on stderr says what the command waits for; a forge still
unreachable after the bounded retries ends the command with one line and exit status 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from reviewbot.cli import CommandError, invoked_as
from reviewbot.config import Settings, load_settings
from reviewbot.core.models import PullRef
from reviewbot.core.reasons import ReasonCode
from reviewbot.workflowdb.access import DBAccess, effective_access, require

if TYPE_CHECKING:
    from reviewbot.forges.http import ForgeWait
    from reviewbot.service import ReviewParts


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "review",
        help="review one pull request now (verdict from its required checks)",
        description=__doc__,
        epilog="Example:\n  reviewbot review gitea:acme/api#12\n"
        "  reviewbot review github:acme/api#7 --json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("pr", metavar="FORGE:OWNER/REPO#N", help="the pull request")
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")
    parser.add_argument(
        "--wait",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="how long to keep retrying a post that failed transiently (default 60)",
    )
    parser.set_defaults(func=_review)


def _review(args: argparse.Namespace) -> int:
    try:
        ref = PullRef.parse(args.pr)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    settings = load_settings()
    require(effective_access(settings.db_access), DBAccess.READ_WRITE)
    result = asyncio.run(_run(settings, ref, max(0.0, args.wait)))
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
    elif result["decision"]["reason_code"] == ReasonCode.FORGE_UNREACHABLE.value:
        raise CommandError(
            f"gave up: the forge at {forge_url(settings, ref.forge)} did not answer "
            f"({result['decision']['detail']}); is it up, and is the URL right? "
            f"({invoked_as()} explain {ref} shows the recorded decision)"
        )
    else:
        _print(ref, result)
    decision = result["decision"]["decision"]
    return 1 if decision in ("error", "lease_held") else 0


def forge_url(settings: Settings, forge: str) -> str:
    """The address the settings give ``forge`` (what a person would check); a
    :class:`~reviewbot.config.ConfigError` naming the known forges for any other name."""
    # Start-up cost: the adapters (httpx) load only when a review runs.
    from reviewbot.forges.kinds import adapter_kind

    return adapter_kind(forge).address(settings)


def say_waiting(url: str) -> Callable[[ForgeWait], None]:
    """A line on stderr for each wait for the forge, so a slow or absent forge is not silence."""

    # Start-up cost: the forge HTTP module (httpx) loads only when a review runs.
    from reviewbot.forges.http import NO_ANSWER_YET

    def say(wait: ForgeWait) -> None:
        if wait.reason == NO_ANSWER_YET:
            what = f"{NO_ANSWER_YET}; attempt {wait.attempt} of {wait.attempts}"
        else:
            what = (
                f"retrying: {wait.reason}; attempt {wait.attempt} of {wait.attempts} failed, "
                f"next in {wait.wait_s:g} s"
            )
        print(f"reviewbot: waiting for the forge at {url} ({what})", file=sys.stderr, flush=True)

    return say


async def _run(settings: Settings, ref: PullRef, wait_s: float) -> dict[str, Any]:
    # Start-up cost: every command's module loads with `reviewbot --help`; these only here.
    from reviewbot.forges.factory import make_forge
    from reviewbot.server.tools_socket import service_tools_sockets
    from reviewbot.service import Parts, build_service, configure_logging

    # The result (or the one-line refusal) is printed already: the log (stderr) shows only
    # unexpected errors, unless a level is configured.
    configure_logging(settings, level=None if "log_level" in settings.model_fields_set else "error")
    forge = make_forge(settings, ref.forge, on_wait=say_waiting(forge_url(settings, ref.forge)))
    service = build_service(
        settings,
        forges={ref.forge: forge},
        parts=Parts.REVIEW,
        client="reviewbot-cli",
        tools_endpoint=service_tools_sockets,  # each review run's own tools socket
    )
    try:
        async with service:
            parts = service.review
            assert parts is not None
            return await _review_once(parts, ref, wait_s)
    finally:
        await forge.aclose()


async def _review_once(parts: ReviewParts, ref: PullRef, wait_s: float) -> dict[str, Any]:
    # Start-up cost, as above.
    from reviewbot.runtime.review.pipeline import ReviewRequest

    outcome = await parts.pipeline.review(
        ReviewRequest(ref.forge, ref.full_name, ref.number, source="cli", event="cli")
    )
    store = parts.outbox
    deadline = time.monotonic() + wait_s
    retried = False
    while True:
        rows = await store.db.run(lambda: [store.get(r.id) for r in outcome.outbox])
        pending = [row for row in rows if row is not None and row.status == "pending"]
        if not pending or time.monotonic() >= deadline:
            break
        due = min(row.next_attempt_at for row in pending)
        await asyncio.sleep(min(max(0.0, due - time.time()), deadline - time.monotonic()))
        for row in pending:
            post = await parts.drainer.post(row.id)
            if post is not None:
                outcome.posts.append(post)
                retried = True
    outcome.outbox = await store.db.run(lambda: [store.get(r.id) or r for r in outcome.outbox])
    if retried:
        outcome.state_comment = await parts.comments.sync(ref.forge, ref.full_name, ref.number)
    result: dict[str, Any] = outcome.to_json()
    result["pr"] = str(ref)
    result["worker"] = parts.worker
    return result


def _print(ref: PullRef, result: dict[str, Any]) -> None:
    d = result["decision"]
    print(f"{ref} at {d['head_sha'][:12] or '?'}: {d['decision']} ({d['reason_code']})")
    if d["detail"]:
        print(f"  {d['detail']}")
    for blocker in d["blockers"]:
        print(f"  blocker: {blocker}")
    if not result["outbox"]:
        print("posted: nothing")
    for row in result["outbox"]:
        where = f" as review {row['forge_review_id']}" if row["forge_review_id"] else ""
        note = f" ({row['last_error']})" if row["last_error"] and row["status"] != "posted" else ""
        print(f"posted: {row['verdict']} {row['status']}{where}{note}")
    if result.get("state_comment"):
        print(f"state comment: {result['state_comment']}")
