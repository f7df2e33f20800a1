"""``reviewbot merge FORGE:OWNER/REPO#N --head SHA``: merge a pull request at exactly that head.

Verifies from the live forge state that the PR is open and mergeable, its head is SHA, someone
other than the author approved at exactly SHA, no reviewer's latest review requests changes
and the required checks are green; then merges with the SHA pin and records the merge commit.
Every refusal names its code (head_moved, not_approved, changes_requested, checks_not_green,
not_mergeable, superseded, lease_not_held) and exits with status 1.

With ``--worker ID --epoch E`` the merge runs under that merger lease (from ``reviewbot lease
acquire``). Without them the command registers a worker, acquires the merger lease at SHA,
merges and releases. Uses the same settings and store as ``reviewbot serve``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
from typing import Any

from reviewbot.cli import CommandError
from reviewbot.cli.lease import parse_pr
from reviewbot.config import Settings, load_settings
from reviewbot.core.leases import LeaseClaim, LeaseTarget, Role
from reviewbot.core.models import PullRef
from reviewbot.store.leases import LeaseRefused, LeaseStore
from reviewbot.store.workers import LeaseStoreError
from reviewbot.workflowdb.access import DBAccess, effective_access, require
from reviewbot.workflowdb.bootstrap import open_store


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "merge",
        help="merge a pull request at exactly the approved head",
        description=__doc__,
        epilog="Examples:\n  reviewbot merge gitea:acme/api#12 --head 3f2c9e1d...\n"
        "  reviewbot merge github:acme/api#7 --head SHA --worker ID --epoch 4 --json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("pr", metavar="FORGE:OWNER/REPO#N", help="the pull request")
    parser.add_argument("--head", required=True, metavar="SHA", help="the head SHA to merge")
    parser.add_argument(
        "--method", choices=("merge", "squash", "rebase"), help="default: the repository's rule"
    )
    parser.add_argument("--worker", metavar="ID", help="a worker holding the merger lease")
    parser.add_argument("--epoch", type=int, help="the epoch of that lease")
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")
    parser.set_defaults(func=_merge)


def _merge(args: argparse.Namespace) -> int:
    ref = parse_pr(args.pr)
    if (args.worker is None) != (args.epoch is None):
        raise CommandError("--worker and --epoch go together (or leave both out)")
    settings = load_settings()
    require(effective_access(settings.db_access), DBAccess.READ_WRITE)
    result = asyncio.run(_run(settings, ref, args))
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
    elif result["merged"]:
        how = "was already merged" if result["already_merged"] else "merged"
        print(f"{ref} {how} at {args.head[:12]}: merge commit {result['merge_commit_sha']}")
    if not result["merged"]:
        raise CommandError(f"{result['error']}: {result['detail']}")
    return 0


async def _run(settings: Settings, ref: PullRef, args: argparse.Namespace) -> dict[str, Any]:
    # Start-up cost: every command's module loads with `reviewbot --help`; these only here.
    from reviewbot.forges.factory import make_forge
    from reviewbot.runtime.merge.merger import MergeError, MergeRequest
    from reviewbot.server.tools_socket import service_tools_sockets
    from reviewbot.service import Parts, build_service, configure_logging

    # The result (or the one-line refusal) is printed already: the log (stderr) shows only
    # unexpected errors, unless a level is configured.
    configure_logging(settings, level=None if "log_level" in settings.model_fields_set else "error")
    try:
        forge = make_forge(settings, ref.forge)
    except Exception as exc:
        raise CommandError(str(exc)) from None
    db = await asyncio.to_thread(open_store, settings)
    leases = LeaseStore.open(db, settings.leases, history_days=settings.retention.lease_history)
    worker, epoch = args.worker, args.epoch
    own_lease = worker is None
    target = LeaseTarget(ref.forge, ref.full_name, ref.number, Role.MERGER)
    try:
        if own_lease:
            worker = (
                await db.run(
                    leases.workers.register,
                    "reviewbot.cli",
                    client="reviewbot-merge",
                    session_id=f"pid-{os.getpid()}",
                    role="merger",
                )
            ).identity
            try:
                epoch = (await db.run(leases.acquire, target, worker, args.head)).epoch
            except (LeaseStoreError, ValueError) as exc:
                raise CommandError(f"{getattr(exc, 'code', 'invalid_request')}: {exc}") from None
        assert worker is not None and epoch is not None
        # A moved head is reviewed in this process, under the same worker.
        service = build_service(
            settings,
            forges={ref.forge: forge},
            db=db,
            parts=Parts.REVIEW | Parts.MERGE,
            client="reviewbot-merge",
            worker=worker,
            tools_endpoint=service_tools_sockets,  # each review run's own tools socket
        )
        async with service:
            assert service.merge is not None
            request = MergeRequest(
                ref.forge, ref.full_name, ref.number, args.head, worker, epoch, method=args.method
            )
            try:
                outcome = await service.merge.merger.merge(request)
            except MergeError as exc:
                raise CommandError(f"{exc.code}: {exc.detail}") from None
            except ValueError as exc:
                raise CommandError(str(exc)) from None
        result = outcome.to_json()
        result.update({"pr": str(ref), "worker": worker, "epoch": epoch})
        return result
    finally:
        if own_lease and worker is not None and epoch is not None:
            with contextlib.suppress(LeaseRefused):
                await db.run(leases.release, LeaseClaim(target, worker, epoch))
        leases.close()
        await forge.aclose()
        db.close()
