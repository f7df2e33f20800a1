"""A refused webhook is remembered (without its body) so that ``explain`` can name it.

The server runs on loopback; webhooks are refused the ways the acknowledgement path refuses
them, and ``reviewbot explain`` runs as a real process on the same store, as does the HTTP
explain a token reads.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from reviewbot.config import RepoRules
from reviewbot.server.app_keys import STATE
from reviewbot.store.database import SQLiteDatabase
from tests.integration.process_support import run_reviewbot
from tests.integration.server_support import Running, make_settings, running_server


def explain(data: Path, *args: str) -> tuple[int, str, str]:
    done = run_reviewbot("explain", *args, cwd=data.parent, env={"REVIEWBOT_DATA_DIR": str(data)})
    return done.returncode, done.stdout, done.stderr


def refused_rows(db: SQLiteDatabase) -> list[str]:
    with db.read() as tx:
        return [r["delivery_id"] for r in tx.all("SELECT delivery_id FROM refused_webhooks")]


async def test_each_refusal_is_explained_by_its_delivery_id(tmp_path: Path) -> None:
    data = tmp_path / "data"
    settings = make_settings(data, max_body_bytes=1024, unverified_body_budget_bytes=4096)
    async with running_server(settings, forges={}) as server:
        bad, odd, big = (str(uuid.uuid4()) for _ in range(3))
        status, _ = await server.github("pull_request", b"{}", delivery_id=bad, secret="wrong")
        assert status == 401
        status, _ = await server.github("Not An Event!", b"{}", delivery_id=odd)
        assert status == 400
        status, _ = await server.gitea("pull_request", b"{" + b" " * 4096 + b"}", delivery_id=big)
        assert status == 413

        for delivery, code, event in (
            (bad, "signature_invalid", "github pull_request"),
            (odd, "unknown_event", "github Not An Event!"),
            (big, "body_too_large", "gitea pull_request"),
        ):
            rc, out, err = explain(data, delivery)
            assert rc == 0, err
            assert f"Delivery {delivery} ({event}) was refused" in out, out
            assert f"[{code}]" in out, out
            rc, out, err = explain(data, delivery, "--json")
            answer = json.loads(out)
            assert answer["status"] == "refused" and answer["refused"][0]["code"] == code

        # The HTTP explain (and so the MCP tool) says the same to a token bound to nothing;
        # a token bound to a repository never sees a refusal: it names no repository.
        status, body = await server.get(f"/api/v1/deliveries/{bad}", server.token("read"))
        assert status == 200 and body["refused"][0]["code"] == "signature_invalid", body
        bound = server.token("read", repo="github:acme/api")
        status, body = await server.get(f"/api/v1/deliveries/{bad}", bound)
        assert status == 404, body

        # Never heard of: exit 1 with a hint, not a silent empty answer.
        rc, out, err = explain(data, str(uuid.uuid4()))
        assert rc == 1 and "accepted or refused" in err, (out, err)


async def test_a_refusal_of_a_journalled_id_is_shown_beside_the_delivery(
    server: Running, tmp_path: Path
) -> None:
    same = str(uuid.uuid4())
    status, _ = await server.github("ping", b"{}", delivery_id=same)
    assert status == 200
    status, _ = await server.github("ping", b"{}", delivery_id=same, secret="wrong")
    assert status == 401
    await server.wait_done(same)
    status, body = await server.get(f"/api/v1/deliveries/{same}", server.token("read"))
    assert status == 200 and body["status"] == "done", body
    assert [r["code"] for r in body["refused"]] == ["signature_invalid"]


async def test_hostile_headers_are_kept_short_and_printable(server: Running) -> None:
    long_id = "x" * 5000
    status, _ = await server.github("push", b"{}", delivery_id=long_id, secret="wrong")
    assert status == 401
    status, _ = await server.post(
        "/webhooks/" + "n" * 300, b"{}", {"X-GitHub-Delivery": "abc\tdef"}
    )
    assert status == 404
    rows = refused_rows(server.db)
    assert all(len(r) <= 200 and r.isprintable() for r in rows), rows
    assert "abc?def" in rows
    with server.db.read() as tx:
        forges = [r["forge"] for r in tx.all("SELECT forge FROM refused_webhooks")]
    assert max(len(f) for f in forges) == 200


async def test_only_the_newest_refusals_are_kept(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "data")
    settings = settings.model_copy(
        update={"retention": settings.retention.model_copy(update={"refused_webhooks": 3})}
    )
    async with running_server(settings, forges={}) as server:
        ids = [f"d-{n}" for n in range(6)]
        for delivery in ids:
            status, _ = await server.github("push", b"{}", delivery_id=delivery, secret="x")
            assert status == 401
        assert sorted(refused_rows(server.db)) == ids[3:]
        status, _ = await server.get(f"/api/v1/deliveries/{ids[0]}", server.token("read"))
        assert status == 404


async def test_explain_of_a_pr_without_records_says_why(tmp_path: Path) -> None:
    data = tmp_path / "data"
    settings = make_settings(data, defaults=None, repos={"gitea:acme/demo": RepoRules()})
    async with running_server(settings, forges={}):
        pass  # the store exists, migrated
    env = {"REVIEWBOT_DATA_DIR": str(data)}
    (tmp_path / "reviewbot.toml").write_text('[repos."gitea:acme/demo"]\n')

    def run(*args: str) -> tuple[int, str]:
        done = run_reviewbot("explain", *args, cwd=tmp_path, env=env)
        return done.returncode, done.stdout + done.stderr

    rc, out = run("gitea:acme/nosuch#1")
    assert rc == 1 and "gives gitea:acme/nosuch no rules" in out, out
    rc, out = run("GITEA:Acme/Demo#1")  # configured, in another casing: nothing gated yet
    assert rc == 1 and "no delivery about it was gated yet" in out, out
    rc, out = run("acme/demo#1")
    assert rc == 1 and "try github:acme/demo#1 or gitea:acme/demo#1" in out, out
    rc, out = run("bitbucket:acme/demo#1")
    assert rc == 1 and "unknown forge 'bitbucket'; expected one of github, gitea" in out, out


async def test_a_flood_of_refusals_costs_a_bounded_number_of_writes(tmp_path: Path) -> None:
    # A clock that stands still: the budget never refills, so exactly its burst is written.
    async with running_server(
        make_settings(tmp_path / "data"), forges={}, clock=lambda: 1_767_225_600.0
    ) as server:
        burst = int(server.app[STATE].refusal_records.burst)
        for n in range(burst + 30):
            status, _ = await server.github("push", b"{}", delivery_id=f"f-{n}", secret="x")
            assert status == 401  # every one refused all the same
        assert len(refused_rows(server.db)) == burst
