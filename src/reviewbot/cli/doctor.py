"""``reviewbot doctor``: the readiness checks of ``GET /readyz``, and what the bot may do.

It checks the store (a write commits), the queue (the oldest delivery waiting to be gated
is younger than ready_max_queue_age_s), each configured forge (it answers) and the reviewer
sandbox (probed here as serve would, as this user: run it as the bot's user). On a
PostgreSQL store it also says whether the database role that confines query and mutate
exists and the bot's user may use it (docs/security.md). For every
configured repository it then reads what the bot's credentials hold there (a GitHub App
installation's permissions, or the access the forge shows the token's account) and prints
each permission the bot lacks, what fails without it and where to grant it; for a
Gitea/Forgejo server, its version and what that version lacks. The workers run inside
``reviewbot serve``: with --server URL their check is read from that server's /readyz. Exit
status 0 when every check passes, 1 otherwise (a missing optional permission is reported,
not failed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Mapping
from typing import Any

import httpx

from reviewbot.config import Settings, load_settings
from reviewbot.core.access import access_lines, version_notes
from reviewbot.core.models import RepoRef
from reviewbot.forges.base import Forge
from reviewbot.forges.errors import ForgeError, reason_for
from reviewbot.runtime.health import Check, readiness
from reviewbot.runtime.reviewers.sandbox import Sandbox
from reviewbot.store.postgres import PostgresDatabase
from reviewbot.workflowdb import pgtools
from reviewbot.workflowdb.bootstrap import open_store


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "doctor",
        help="check that the bot is ready: store, queue, forges, permissions, sandbox, workers",
        description=__doc__,
        epilog="Examples:\n  reviewbot doctor\n  reviewbot doctor --server http://127.0.0.1:8080",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--server", help="a running server whose workers to check")
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = load_settings()
    checks = asyncio.run(local_checks(settings))
    if args.server:
        checks.append(server_workers(args.server))
    ready = all(c.ok for c in checks)
    if args.json:
        print(json.dumps({"ready": ready, "checks": [c.to_json() for c in checks]}))
    else:
        for check in checks:
            print(f"{'ok  ' if check.ok else 'FAIL'} {check.name}: {check.detail}")
        print("ready" if ready else "not ready: " + ", ".join(c.name for c in checks if not c.ok))
    return 0 if ready else 1


async def local_checks(settings: Settings) -> list[Check]:
    # Start-up cost: the forge clients load only for this command.
    from reviewbot.service import configured_forges

    db = await asyncio.to_thread(open_store, settings)
    forges = configured_forges(settings)
    sandbox = await asyncio.to_thread(Sandbox.from_settings, settings)
    try:
        checks = await readiness(
            settings, db, forges, time.time, expect_workers=False, sandbox=sandbox.state
        )
        if not forges:
            checks.append(
                Check(
                    "forges",
                    False,
                    "no forge is configured: set [github] or [gitea] "
                    "(docs/github-app.md, docs/gitea.md)",
                )
            )
        if isinstance(db, PostgresDatabase):
            ok, detail = await asyncio.to_thread(pgtools.role_report, db)
            checks.append(Check("workflow-db tools role", ok, detail))
        return checks + await access_checks(settings, forges)
    finally:
        for forge in forges.values():
            await forge.aclose()
        db.close()


async def access_checks(settings: Settings, forges: Mapping[str, Forge]) -> list[Check]:
    """One check per configured repository's access, and one per Gitea server's version."""
    checks: list[Check] = []
    versions: dict[str, str] = {}
    for key, rules in sorted(settings.repos.items()):
        repo = RepoRef.parse(key)
        forge = forges.get(repo.forge)
        if forge is None:
            checks.append(Check(f"access {key}", False, f"{repo.forge} is not configured"))
            continue
        try:
            facts = await forge.access(repo.full_name)
        except ForgeError as exc:
            checks.append(Check(f"access {key}", False, f"{reason_for(exc).value}: {exc}"))
            continue
        if facts.version is not None:
            versions.setdefault(repo.forge, facts.version)
        lines = access_lines(
            facts,
            merges=rules.automerge,
            deletes_branches=rules.delete_head_branch_after_merge,
            closes_issues=rules.close_linked_issues_after_merge,
        )
        missing = [line for line in lines if line.ok is False]
        unknown = [line for line in lines if line.ok is None]
        failed = [line for line in missing if line.required]
        parts = [
            f"{'missing' if line.required else 'missing (optional)'} {line.permission}: "
            f"{line.used_for}; grant it in {line.fix}"
            for line in missing
        ]
        parts += [f"cannot tell {line.permission} ({line.used_for})" for line in unknown]
        detail = (
            "; ".join(parts) if parts else f"every permission the bot uses ({facts.credential})"
        )
        checks.append(Check(f"access {key}", not failed, detail))
    for name, version in sorted(versions.items()):
        notes = version_notes(version, settings.reconcile_interval_s)
        checks.append(
            Check(f"{name} version", True, "; ".join(notes) or f"{version}: nothing lacking")
        )
    return checks


def server_workers(base: str) -> Check:
    """The server's own workers check, from its /readyz."""
    try:
        body = httpx.get(base.rstrip("/") + "/readyz", timeout=10).json()
    except (httpx.HTTPError, ValueError) as exc:
        return Check("server", False, f"{base} did not answer: {exc}")
    for check in body.get("checks", []):
        if check.get("name") == "workers_alive":
            return Check("workers_alive", bool(check["ok"]), str(check["detail"]))
    return Check("workers_alive", False, f"{base}/readyz reports no workers check")
