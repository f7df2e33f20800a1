"""The status page's routes: ``GET /``, ``GET /pr/FORGE/OWNER/REPO/NUMBER``, ``/login``,
``POST /logout`` and the stylesheet.

Reading needs a token with the ``read`` scope (:mod:`.access`); a token bound to a
repository sees that repository's rows only, on every part of every page. Pages are
rendered by :mod:`.render` and sent with a Content-Security-Policy that allows no script,
no frame and no outside resource, and with ``Referrer-Policy: same-origin`` so a sign-in
link never leaves for another site in a Referer header.
"""

from __future__ import annotations

from importlib import resources
from urllib.parse import parse_qs

from aiohttp import web

from reviewbot.core.errors import Refused, ReviewbotError
from reviewbot.core.lease_history import HistoryEntry
from reviewbot.core.merge import Readiness, merge_readiness
from reviewbot.core.models import PullRef, RepoRef
from reviewbot.core.quota import RouteClass
from reviewbot.forges.errors import ForgeError
from reviewbot.runtime.explain import pull_facts
from reviewbot.runtime.lease_history import read_lease_history
from reviewbot.runtime.merge.facts import configured_checks, read_readiness_facts
from reviewbot.server.app_keys import SERVICE, STATE
from reviewbot.server.auth import current_bound
from reviewbot.server.body import read_body
from reviewbot.server.errors import status_of
from reviewbot.server.quota import admit, token_caller
from reviewbot.server.ui import access, pr_page, render
from reviewbot.server.ui.markup import STYLESHEET, Reader
from reviewbot.service import Service
from reviewbot.store import lease_history, ui_sessions
from reviewbot.store.database import Database
from reviewbot.store.status import Scope, snapshot
from reviewbot.store.tokens import TokenInfo, lookup_token

HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    # Not "no-referrer": with it browsers send "Origin: null" on the page's own forms.
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
MAX_FORM = 4096  # a token or a link and a CSRF value: a few hundred bytes
EXPLAIN_LIMIT = 20  # as many decisions as `reviewbot explain` shows by default
STYLE = resources.files("reviewbot.server.ui").joinpath("style.css").read_bytes()


def add_routes(app: web.Application) -> None:
    app.router.add_get("/", status_page)
    app.router.add_get("/pr/{forge}/{owner}/{name}/{number}", pull_page)
    app.router.add_get("/login", login_form)
    app.router.add_post("/login", login)
    app.router.add_post("/logout", logout)
    app.router.add_get(STYLESHEET, stylesheet)


def page(request: web.Request, text: str, *, status: int = 200, csrf: str = "") -> web.Response:
    response = web.Response(text=text, status=status, content_type="text/html", headers=HEADERS)
    if csrf:
        access.keep_csrf(request, response, csrf)
    return response


def error_page(request: web.Request, exc: ReviewbotError, reader: TokenInfo | None) -> web.Response:
    csrf = access.csrf_value(request)
    who = None if reader is None else Reader(reader.name, reader.repo)
    text = render.render_error(exc.code, str(exc), who, csrf)
    return page(request, text, status=status_of(exc, request.path), csrf=csrf)


def see_other(location: str) -> web.Response:
    return web.Response(status=303, headers={**HEADERS, "Location": location})


def to_login() -> web.Response:
    response = see_other("/login")
    access.end_session(response)
    return response


async def stylesheet(request: web.Request) -> web.Response:
    headers = {**HEADERS, "Cache-Control": "max-age=3600"}
    return web.Response(body=STYLE, content_type="text/css", headers=headers)


async def _scope(request: web.Request, info: TokenInfo, text: str) -> Scope:
    """The rows a reader may see: its binding, narrowed (or refused) by the chosen filter."""
    wanted: RepoRef | None = None
    if text:
        try:
            wanted = RepoRef.parse(text)
        except ValueError as exc:
            raise Refused(f"repo: {exc}", code="invalid_request") from None
    if wanted is None and info.repo is not None:
        wanted = RepoRef.parse(info.repo)
    if wanted is None:
        return Scope()
    db = request.app[SERVICE].db
    assert db is not None
    return Scope(wanted.forge, await current_bound(db, info, wanted.forge, wanted.key))


async def status_page(request: web.Request) -> web.Response:
    info = await access.reader(request)
    if info is None:
        return to_login()
    try:
        scope = await _scope(request, info, request.query.get("repo", "").strip()[:300])
    except ReviewbotError as exc:
        return error_page(request, exc, info)
    service = request.app[SERVICE]
    db = service.db
    assert db is not None
    now = service.clock()
    checks = await service.readiness(probes=request.app[STATE].probes)
    snap = await db.run(snapshot, db, scope, now)
    csrf = access.csrf_value(request)
    view = render.StatusView(
        reader=Reader(info.name, info.repo),
        checks=[render.Check(c.name, c.ok, c.detail) for c in checks],
        snapshot=snap,
        now=now,
        csrf=csrf,
        repo_filter=f"{scope.forge}:{snap.name(scope.forge, scope.repo)}"
        if scope.forge and scope.repo
        else "",
    )
    return page(request, render.render_status(view), csrf=csrf)


