"""``reviewbot token``: bearer tokens for the API and the Crew endpoint.

``create`` prints the new token once (only its SHA-256 is stored); ``list`` shows names,
scopes and bindings; ``revoke`` ends a token at once. Scopes: read, review, lease, merge,
db:read, db:write. ``--repo FORGE:OWNER/NAME`` binds a token to one repository.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from reviewbot.cli import CommandError
from reviewbot.config import load_settings
from reviewbot.core.clock import iso
from reviewbot.store.tokens import SCOPES, TokenError, create_token, list_tokens, revoke_token
from reviewbot.workflowdb.access import DBAccess, effective_access, require
from reviewbot.workflowdb.bootstrap import open_existing_store, open_store


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "token",
        help="bearer tokens: create, list, revoke",
        description=__doc__,
        epilog="Example: reviewbot token create --name ci --scopes read,review",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="token_command", metavar="TOKEN_COMMAND", required=True)

    create = commands.add_parser(
        "create",
        help="create a token and print it once",
        description=f"Create a token. Scopes: {', '.join(SCOPES)}.",
        epilog="Example:\n  reviewbot token create --name agent-1 --scopes review,read "
        "--repo gitea:acme/api",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    create.add_argument("--name", required=True, help="a name to recognise the token by")
    create.add_argument("--scopes", required=True, help="comma-separated, e.g. read,review")
    create.add_argument("--repo", help="bind the token to FORGE:OWNER/NAME")
    create.add_argument("--json", action="store_true", help="print JSON for scripts")
    create.set_defaults(func=_create)

    listing = commands.add_parser(
        "list",
        help="list tokens (never their values)",
        description="List tokens with their scopes, bindings and state.",
        epilog="Example:\n  reviewbot token list --json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    listing.add_argument("--json", action="store_true", help="print JSON for scripts")
    listing.set_defaults(func=_list)

    revoke = commands.add_parser(
        "revoke",
        help="revoke a token by name or id",
        description="Revoke the active token with this name (or this id).",
        epilog="Example:\n  reviewbot token revoke agent-1",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    revoke.add_argument("token", metavar="NAME|ID")
    revoke.add_argument("--json", action="store_true", help="print JSON for scripts")
    revoke.set_defaults(func=_revoke)


def _open(need: DBAccess) -> Any:
    settings = load_settings()
    require(effective_access(settings.db_access), need)
    if need is DBAccess.READ:  # listing never creates a store
        return open_existing_store(settings)
    return open_store(settings)


def _create(args: argparse.Namespace) -> int:
    db = _open(DBAccess.READ_WRITE)
    try:
        plain, info = create_token(
            db, name=args.name, scopes=args.scopes, repo=args.repo, now=time.time()
        )
    except TokenError as exc:
        raise CommandError(str(exc)) from None
    finally:
        db.close()
    if args.json:
        print(json.dumps({"token": plain, **info.to_json()}))
    else:
        bound = f" bound to {info.repo}" if info.repo else ""
        print(f"token {info.name!r} (scopes {','.join(info.scopes)}{bound}):")
        print(plain)
        print("Store it now: it is not shown again.")
    return 0


def _list(args: argparse.Namespace) -> int:
    db = _open(DBAccess.READ)
    try:
        tokens = list_tokens(db)
    finally:
        db.close()
    if args.json:
        print(json.dumps([t.to_json() for t in tokens]))
        return 0
    if not tokens:
        print("no tokens; create one with: reviewbot token create --name N --scopes read")
    for t in tokens:
        state = (
            "active" if t.revoked_at is None else f"revoked {iso(t.revoked_at, timespec='seconds')}"
        )
        print(
            f"{t.id:>4}  {t.name:<20} {t.prefix}...  {','.join(t.scopes):<24} "
            f"{t.repo or 'all repositories':<28} {state}"
        )
    return 0


def _revoke(args: argparse.Namespace) -> int:
    db = _open(DBAccess.READ_WRITE)
    try:
        revoked = revoke_token(db, args.token, now=time.time())
    except TokenError as exc:
        raise CommandError(str(exc)) from None
    finally:
        db.close()
    if args.json:
        print(json.dumps([t.to_json() for t in revoked]))
    else:
        for t in revoked:
            print(f"revoked token {t.id} {t.name!r}")
    return 0
