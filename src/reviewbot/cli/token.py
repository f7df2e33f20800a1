"""``reviewbot token``: bearer tokens for the API and the Crew endpoint.

``create`` prints the new token once (only its SHA-256 is stored); ``list`` shows names,
scopes and bindings; ``revoke`` ends a token at once; ``rescope`` gives a token new scopes
and binding from its next call on; ``whoami`` shows the token of ``REVIEWBOT_TOKEN`` (or
``--token``) as the store holds it now; ``link`` prints a signed, expiring
sign-in link to the status page for a token with the read scope. Scopes: read, review, lease, merge,
db:read, db:write. ``--repo FORGE:OWNER/NAME`` binds a token to one repository.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from reviewbot.cli import CommandError, invoked_as
from reviewbot.config import load_settings
from reviewbot.core.clock import iso
from reviewbot.store import ui_sessions
from reviewbot.store.tokens import (
    SCOPES,
    TokenError,
    TokenInfo,
    create_token,
    list_tokens,
    lookup_token,
    rescope_token,
    revoke_token,
)
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

    rescope = commands.add_parser(
        "rescope",
        help="give a token new scopes and binding",
        description="Replace the scopes and the repository binding of the active token with "
        "this name (or id). Every route reads the token at each call: the change holds from "
        "its next call on.",
        epilog="Example:\n  reviewbot token rescope agent-1 --scopes read --repo gitea:acme/api",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    rescope.add_argument("token", metavar="NAME|ID")
    rescope.add_argument("--scopes", required=True, help="comma-separated, e.g. read,review")
    rescope.add_argument("--repo", help="bind it to FORGE:OWNER/NAME (default: every repository)")
    rescope.add_argument("--json", action="store_true", help="print JSON for scripts")
    rescope.set_defaults(func=_rescope)

    whoami = commands.add_parser(
        "whoami",
        help="the token of REVIEWBOT_TOKEN as the store holds it now",
        description="Show the name, id, scopes and repository binding of the token given by "
        "--token or REVIEWBOT_TOKEN, read from the store now (as GET /api/v1/whoami and the "
        "whoami MCP tool answer it). An unknown or revoked token fails with its reason.",
        epilog="Example:\n  REVIEWBOT_TOKEN=rbt_... reviewbot token whoami --json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    whoami.add_argument("--token", help="the bearer token (default: $REVIEWBOT_TOKEN)")
    whoami.add_argument("--json", action="store_true", help="print JSON for scripts")
    whoami.set_defaults(func=_whoami)

    link = commands.add_parser(
        "link",
        help="a signed, expiring sign-in link to the status page",
        description="Print a link that signs a browser in to the status page as this token "
        "(which needs the read scope). The link carries a signature, never the token; it "
        "stops working when it expires or when the token is revoked.",
        epilog="Example:\n  reviewbot token link dashboard --ttl 600 "
        "--url https://reviewbot.example.com",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    link.add_argument("token", metavar="NAME|ID")
    link.add_argument(
        "--ttl",
        type=int,
        default=LINK_TTL_S,
        metavar="SECONDS",
        help=f"how long the link works (default {LINK_TTL_S}, at most {MAX_LINK_TTL_S})",
    )
    link.add_argument(
        "--url", help="the server as the browser reaches it (default: http://HOST:PORT)"
    )
    link.add_argument("--json", action="store_true", help="print JSON for scripts")
    link.set_defaults(func=_link)


LINK_TTL_S = 900
MAX_LINK_TTL_S = 7 * 24 * 3600


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
        print(f"no tokens; create one with: {invoked_as()} token create --name N --scopes read")
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


def _rescope(args: argparse.Namespace) -> int:
    db = _open(DBAccess.READ_WRITE)
    try:
        info = rescope_token(db, args.token, scopes=args.scopes, repo=args.repo)
    except TokenError as exc:
        raise CommandError(str(exc)) from None
    finally:
        db.close()
    if args.json:
        print(json.dumps(info.to_json()))
    else:
        print(f"token {info.id} {info.name!r}: {_described(info)}")
    return 0


def _described(info: TokenInfo) -> str:
    return f"scopes {','.join(info.scopes)}, {info.repo or 'every repository'}"


def _whoami(args: argparse.Namespace) -> int:
    token = args.token or os.environ.get("REVIEWBOT_TOKEN") or None
    if token is None:
        raise CommandError("give a token: --token TOKEN or REVIEWBOT_TOKEN")
    db = _open(DBAccess.READ)
    try:
        info = lookup_token(db, token)
    finally:
        db.close()
    # The one check every entry path makes: unknown and revoked tokens answer nothing more.
    if info is None:
        raise CommandError("unauthorized: unknown token")
    if not info.active:
        raise CommandError(f"unauthorized: token {info.name!r} was revoked")
    if args.json:
        print(json.dumps(info.to_json()))
    else:
        print(f"token {info.id} {info.name!r} ({info.prefix}...): {_described(info)}")
    return 0


def _link(args: argparse.Namespace) -> int:
    if not 0 < args.ttl <= MAX_LINK_TTL_S:
        raise CommandError(f"--ttl must be between 1 and {MAX_LINK_TTL_S} seconds")
    settings = load_settings()
    require(effective_access(settings.db_access), DBAccess.READ)
    db = open_existing_store(settings)
    try:
        found = [
            t for t in list_tokens(db, include_revoked=False) if args.token in (t.name, str(t.id))
        ]
        if len(found) != 1:
            raise CommandError(f"no active token named or numbered {args.token!r}")
        info = found[0]
        if "read" not in info.scopes:
            raise CommandError(
                f"token {info.name!r} lacks the read scope the status page needs; "
                "create one with --scopes read"
            )
        expires = int(time.time()) + args.ttl
        signed = ui_sessions.issue(db, info.id, "link", expires)
    finally:
        db.close()
    assert signed is not None
    base = (args.url or f"http://{settings.host}:{settings.port}").rstrip("/")
    url = f"{base}/login?link={signed}"
    if args.json:
        print(json.dumps({"url": url, "token": info.name, "expires_at": expires}))
    else:
        print(url)
        print(f"Opens the status page as {info.name!r}; works for {args.ttl} s.")
    return 0