async def pull_page(request: web.Request) -> web.Response:
    info = await access.reader(request)
    if info is None:
        return to_login()
    m = request.match_info
    try:
        if not (m["number"].isascii() and m["number"].isdigit() and len(m["number"]) <= 18):
            raise Refused(f"not a pull request number: {m['number']!r}", code="not_found")
        try:
            pr = PullRef(m["forge"], m["owner"], m["name"], int(m["number"]))
            RepoRef(pr.forge, pr.owner, pr.name)  # the forge and both names are valid
        except ValueError as exc:
            raise Refused(str(exc), code="not_found") from None
        service = request.app[SERVICE]
        db = service.db
        assert db is not None
        key = await current_bound(db, info, pr.forge, pr.full_name)
    except ReviewbotError as exc:
        return error_page(request, exc, info)
    owner, _, name = key.partition("/")
    pr = PullRef(pr.forge, owner, name, pr.number)
    now = service.clock()
    facts = await db.run(pull_facts, db, service.clock, pr, EXPLAIN_LIMIT)
    if service.leases is not None:  # its reading adds the lapses no call recorded yet
        history = await db.run(read_lease_history, service.leases, pr, limit=EXPLAIN_LIMIT)
        entries: tuple[HistoryEntry, ...] = history.entries
    else:  # a server without the lease API: the recorded trail
        entries = tuple(await db.run(_recorded_history, db, pr))
    snap = await db.run(snapshot, db, Scope(pr.forge, key), now)
    readiness, unread = await _live_readiness(service, info, pr)
    csrf = access.csrf_value(request)
    text = facts.text()
    if entries:  # as `reviewbot explain` prints it
        text += f"\nLease history for {facts.shown}, oldest first:\n"
        text += "\n".join("  " + entry.line() for entry in entries)
    view = pr_page.PullView(
        reader=Reader(info.name, info.repo),
        forge=pr.forge,
        repo=key,
        number=pr.number,
        explanation=text,
        snapshot=snap,
        now=now,
        csrf=csrf,
        facts=facts,
        lease_history=entries,
        readiness=readiness,
        readiness_unread=unread,
    )
    return page(request, pr_page.render_pull(view), csrf=csrf)


async def _live_readiness(
    service: Service, info: TokenInfo, pr: PullRef
) -> tuple[Readiness | None, str]:
    """The merge-readiness answer over the PR's live facts, or why it was not read (the
    page still shows the records)."""
    forge = service.forges.get(pr.forge)
    if forge is None:
        return None, f"no {pr.forge} forge is configured here"
    try:
        admit(service, token_caller(info), RouteClass.FORGE_READS)  # it reads the forge live
        facts = await read_readiness_facts(forge, pr.full_name, pr.number)
    except (ForgeError, ReviewbotError) as exc:
        return None, str(exc)
    configured = configured_checks(service.settings, pr.forge, pr.full_name)
    return merge_readiness(facts, configured), ""


def _recorded_history(db: Database, pr: PullRef) -> list[HistoryEntry]:
    with db.read() as tx:
        return lease_history.for_pull(tx, pr.forge, pr.full_name, pr.number, limit=EXPLAIN_LIMIT)


async def login_form(request: web.Request) -> web.Response:
    csrf = access.csrf_value(request)
    link = request.query.get("link", "")[: ui_sessions.MAX_TEXT]
    return page(request, render.render_login(csrf, link=link), csrf=csrf)


async def _form(request: web.Request) -> dict[str, str]:
    body = await read_body(request, MAX_FORM, timeout_s=10.0)
    try:
        fields = parse_qs(body.decode("utf-8"), max_num_fields=8)
    except (UnicodeDecodeError, ValueError):
        raise Refused("the form could not be read", code="invalid_request") from None
    return {k: v[0] for k, v in fields.items()}


async def login(request: web.Request) -> web.Response:
    csrf = access.csrf_value(request)
    try:
        fields = await _form(request)
        access.check_form_origin(request, fields.get("csrf", ""))
    except ReviewbotError as exc:
        return error_page(request, exc, None)
    service = request.app[SERVICE]
    db = service.db
    assert db is not None
    link = fields.get("link", "")
    if link:
        info = await db.run(ui_sessions.verify, db, link, "link", service.clock())
        problem = "this sign-in link is not valid or has expired; ask for a new one"
    else:
        info = await db.run(lookup_token, db, fields.get("token", "").strip())
        problem = "this token is unknown, revoked, or lacks the read scope"
    info = access.usable(info)
    if info is None:
        text = render.render_login(csrf, message=problem)
        return page(request, text, status=401, csrf=csrf)
    response = see_other("/")
    await access.start_session(request, response, info)
    return response


async def logout(request: web.Request) -> web.Response:
    try:
        fields = await _form(request)
        access.check_form_origin(request, fields.get("csrf", ""))
    except ReviewbotError as exc:
        return error_page(request, exc, None)
    return to_login()
