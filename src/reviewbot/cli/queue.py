"""``reviewbot queue enqueue|status|dequeue|run|control|predict``: the merge queue from a shell.

``enqueue FORGE:OWNER/REPO#N [--head SHA]`` admits the PR into the queue of its base branch
(at exactly SHA when given: a moved head is refused ``head_moved``) and runs one pass, which
builds its car; ``status FORGE:OWNER/REPO [--base BRANCH]`` prints the entries and the cars in
flight; ``dequeue FORGE:OWNER/REPO#N`` takes the PR out (``dequeued``); ``run
FORGE:OWNER/REPO [--base BRANCH]`` runs one pass (CI results read, landings, new cars);
``control FORGE:OWNER/REPO --base BRANCH [--pause|--resume] [--drain|--no-drain]`` pauses
(nothing is admitted, starts or lands) or resumes a queue, or drains it (no new admissions,
the queued run to the end); ``predict FORGE:OWNER/REPO --base BRANCH FILE...`` tells which
queued PRs and trains a change to those files would overlap, before it is written (``-``
reads the paths from stdin). A refusal prints its code and exits with status 1. Uses the same
settings and store as ``reviewbot serve``; every change is made under the base branch's
merge lane.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import Any

from reviewbot.cli import CommandError
from reviewbot.cli.lease import parse_pr
from reviewbot.config import Settings, load_settings
from reviewbot.core.models import RepoRef
from reviewbot.workflowdb.access import DBAccess, effective_access, require


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "queue",
        help="the merge queue: enqueue, status, dequeue, run a pass",
        description=__doc__,
        epilog="Examples:\n  reviewbot queue enqueue gitea:acme/api#12 --head 3f2c9e1d...\n"
        "  reviewbot queue status github:acme/api --json\n"
        "  reviewbot queue dequeue github:acme/api#7",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="queue_command", metavar="ACTION", required=True)
    examples = {
        "enqueue": "reviewbot queue enqueue gitea:acme/api#12 --head 3f2c9e1d...",
        "dequeue": "reviewbot queue dequeue github:acme/api#7",
        "status": "reviewbot queue status github:acme/api --base main",
        "run": "reviewbot queue run gitea:acme/api",
        "predict": "reviewbot queue predict gitea:acme/api --base main src/api/views.py",
        "control": "reviewbot queue control gitea:acme/api --base main --pause",
    }

    def action_parser(name: str, text: str) -> argparse.ArgumentParser:
        made: argparse.ArgumentParser = actions.add_parser(
            name,
            help=text,
            description=text,
            epilog=f"Example:\n  {examples[name]}",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        return made

    enqueue = action_parser("enqueue", "admit a PR into its base branch's queue")
    enqueue.add_argument("pr", metavar="FORGE:OWNER/REPO#N")
    enqueue.add_argument("--head", metavar="SHA", help="the head the PR must be at")
    enqueue.add_argument("--priority", action="store_true", help="to the head of its train")
    dequeue = action_parser("dequeue", "take a PR out of its queue")
    dequeue.add_argument("pr", metavar="FORGE:OWNER/REPO#N")
    for name, text in (("status", "entries and cars of a repository"), ("run", "one pass")):
        action = action_parser(name, text)
        action.add_argument("repo", metavar="FORGE:OWNER/REPO")
        action.add_argument("--base", metavar="BRANCH", help="one base branch's queue")
    predict = action_parser("predict", "which queued PRs and trains a change would overlap")
    predict.add_argument("repo", metavar="FORGE:OWNER/REPO")
    predict.add_argument("--base", metavar="BRANCH", required=True, help="its base branch")
    predict.add_argument("files", nargs="+", metavar="FILE", help="paths; - reads stdin")
    predict.set_defaults(func=_predict)
    control = action_parser("control", "pause or resume, drain or stop draining a queue")
    control.add_argument("repo", metavar="FORGE:OWNER/REPO")
    control.add_argument("--base", metavar="BRANCH", required=True, help="its base branch")
    pause = control.add_mutually_exclusive_group()
    pause.add_argument("--pause", dest="paused", action="store_const", const=True)
    pause.add_argument("--resume", dest="paused", action="store_const", const=False)
    drain = control.add_mutually_exclusive_group()
    drain.add_argument("--drain", dest="draining", action="store_const", const=True)
    drain.add_argument("--no-drain", dest="draining", action="store_const", const=False)
    for action in actions.choices.values():
        action.add_argument("--json", action="store_true", help="print JSON for scripts")
    parser.set_defaults(func=_queue)


def _queue(args: argparse.Namespace) -> int:
    settings = load_settings()
    need = DBAccess.READ if args.queue_command == "status" else DBAccess.READ_WRITE
    require(effective_access(settings.db_access), need)
    result = asyncio.run(_run(settings, args))
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        _show(args.queue_command, result)
    return 0


def _predict(args: argparse.Namespace) -> int:
    """Read-only: the store's queued entries and the repository's rules, no lane taken."""
    # Start-up cost: every command's module loads with `reviewbot --help`; these only here.
    from reviewbot.core.errors import Refused
    from reviewbot.runtime.queue.predict import MAX_FILES, predict, prediction_json
    from reviewbot.store import repositories
    from reviewbot.store.queue import QueueStore
    from reviewbot.workflowdb.bootstrap import open_existing_store

    try:
        ref = RepoRef.parse(args.repo)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    files = [f for f in args.files if f != "-"]
    if "-" in args.files:
        files += [line.strip() for line in sys.stdin if line.strip()]
    if not files or len(files) > MAX_FILES:
        raise CommandError(f"give between 1 and {MAX_FILES} paths")
    settings = load_settings()
    require(effective_access(settings.db_access), DBAccess.READ)
    db = open_existing_store(settings)  # read-only: never creates a store
    try:
        repo = repositories.resolve(db, ref.forge, ref.key)
        store = QueueStore(db, time.time)
        try:
            found = predict(store, settings, ref.forge, repo, args.base, files)
        except Refused as exc:
            raise CommandError(f"{exc.code}: {exc}") from None
    finally:
        db.close()
    if args.json:
        print(json.dumps(prediction_json(found, ref.forge, repo, args.base), sort_keys=True))
        return 0
    serial = " (a serial path: it overlaps every entry)" if found.serial else ""
    print(f"keys: {', '.join(found.keys) or 'none'}{serial}")
    if found.independent:
        print(f"no PR queued for {args.base} overlaps it: it would ride a train of its own")
    for o in found.entries:
        print(f"#{o.number} in train {o.train}: shares {', '.join(o.shared)}")
    return 0


def _show(command: str, result: dict[str, Any]) -> None:
    if command == "status":
        for e in result["entries"]:
            print(
                f"#{e['number']} {e['base']} train {e['train']} at {e['head_sha'][:12]}"
                + (" (priority)" if e["priority"] else "")
            )
        for c in result["cars"]:
            batch = ", ".join(f"#{n}" for n in c["batch"])
            print(f"car {c['train']}-{c['car']} [{batch}] {c['status']} {c['branch']}")
        if not result["entries"] and not result["cars"]:
            print("the queue is empty")
        for base, c in result.get("controls", {}).items():
            print(f"{base}: {_control_words(c)}")
    elif command == "control":
        print(f"{result['base']}: {_control_words(result)}")
    elif command == "run":
        print(f"pass: built {result['built']}, landed {result['landed']}")
    else:
        print(f"#{result['number']}: {'queued' if result['queued'] else 'dequeued'}")


def _control_words(c: dict[str, Any]) -> str:
    said = [w for w, on in (("paused", c["paused"]), ("draining", c["draining"])) if on]
    return (" and ".join(said) or "running") + (f" (set by {c['set_by']})" if c["set_by"] else "")


async def _run(settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    # Start-up cost: every command's module loads with `reviewbot --help`; these only here.
    from reviewbot.core.reasons import ReasonCode
    from reviewbot.runtime.lanes import Lanes
    from reviewbot.runtime.queue.driver import QueueDriver, QueueRefused
    from reviewbot.service import configured_forges
    from reviewbot.store.queue import QueueRef, QueueStore
    from reviewbot.workflowdb.bootstrap import open_store

    db = await asyncio.to_thread(open_store, settings)
    forges = configured_forges(settings)
    lanes = Lanes(db, f"reviewbot-queue/pid-{os.getpid()}", term_s=settings.leases.lease_s)
    store = QueueStore(db, lanes.clock)
    driver = QueueDriver(settings, forges, store, lanes, autorun=False)
    try:
        command = args.queue_command
        if command in ("status", "run"):
            try:
                ref = RepoRef.parse(args.repo)
            except ValueError as exc:
                raise CommandError(str(exc)) from None
            bases = [args.base] if args.base else None
            if bases is None:
                entries = await db.run(store.entries, ref.forge, ref.key)
                cars_bases = {q.base for q in await db.run(store.queues) if q.repo == ref.key}
                bases = sorted({e.base for e in entries} | cars_bases)
            if command == "run":
                built: list[int] = []
                landed: list[str] = []
                for base in bases:
                    report = await driver.run(QueueRef(ref.forge, ref.key, base))
                    if report is not None:
                        built += report.built
                        landed += [sha for _, sha in report.landed]
                return {"built": built, "landed": landed}
            entries = [
                e for base in bases for e in await db.run(store.entries, ref.forge, ref.key, base)
            ]
            cars = [c for base in bases for c in await db.run(store.cars, ref.forge, ref.key, base)]
            controls = await db.run(store.controls, ref.forge, ref.key)
            return {
                "entries": [e.to_json() for e in entries],
                "cars": [c.to_json() for c in cars],
                "controls": {b: c.to_json() for b, c in controls.items() if b in bases},
            }
        if command == "control":
            try:
                ref = RepoRef.parse(args.repo)
            except ValueError as exc:
                raise CommandError(str(exc)) from None
            if args.paused is None and args.draining is None:
                raise CommandError("give --pause, --resume, --drain or --no-drain")
            try:
                now = await driver.set_control(
                    ref.forge,
                    ref.key,
                    args.base,
                    paused=args.paused,
                    draining=args.draining,
                    actor="reviewbot queue control",
                )
            except QueueRefused as exc:
                raise CommandError(f"{exc.code}: {exc.detail}") from None
            return {"forge": ref.forge, "repo": ref.key, "base": args.base, **now.to_json()}
        pull = parse_pr(args.pr)
        try:
            if command == "enqueue":
                done = await driver.enqueue(
                    pull.forge,
                    pull.full_name,
                    pull.number,
                    expect_head_sha=args.head,
                    priority=args.priority,
                    actor="reviewbot queue enqueue",
                )
                await driver.run(QueueRef(pull.forge, pull.full_name, done.entry.base))
                return {**done.entry.to_json(), "queued": True, "already": done.already}
            entry = await driver.dequeue(
                pull.forge,
                pull.full_name,
                pull.number,
                ReasonCode.DEQUEUED,
                f"#{pull.number} taken out with reviewbot queue dequeue",
            )
            return {**entry.to_json(), "queued": False, "state": "left", "reason": "dequeued"}
        except QueueRefused as exc:
            raise CommandError(f"{exc.code}: {exc.detail}") from None
    finally:
        lanes.close()
        for forge in forges.values():
            await forge.aclose()
        db.close()
