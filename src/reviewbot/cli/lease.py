"""``reviewbot lease``: worker identities and leases on the local store.

The same store as ``reviewbot serve`` (settings, data dir). ``register`` mints a worker
identity; ``acquire`` claims the reviewer or merger lease of a pull request at a head SHA and
prints its epoch (the fencing token every later call carries); ``heartbeat`` keeps it alive;
``--wait`` waits in the PR's line, first come, first served (``leave`` stops waiting);
``release`` ends it (``--reason`` is kept in the history); ``register``, ``acquire``,
``heartbeat`` and ``release`` act as a client and need ``--client`` and ``--session-id`` (or
``REVIEWBOT_CLIENT`` and ``REVIEWBOT_SESSION_ID``), never guessed; ``list`` shows holder, epoch,
head, phase and time left; ``history`` shows every grant, renewal, release, expiry, takeover
and supersession of a PR's leases, with who and why. A refusal
(``lease_held``, ``superseded``, ``lease_not_held``, ``worker_unproven``) is one line on stderr
and exit status 1; with ``--json`` its JSON also goes to stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from reviewbot.cli import CommandError, add_client_args, declared_actor, declared_client
from reviewbot.config import load_settings
from reviewbot.core.lease_history import CALLER_RELEASE_REASONS, EndReason
from reviewbot.core.leases import (
    Lease,
    LeaseClaim,
    LeaseDetails,
    LeaseTarget,
    Role,
    lease_json,
    refusal_view,
)
from reviewbot.core.models import FORGES, PullRef
from reviewbot.runtime.lease_history import read_lease_history
from reviewbot.runtime.lease_line import acquire_lease
from reviewbot.store.leases import LeaseStore
from reviewbot.store.workers import LeaseStoreError
from reviewbot.workflowdb.access import DBAccess, effective_access, require
from reviewbot.workflowdb.bootstrap import open_existing_store, open_store


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "lease",
        help="worker identities and leases: register, acquire, heartbeat, release, list",
        description=__doc__,
        epilog="Example: reviewbot lease list --json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="lease_command", metavar="LEASE_COMMAND", required=True)

    reg = _sub(
        commands,
        "register",
        "mint and register a worker identity",
        "Register a new worker identity NAME-YYYYMMDDTHHMMSSZ-SHA and print it.",
        "reviewbot lease register --name agent7 --client my-script --session-id run-42",
    )
    reg.add_argument("--name", required=True, help="1-40 letters, digits, '.' or '_'")
    add_client_args(reg)
    reg.add_argument("--role", default="merger", help="what it does (free text)")
    reg.set_defaults(func=_register)

    acq = _sub(
        commands,
        "acquire",
        "claim a lease at a head SHA",
        "Claim the lease of a PR and role at a head; the same worker at the same head renews.",
        "reviewbot lease acquire gitea:acme/api#12 --role merger --worker ID --head SHA "
        "--client my-script --session-id run-42",
    )
    _target_args(acq)
    acq.add_argument("--head", required=True, metavar="SHA", help="the head SHA to pin")
    acq.add_argument("--ttl", type=float, metavar="SECONDS", help="lease term (default: settings)")
    add_client_args(acq)  # --session-id is also kept on the lease
    acq.add_argument(
        "--wait",
        type=float,
        metavar="SECONDS",
        help="wait in the PR's line up to this long (0: join it and print the position);"
        " at most leases.max_wait_s",
    )
    acq.add_argument("--target-branch", help="the branch the work targets (kept on the lease)")
    acq.add_argument("--target-sha", metavar="SHA", help="that branch's commit the work is on")
    acq.add_argument("--issue", help="the issue the work is for")
    acq.add_argument("--blocker", help="what blocks the work")
    acq.set_defaults(func=_acquire)

    leave = _sub(
        commands,
        "leave",
        "leave a PR's lease line (stop waiting)",
        "Take the worker out of the line of a PR and role; it no longer waits for the lease.",
        "reviewbot lease leave gitea:acme/api#12 --role merger --worker ID",
    )
    _target_args(leave)
    leave.set_defaults(func=_leave)

    for name, text, func in (
        ("heartbeat", "push the lease's expiry one term ahead", _heartbeat),
        ("release", "end the lease now", _release),
    ):
        p = _sub(
            commands,
            name,
            text,
            f"{text[0].upper()}{text[1:]}; refused unless (worker, epoch) is the live claim.",
            f"reviewbot lease {name} gitea:acme/api#12 --role merger --worker ID --epoch 3 "
            "--client my-script --session-id run-42",
        )
        _target_args(p)
        p.add_argument("--epoch", type=int, required=True, help="the epoch acquire printed")
        add_client_args(p)
        if name == "release":
            p.add_argument(
                "--reason",
                choices=sorted(r.value for r in CALLER_RELEASE_REASONS),
                default=EndReason.MANUAL_RELEASE.value,
                help="why (kept in the lease history)",
            )
        p.set_defaults(func=func)

    hist = _sub(
        commands,
        "history",
        "a PR's lease audit trail (grants, renewals, releases, expiries, takeovers)",
        "Every lease event of a PR, oldest first: who, epoch, head, when, why, by whom.",
        "reviewbot lease history gitea:acme/api#12 --role merger",
    )
    hist.add_argument("pr", metavar="FORGE:OWNER/REPO#N", help="the pull request")
    hist.add_argument("--role", choices=("reviewer", "merger"))
    hist.add_argument("--limit", type=int, default=500, help="the newest N events")
    hist.set_defaults(func=_history)

    lst = _sub(
        commands,
        "list",
        "list leases (holder, epoch, head, phase, expires in)",
        "List leases, optionally of one PR (FORGE:OWNER/REPO#N) or one repository.",
        "reviewbot lease list gitea:acme/api#12\n  reviewbot lease list --live --json",
    )
    lst.add_argument("pr", nargs="?", metavar="FORGE:OWNER/REPO#N", help="only this PR")
    lst.add_argument("--forge", choices=FORGES)
    lst.add_argument("--repo", metavar="OWNER/NAME")
    lst.add_argument("--role", choices=("reviewer", "merger"))
    lst.add_argument("--live", action="store_true", help="only live claims")
    lst.set_defaults(func=_list)


def _sub(commands: Any, name: str, text: str, desc: str, example: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(
        name,
        help=text,
        description=desc,
        epilog=f"Example:\n  {example}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")
    return parser


def _target_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("pr", metavar="FORGE:OWNER/REPO#N", help="the pull request")
    parser.add_argument("--role", choices=("reviewer", "merger"), default="merger")
    parser.add_argument("--worker", required=True, metavar="ID", help="the worker identity")


def parse_pr(text: str) -> PullRef:
    try:
        return PullRef.parse(text)
    except ValueError as exc:
        raise CommandError(str(exc)) from None


def target_of(args: argparse.Namespace) -> LeaseTarget:
    ref = parse_pr(args.pr)
    return LeaseTarget(ref.forge, ref.full_name, ref.number, Role(args.role))


@contextmanager
def lease_store(need: DBAccess = DBAccess.READ_WRITE) -> Iterator[LeaseStore]:
    settings = load_settings()
    require(effective_access(settings.db_access), need)
    # Listing never creates a store.
    db = open_existing_store(settings) if need is DBAccess.READ else open_store(settings)
    store = LeaseStore.open(db, settings.leases, history_days=settings.retention.lease_history)
    try:
        yield store
    finally:
        store.close()
        db.close()


def refuse(args: argparse.Namespace, exc: LeaseStoreError | ValueError) -> CommandError:
    """One line on stderr (and the API's error JSON on stdout with ``--json``)."""
    code = exc.code if isinstance(exc, LeaseStoreError) else "invalid_request"
    if getattr(args, "json", False):
        refusal = getattr(exc, "refusal", None)
        body = refusal_view(refusal) if refusal is not None else {"error": code, "detail": str(exc)}
        print(json.dumps(body, indent=2, sort_keys=True))
    return CommandError(f"{code}: {exc}")


def _run(args: argparse.Namespace, step: Callable[[LeaseStore], Lease]) -> int:
    with lease_store() as store:
        try:
            lease = step(store)
        except (LeaseStoreError, ValueError) as exc:
            raise refuse(args, exc) from None
        now = store.clock()
    data = lease_json(lease, now)
    if args.json:
        print(json.dumps(data, indent=2, sort_keys=True))
    else:
        print(
            f"{lease.target} {data['phase']}: holder {lease.holder}, epoch {lease.epoch}, "
            f"head {lease.head_sha[:12]}, expires {data['expires_at']} "
            f"(in {data['expires_in_s']:g}s)"
        )
    return 0


def _register(args: argparse.Namespace) -> int:
    client, session = declared_client(args)
    with lease_store() as store:
        try:
            record = store.workers.register(
                args.name, client=client, session_id=session, role=args.role
            )
        except (LeaseStoreError, ValueError) as exc:
            raise refuse(args, exc) from None
    if args.json:
        print(json.dumps({"worker_identity": record.identity, "name": record.name}, indent=2))
    else:
        print(record.identity)
    return 0


def _acquire(args: argparse.Namespace) -> int:
    client, session = declared_client(args)
    actor = declared_actor(client, session)
    target = target_of(args)

    def step(store: LeaseStore) -> Lease:
        # The session kept on the lease is the one given as --session-id (a re-asked acquire
        # without details keeps those its first one declared).
        details = LeaseDetails(
            args.target_branch, args.target_sha, args.session_id, args.issue, args.blocker
        )
        acquiring = acquire_lease(
            store, target, args.worker, args.head, wait_s=args.wait, ttl_s=args.ttl,
            actor=actor, details=details,
        )  # fmt: skip
        return asyncio.run(acquiring)

    return _run(args, step)


def _leave(args: argparse.Namespace) -> int:
    target = target_of(args)
    with lease_store() as store:
        left = store.leave_line(target, args.worker)
    if args.json:
        print(json.dumps({"worker_identity": args.worker, "left": left}, indent=2))
    else:
        print(f"{args.worker} {'left' if left else 'was not in'} the line of {target}")
    return 0


def _heartbeat(args: argparse.Namespace) -> int:
    actor = declared_actor(*declared_client(args))
    claim = LeaseClaim(target_of(args), args.worker, args.epoch)
    return _run(args, lambda s: s.heartbeat(claim, actor=actor))


def _release(args: argparse.Namespace) -> int:
    actor = declared_actor(*declared_client(args))
    claim = LeaseClaim(target_of(args), args.worker, args.epoch)
    reason = EndReason(args.reason)
    return _run(args, lambda s: s.release(claim, reason=reason, actor=actor))


def _history(args: argparse.Namespace) -> int:
    pr = parse_pr(args.pr)
    role = Role(args.role) if args.role else None
    with lease_store(DBAccess.READ) as store:
        history = read_lease_history(store, pr, role=role, limit=max(1, args.limit))
    if args.json:
        print(json.dumps(history.to_json(), indent=2, sort_keys=True))
    else:
        print("\n".join(history.lines()))
    return 0


def _list(args: argparse.Namespace) -> int:
    forge, repo, number = args.forge, args.repo, None
    if args.pr:
        ref = parse_pr(args.pr)
        forge, repo, number = ref.forge, ref.full_name, ref.number
    with lease_store(DBAccess.READ) as store:
        leases = store.list_leases(
            forge=forge,
            repo=repo,
            number=number,
            role=Role(args.role) if args.role else None,
            live_only=args.live,
        )
        now = store.clock()
    rows = [lease_json(lease, now) for lease in leases]
    if args.json:
        print(json.dumps({"leases": rows}, indent=2, sort_keys=True))
        return 0
    if not rows:
        print("no leases")
        return 0
    table = [("TARGET", "HOLDER", "EPOCH", "HEAD", "PHASE", "EXPIRES IN")]
    for lease, row in zip(leases, rows, strict=True):
        left = f"{row['expires_in_s']:.1f}s" if row["phase"] == "claimed" else "-"
        table.append(
            (str(lease.target), lease.holder, str(lease.epoch), lease.head_sha[:12],
             row["phase"], left)
        )  # fmt: skip
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    for r in table:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    sys.stdout.flush()
    return 0
