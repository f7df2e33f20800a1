"""The status page over real HTTP: signing in (form and link), what a bound token sees,
escaping, headers, and that no secret is ever rendered.

The server runs on loopback with a fixed clock the test controls; its rows are written into
the real SQLite store the server reads.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from reviewbot.config import Settings
from reviewbot.server.app import create_app
from reviewbot.service import Parts, build_service
from reviewbot.sim import SimServer, Simulator
from reviewbot.store import ui_sessions
from reviewbot.store.database import SQLiteDatabase
from reviewbot.store.tokens import create_token, hash_token, revoke_token
from tests.integration.process_support import run_reviewbot, serve_process
from tests.integration.server_support import (
    GITEA_SECRET,
    GITHUB_SECRET,
    WAIT_S,
    make_settings,
    sim_world,
)

NOW = 1_800_000_000.0  # the server's clock: fixed, so nothing here depends on the wall clock
XSS = '<script>alert("x")</script>'


@dataclass
class Page:
    status: int
    text: str
    headers: Any
    cookies: dict[str, str]
    raw_cookies: list[str]


@dataclass
class Browser:
    """An HTTP client that keeps cookies by hand (aiohttp's jar refuses 127.0.0.1)."""

    base: str
    http: aiohttp.ClientSession
    db: SQLiteDatabase
    cookies: dict[str, str] = field(default_factory=dict)

    async def request(self, method: str, path: str, **kwargs: Any) -> Page:
        headers = dict(kwargs.pop("headers", {}))
        if self.cookies:
            headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        async with self.http.request(
            method, self.base + path, headers=headers, allow_redirects=False, **kwargs
        ) as resp:
            raw = resp.headers.getall("Set-Cookie", [])
            got: dict[str, str] = {}
            for line in raw:
                parsed = SimpleCookie(line)
                for name, morsel in parsed.items():
                    got[name] = morsel.value
                    if morsel.value and morsel["max-age"] != "0":
                        self.cookies[name] = morsel.value
                    else:
                        self.cookies.pop(name, None)
            return Page(resp.status, await resp.text(), resp.headers, got, raw)

    async def get(self, path: str, **kwargs: Any) -> Page:
        return await self.request("GET", path, **kwargs)

    async def sign_in(self, token: str) -> Page:
        form = await self.get("/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf, form.text
        return await self.request("POST", "/login", data={"csrf": csrf.group(1), "token": token})

    def token(self, scopes: str, repo: str | None = None, name: str | None = None) -> str:
        plain, _ = create_token(
            self.db, name=name or f"t{len(scopes)}{repo}", scopes=scopes, repo=repo, now=NOW
        )
        return plain


@asynccontextmanager
async def status_server(settings: Settings) -> AsyncIterator[Browser]:
    service = build_service(settings, clock=lambda: NOW, parts=Parts.JOURNAL)
    app = create_app(service)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as http:
            assert service.db is not None
            yield Browser(f"http://127.0.0.1:{server.port}", http, service.db)
    finally:
        await server.close()


@pytest.fixture
async def browser(tmp_path: Path) -> AsyncIterator[Browser]:
    async with status_server(make_settings(tmp_path)) as b:
        yield b


def seed(db: SQLiteDatabase, forge: str, repo: str, display: str, number: int, tag: str) -> None:
    """One row of every kind the page shows for one PR; ``tag`` marks each text field."""
    head = f"{tag[:4]}{number:036d}"
    reasons = json.dumps([{"code": "skip_label", "detail": f"label {tag}"}])
    with db.write() as tx:
        tx.execute(
            "INSERT OR REPLACE INTO repositories (forge, repo, display_name, first_seen,"
            " updated_at) VALUES (?, ?, ?, ?, ?)",
            (forge, repo, display, NOW - 100, NOW - 100),
        )
        tx.execute(
            "INSERT INTO pr_gate_decisions (delivery_id, source, forge, repo, number, head_sha,"
            " event, action, decision, reason_code, detail, reasons, decided_at) VALUES"
            " (?, 'gitea', ?, ?, ?, ?, 'pull_request', 'opened', 'skip', 'skip_label', ?, ?, ?)",
            (f"d-{tag}-{number}", forge, repo, number, head, f"label {tag}", reasons, NOW - 60),
        )
        tx.execute(
            "INSERT INTO review_decisions (forge, repo, number, head_sha, decision, reason_code,"
            " detail, decided_at) VALUES (?, ?, ?, ?, 'request_changes', 'checks_failed', ?, ?)",
            (forge, repo, number, head, f"check {tag} failed", NOW - 30),
        )
        tx.execute(
            "INSERT INTO leases (forge, repo, number, role, holder, epoch, head_sha, phase,"
            " ttl_s, acquired_at, heartbeat_at, expires_at) VALUES"
            " (?, ?, ?, 'merger', ?, 7, ?, 'claimed', 60, ?, ?, ?)",
            (forge, repo, number, f"worker-{tag}", head, NOW - 10, NOW - 10, NOW + 50),
        )
        tx.execute(
            "INSERT INTO merge_attempts (forge, repo, number, head_sha, holder, epoch, method,"
            " status, codes, detail, started_at, finished_at) VALUES"
            " (?, ?, ?, ?, ?, 7, 'squash', 'refused', 'not_approved', ?, ?, ?)",
            (forge, repo, number, head, f"worker-{tag}", f"merge {tag}", NOW - 5, NOW - 4),
        )
        tx.execute(
            "INSERT INTO review_reviewer_runs (forge, repo, number, head_sha, round, run_id,"
            " findings, ran_at) VALUES (?, ?, ?, ?, 0, ?, '[]', ?)",
            (forge, repo, number, head, f"run-{tag}", NOW - 20),
        )


def token_id(db: SQLiteDatabase, name: str) -> int:
    with db.read() as tx:
        row = tx.one("SELECT id FROM api_tokens WHERE name = ?", (name,))
    assert row is not None
    return int(row["id"])


def queue_delivery(db: SQLiteDatabase, delivery_id: str) -> None:
    with db.write() as tx:
        tx.execute(
            "INSERT INTO deliveries (delivery_id, source, forge, event, received_at, status)"
            " VALUES (?, 'gitea', 'gitea', 'pull_request', ?, 'queued')",
            (delivery_id, NOW - 120),
        )


async def test_without_a_session_the_page_sends_the_browser_to_the_sign_in_form(
    browser: Browser,
) -> None:
    for path in ("/", "/pr/gitea/acme/api/1", "/?repo=gitea:acme/api"):
        page = await browser.get(path)
        assert (page.status, page.headers["Location"]) == (303, "/login"), path
    form = await browser.get("/login")
    assert form.status == 200 and 'name="token" type="password"' in form.text
    csrf = form.cookies["reviewbot_csrf"]
    assert f'name="csrf" value="{csrf}"' in form.text
    assert "HttpOnly" in form.raw_cookies[0] and "SameSite=Strict" in form.raw_cookies[0]


async def test_signing_in_with_a_read_token_sets_a_session_cookie_that_is_not_the_token(
    browser: Browser,
) -> None:
    token = browser.token("read", name="dashboard")
    answer = await browser.sign_in(token)
    assert (answer.status, answer.headers["Location"]) == (303, "/")
    session = answer.cookies["reviewbot_session"]
    assert token not in session and hash_token(token) not in session
    line = next(c for c in answer.raw_cookies if c.startswith("reviewbot_session="))
    assert "HttpOnly" in line and "SameSite=Strict" in line and "Path=/" in line
    page = await browser.get("/")
    assert page.status == 200 and "signed in as dashboard" in page.text
    assert token not in page.text and session not in page.text
    # Signing out (with the form's CSRF value) ends the session.
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert csrf
    out = await browser.request("POST", "/logout", data={"csrf": csrf.group(1)})
    assert out.status == 303 and "reviewbot_session" not in browser.cookies
    assert (await browser.get("/")).status == 303


@pytest.mark.parametrize(
    "scopes, revoke, expect",
    [("review", False, 401), ("read", True, 401), ("read", False, 303)],
    ids=["no read scope", "revoked", "read"],
)
async def test_only_an_active_read_token_signs_in(
    browser: Browser, scopes: str, revoke: bool, expect: int
) -> None:
    token = browser.token(scopes, name="who")
    if revoke:
        revoke_token(browser.db, "who", now=NOW)
    answer = await browser.sign_in(token)
    assert answer.status == expect
    if expect == 401:
        assert "unknown, revoked, or lacks the read scope" in answer.text
        assert "reviewbot_session" not in answer.cookies and token not in answer.text


async def test_the_sign_in_form_refuses_a_request_another_site_made(browser: Browser) -> None:
    token = browser.token("read")
    form = await browser.get("/login")
    csrf = form.cookies["reviewbot_csrf"]
    cases = [
        ({"csrf": "not-the-cookie", "token": token}, {}),
        ({"token": token}, {}),
        ({"csrf": csrf, "token": token}, {"Origin": "https://evil.example"}),
        ({"csrf": csrf, "token": token}, {"Sec-Fetch-Site": "cross-site"}),
    ]
    for data, headers in cases:
        answer = await browser.request("POST", "/login", data=data, headers=headers)
        assert answer.status == 403 and "csrf_failed" in answer.text, (data, headers)
        assert "reviewbot_session" not in answer.cookies
    # Without the CSRF cookie at all, the form's value proves nothing either.
    browser.cookies.clear()
    answer = await browser.request("POST", "/login", data={"csrf": csrf, "token": token})
    assert answer.status == 403
    # A body that is too large is refused before it is read.
    browser.cookies["reviewbot_csrf"] = csrf
    answer = await browser.request("POST", "/login", data={"csrf": csrf, "token": "x" * 10_000})
    assert answer.status == 413


async def test_a_session_ends_with_its_token_and_with_its_expiry(browser: Browser) -> None:
    token = browser.token("read", name="short")
    await browser.sign_in(token)
    assert (await browser.get("/")).status == 200
    revoke_token(browser.db, "short", now=NOW)
    assert (await browser.get("/")).status == 303
    # An expired or tampered session, or a link presented as a session, is no session.
    token = browser.token("read", name="other")
    info_id = token_id(browser.db, "other")
    expired = ui_sessions.issue(browser.db, info_id, "session", int(NOW) - 1)
    live = ui_sessions.issue(browser.db, info_id, "session", int(NOW) + 60)
    link = ui_sessions.issue(browser.db, info_id, "link", int(NOW) + 60)
    assert expired and live and link
    tampered = live[:-1] + ("0" if live[-1] != "0" else "1")
    forged = f"{info_id}.{int(NOW) + 99999}.{live.rsplit('.', 1)[1]}"
    for value in (expired, tampered, forged, link, "1", "x" * 500):
        browser.cookies = {"reviewbot_session": value}
        assert (await browser.get("/")).status == 303, value
    browser.cookies = {"reviewbot_session": live}
    assert (await browser.get("/")).status == 200


async def test_a_signed_link_signs_in_through_a_form_and_expires(browser: Browser) -> None:
    browser.token("read", name="linked")
    link = ui_sessions.issue(browser.db, token_id(browser.db, "linked"), "link", int(NOW) + 600)
    assert link
    form = await browser.get(f"/login?link={link}")
    assert form.status == 200 and f'name="link" value="{link}"' in form.text
    assert "reviewbot_session" not in form.cookies  # a GET never signs in
    assert form.headers["Referrer-Policy"] == "same-origin"
    csrf = form.cookies["reviewbot_csrf"]
    answer = await browser.request("POST", "/login", data={"csrf": csrf, "link": link})
    assert answer.status == 303 and "reviewbot_session" in answer.cookies
    assert answer.cookies["reviewbot_session"] != link  # a session, signed for its purpose
    assert (await browser.get("/")).status == 200
    # An expired link, or a session value sent as a link, signs nobody in.
    browser.cookies = {"reviewbot_csrf": csrf}
    tid = token_id(browser.db, "linked")
    old = ui_sessions.issue(browser.db, tid, "link", int(NOW) - 1)
    session = ui_sessions.issue(browser.db, tid, "session", int(NOW) + 600)
    for value in (old, session):
        answer = await browser.request("POST", "/login", data={"csrf": csrf, "link": value})
        assert answer.status == 401 and "not valid or has expired" in answer.text


async def test_a_bearer_header_reads_the_page_and_a_bad_one_is_refused(browser: Browser) -> None:
    token = browser.token("read")
    page = await browser.get("/", headers={"Authorization": f"Bearer {token}"})
    assert page.status == 200 and "<h1>Status</h1>" in page.text
    bad = await browser.get("/", headers={"Authorization": "Bearer rbt_nope"})
    assert bad.status == 401
    review = browser.token("review")
    page = await browser.get("/", headers={"Authorization": f"Bearer {review}"})
    assert page.status == 403 and "missing_scope" in page.text


async def test_a_bound_token_sees_only_its_repository_on_every_part_of_every_page(
    browser: Browser,
) -> None:
    seed(browser.db, "gitea", "acme/api", "Acme/Api", 1, "mine")
    seed(browser.db, "gitea", "acme/web", "acme/web", 2, "theirs")
    seed(browser.db, "github", "acme/api", "acme/api", 3, "ghub")  # same name, other forge
    queue_delivery(browser.db, "queued-delivery-1")
    token = browser.token("read", repo="gitea:ACME/api")  # another casing of the name
    await browser.sign_in(token)
    page = await browser.get("/")
    assert page.status == 200
    for shown in ("worker-mine", "run-mine", "label mine", "merge mine", "/pr/gitea/acme/api/1"):
        assert shown in page.text, shown
    for hidden in ("theirs", "ghub", "acme/web", "queued-delivery-1", "/pr/github/"):
        assert hidden not in page.text, hidden
    assert "The oldest waiting delivery arrived" in page.text  # its age, not its id
    for path in ("/?repo=gitea:acme/web", "/?repo=github:acme/api", "/pr/gitea/acme/web/2"):
        refused = await browser.get(path)
        assert refused.status == 403 and "repo_not_allowed" in refused.text, path
        assert "theirs" not in refused.text and "ghub" not in refused.text
    for path in ("/pr/gitea/ACME/API/1", "/?repo=gitea:Acme/API"):
        mine = await browser.get(path)
        assert mine.status == 200 and "worker-mine" in mine.text, path
        assert "theirs" not in mine.text and "ghub" not in mine.text
    # An unbound token sees both, and may filter to either.
    browser.cookies.clear()
    await browser.sign_in(browser.token("read", name="all"))
    page = await browser.get("/")
    assert "worker-mine" in page.text and "worker-theirs" in page.text
    assert "queued-delivery-1" in page.text
    web = await browser.get("/?repo=gitea:ACME/WEB")
    assert "worker-theirs" in web.text and "worker-mine" not in web.text


async def test_forge_text_is_rendered_inert_and_the_policy_allows_no_inline_script(
    browser: Browser,
) -> None:
    seed(browser.db, "gitea", "acme/api", f"acme/{XSS}", 1, XSS)
    await browser.sign_in(browser.token("read"))
    for path in ("/", "/pr/gitea/acme/api/1"):
        page = await browser.get(path)
        assert page.status == 200
        assert "<script" not in page.text.lower(), path
        assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page.text
        policy = page.headers["Content-Security-Policy"]
        assert "default-src 'none'" in policy and "unsafe-inline" not in policy
        assert "script-src" not in policy  # none at all: default-src 'none' covers it
        assert page.headers["X-Content-Type-Options"] == "nosniff"
        assert page.headers["Cache-Control"] == "no-store"
    # A filter or path that is itself markup comes back escaped too.
    page = await browser.get("/?repo=" + XSS)
    assert page.status == 400 and "<script" not in page.text.lower()
    page = await browser.get("/pr/gitea/acme/%3Cscript%3E/1")  # a name the forges may allow
    assert page.status == 200 and "<script" not in page.text.lower()
    assert "No decision recorded for gitea:acme/&lt;script&gt;#1." in page.text


@pytest.mark.parametrize(
    "path", ["/pr/gitea/acme/api/x", "/pr/nope/acme/api/1", "/pr/gitea/acme/api/" + "9" * 40]
)
async def test_a_malformed_pr_path_is_not_found(browser: Browser, path: str) -> None:
    await browser.sign_in(browser.token("read"))
    assert (await browser.get(path)).status == 404


async def test_no_configured_secret_or_token_is_ever_rendered(tmp_path: Path) -> None:
    async with sim_world(tmp_path) as world, status_server(world.settings) as b:
        seed(b.db, "gitea", "acme/api", "acme/api", 1, "a")
        seed(b.db, "github", "acme/api", "acme/api", 2, "b")
        queue_delivery(b.db, "q-1")
        tokens = [b.token("read", name="reader"), b.token("merge,lease", name="merger")]
        tokens.append(b.token("read", repo="gitea:acme/api", name="bound"))
        settings = world.settings
        secrets = [
            GITHUB_SECRET,
            GITEA_SECRET,
            settings.github.token.get_secret_value() if settings.github.token else "",
            settings.gitea.token.get_secret_value() if settings.gitea.token else "",
            *tokens,
            *(hash_token(t) for t in tokens),
        ]
        assert all(secrets)
        pages = []
        for token in (tokens[0], tokens[2]):
            b.cookies.clear()
            pages.append((await b.get("/login")).text)
            await b.sign_in(token)
            for path in ("/", "/pr/gitea/acme/api/1", "/pr/github/acme/api/2", "/?repo=x"):
                pages.append((await b.get(path)).text)
        assert len(pages) == 10 and any("worker-a" in p for p in pages)
        for text in pages:
            for secret in secrets:
                assert secret not in text


async def test_token_link_prints_a_link_that_signs_in_until_it_expires(tmp_path: Path) -> None:
    env = {"REVIEWBOT_DATA_DIR": str(tmp_path / "data")}
    created = run_reviewbot(
        "token", "create", "--name", "phone", "--scopes", "read", "--json", cwd=tmp_path, env=env
    )
    assert created.returncode == 0, created.stderr
    token = json.loads(created.stdout)["token"]
    run_reviewbot("token", "create", "--name", "ci", "--scopes", "review", cwd=tmp_path, env=env)
    done = run_reviewbot(
        "token", "link", "phone", "--ttl", "600", "--url", "https://rb.example/", "--json",
        cwd=tmp_path, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["url"].startswith("https://rb.example/login?link=")
    assert token not in done.stdout and hash_token(token) not in done.stdout
    link = answer["url"].split("link=", 1)[1]
    for args, why in [
        (("ci",), "lacks the read scope"),
        (("nobody",), "no active token"),
        (("phone", "--ttl", "0"), "--ttl must be between"),
    ]:
        refused = run_reviewbot("token", "link", *args, cwd=tmp_path, env=env)
        assert refused.returncode == 1 and why in refused.stderr, refused.stderr

    settings = make_settings(tmp_path / "data")
    for now, expect in ((answer["expires_at"] - 1, 303), (answer["expires_at"], 401)):
        service = build_service(settings, clock=lambda now=now: float(now), parts=Parts.JOURNAL)
        server = TestServer(create_app(service), host="127.0.0.1", port=0)
        await server.start_server()
        try:
            async with aiohttp.ClientSession() as http:
                assert service.db is not None
                b = Browser(f"http://127.0.0.1:{server.port}", http, service.db)
                form = await b.get(f"/login?link={link}")
                csrf = form.cookies["reviewbot_csrf"]
                signed = await b.request("POST", "/login", data={"csrf": csrf, "link": link})
                assert signed.status == expect
        finally:
            await server.close()


async def test_a_sign_in_body_without_a_length_is_cut_off_at_its_limit(browser: Browser) -> None:
    form = await browser.get("/login")
    csrf = form.cookies["reviewbot_csrf"]

    async def endless() -> AsyncIterator[bytes]:
        yield f"csrf={csrf}&token=".encode()
        for _ in range(1000):  # far past the 4 KiB a form may have
            yield b"x" * 1024

    answer = await browser.request("POST", "/login", data=endless())
    assert answer.status == 413 and "reviewbot_session" not in answer.cookies


async def _page(http: aiohttp.ClientSession, url: str, token: str) -> str:
    async with http.get(url, headers={"Authorization": f"Bearer {token}"}) as resp:
        assert resp.status == 200, await resp.text()
        return await resp.text()


def _section(text: str, section: str) -> str:
    """A section's visible text: tags dropped, spaces collapsed."""
    part = text.split(f'<section id="{section}">', 1)[1].split("</section>", 1)[0]
    return " ".join(re.sub(r"<[^>]+>", " ", part).split())


async def test_a_real_server_shows_why_it_rejected_a_pull_and_what_it_merged(
    tmp_path: Path,
) -> None:
    """``reviewbot serve`` against the simulator: one PR's ci/test fails, another's passes."""
    sim = Simulator()
    async with SimServer(sim, host="127.0.0.1", port=0) as sim_server:
        bot = sim.add_user("gitea", "reviewbot", bot=True)
        sim.add_user("gitea", "alice")
        sim.create_repo("gitea", "acme/api", default_branch="main")
        sim.set_permission("gitea", "acme/api", "alice", "write")
        (tmp_path / "reviewbot.toml").write_text(
            '[defaults]\nrequired_checks = ["ci/test"]\nbase_branches = ["main"]\n'
            f'automerge = true\n\n[gitea]\nurl = "{sim_server.gitea_url}"\n'
            'bot_login = "reviewbot"\n'
        )
        env = {"REVIEWBOT_GITEA__TOKEN": bot, "REVIEWBOT_GITEA__WEBHOOK_SECRET": "s3cret"}
        created = run_reviewbot(
            "token", "create", "--name", "page", "--scopes", "read", "--json",
            cwd=tmp_path, env=env,
        )  # fmt: skip
        assert created.returncode == 0, created.stderr
        token = json.loads(created.stdout)["token"]
        async with serve_process(cwd=tmp_path, env=env) as server, aiohttp.ClientSession() as http:
            sim.set_webhook("gitea", url=server.base + "/webhooks/gitea", secret="s3cret")
            outcomes = {}
            for state in ("failure", "success"):
                pr = sim.open_pr("gitea", "acme/api", author="alice", title=f"ci {state}")
                assert (
                    await sim.deliver_pull_request("gitea", "acme/api", pr.number)
                ).status == 202
                status = sim.set_status("gitea", "acme/api", pr.head_sha, "ci/test", state)
                assert (await sim.deliver_status("gitea", "acme/api", status.id)).status == 202
                outcomes[state] = pr
            rejected, merged = outcomes["failure"], outcomes["success"]
            pull = sim.pull("gitea", "acme/api", merged.number)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + WAIT_S
            while True:
                text = await _page(http, server.base + "/", token)
                seen = _section(text, "pulls") + _section(text, "decisions")
                if pull.merged and "failed: ci/test" in seen and "merge merged" in seen:
                    break
                assert loop.time() < deadline, text
                await asyncio.sleep(0.1)

            pulls = _section(text, "pulls")
            row = pulls.split(f"gitea:acme/api#{rejected.number}", 1)[1]
            assert row.startswith(
                f" {rejected.head_sha[:12]} request changes a required check failed checks_failed"
            ), row
            assert "failed: ci/test" in row
            head, commit = merged.head_sha[:12], (pull.merge_commit_sha or "")[:12]
            assert f"merged {head} as {commit}" in pulls
            decisions = _section(text, "decisions")
            # Every stage is there, with its outcome and reason in words, never twice.
            assert f"review request changes at {rejected.head_sha[:12]}" in decisions
            assert "a required check failed checks_failed" in decisions
            assert f"merge merged at {head} merged {head} as {commit}" in decisions
            assert "lease granted" in decisions and "lease released" in decisions
            assert "the bot recorded its review verdict reviewed" in decisions
            assert "eligible eligible" not in decisions and "why: merged" not in text

            page = await _page(http, f"{server.base}/pr/gitea/acme/api/{rejected.number}", token)
            reviews = _section(page, "reviews")
            assert "request changes" in reviews and "failed: ci/test" in reviews
            assert "eligible at" in _section(page, "gate")
            trail = _section(page, "lease-history")
            assert "reviewer lease, epoch" in trail and "reviewed" in trail
            assert "Lease history for gitea:acme/api#" in page  # the text form, as explain


def seed_merge_queue(db: SQLiteDatabase, base: str) -> None:
    """gitea:acme/api's queue on ``base``: #7 then the hotfix #9 in train 1 (a car holds #9),
    #8 in train 2; gitea:acme/web's queue holds #5."""
    from reviewbot.store import lanes
    from reviewbot.store.lanes import LaneHold
    from reviewbot.store.queue import CarState, QueueRef, QueueStore

    store = QueueStore(db, lambda: NOW)
    for ref, rows in (
        (QueueRef("gitea", "acme/api", base), [(7, "1", False), (9, "1", True), (8, "2", False)]),
        (QueueRef("gitea", "acme/web", base), [(5, "1", False)]),
    ):
        hold = lanes.try_acquire(db, ref.lane, "status-test", 600.0, NOW)
        assert isinstance(hold, LaneHold)
        with store.fenced(ref, hold) as w:
            for number, train, priority in rows:
                w.enqueue(number, "a" * 40, ["src"], train, priority=priority)
            car = w.add_car("1", 3, [rows[0][0]], [], f"reviewbot/queue/{base}/1-3")
            w.update_car(car, CarState.TESTING, base_sha="a" * 40, tested_sha="c0ffee" + "0" * 34)


async def test_the_status_page_lists_each_queue_s_trains_and_cars(browser: Browser) -> None:
    seed_merge_queue(browser.db, f"main{XSS}")
    await browser.sign_in(browser.token("read"))
    page = await browser.get("/")
    assert page.status == 200
    section = page.text[page.text.index('<section id="merge-queue">') :]
    section = section[: section.index("</section>")]
    assert "<h2>Merge queue</h2>" in section
    assert XSS not in page.text and "main&lt;script&gt;" in section  # the base is escaped
    first = section.index("gitea:acme/api")
    api = section[first : section.index("</tr>", first)]
    # the hotfix first, then admission order; the car with its status and tested commit
    assert api.index("#9</a>") < api.index("#7</a>")
    assert "car 3:" in api and "testing" in api and "c0ffee000000" in api
    assert "gitea:acme/web" in section

    # a token bound to one repository sees only that repository's queue
    browser.cookies.clear()
    await browser.sign_in(browser.token("read", repo="gitea:acme/web"))
    page = await browser.get("/")
    section = page.text[page.text.index('<section id="merge-queue">') :]
    assert "gitea:acme/web" in section and "gitea:acme/api" not in section
