"""Poison deliveries fail alone: a PR number past 2^63 or a lone surrogate, sent with a
``review`` token among innocent deliveries, ends ``dead`` (or refused with 400) with a
decision, and every innocent delivery is gated, also across a restart."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from reviewbot.store import decisions, journal
from tests.integration.server_support import (
    WAIT_S,
    Running,
    make_settings,
    running_server,
    sim_world,
)

POISON_NUMBER = 2**63


async def post_json(server: Running, path: str, data: object, token: str) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    return await server.post(path, json.dumps(data).encode(), headers)


def crew(call_id: str, number: object) -> dict[str, Any]:
    return {
        "variables": {"forge": "github", "repository": "acme/api", "number": number},
        "payload": {"function": "review_pr", "args": {}, "from": "agent", "call_id": call_id},
    }


async def wait_status(server: Running, delivery_id: str, statuses: set[str]) -> str:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while True:
        stored = journal.get_delivery(server.db, delivery_id)
        if stored is not None and stored.status in statuses:
            return stored.status
        if loop.time() > deadline:
            raise AssertionError(f"{delivery_id} never reached {statuses}: {stored}")
        await asyncio.sleep(0.02)


async def test_poison_deliveries_never_hold_up_innocent_ones(tmp_path: Path) -> None:
    overrides = {"delivery_max_attempts": 3, "delivery_retry_base_s": 0.05, "workers": 1}
    async with sim_world(tmp_path / "data", **overrides) as world:
        pr = world.sim.open_pr("github", "acme/api", author="alice")
        async with running_server(world.settings) as server:
            token = server.token("review")
            sends = []
            for i in range(12):
                sends.append(
                    post_json(
                        server,
                        "/api/v1/reviews",
                        {"forge": "github", "repo": "acme/api", "number": pr.number},
                        token,
                    )
                )
                if i % 4 == 0:  # a number past 64 bits, and a lone surrogate in a detail
                    sends.append(
                        post_json(
                            server,
                            "/api/v1/reviews",
                            {"forge": "github", "repo": "acme/api", "number": POISON_NUMBER},
                            token,
                        )
                    )
                    sends.append(
                        post_json(server, "/webhooks/crew", crew(f"s-{i}", "\ud800"), token)
                    )
            answers = await asyncio.gather(*sends)
            innocent = [b["delivery_id"] for s, b in answers if s == 202 and b["delivery_id"]]
            poison = [
                b["delivery_id"]
                for s, b in answers
                if b.get("delivery_id") and b["delivery_id"] not in innocent
            ]
            # Both kinds are answered 400 at once: the crew ones recorded as unreadable, the
            # numbers past 64 bits refused before anything is journaled.
            assert sum(1 for s, _ in answers if s == 400) == 6, answers
            assert len(poison) == 3
            assert len(innocent) == 12
            for delivery_id in innocent:
                stored = await server.wait_done(delivery_id)
                assert stored.status == journal.DONE
                rows = decisions.for_delivery(server.db, delivery_id)
                assert [r.reason_code for r in rows] == ["eligible"]
            for delivery_id in poison:
                assert await wait_status(server, delivery_id, {journal.DEAD}) == journal.DEAD
            dead = poison

        # After a restart the dead stay dead with one delivery_failed decision each, and
        # nothing is left queued.
        async with running_server(world.settings) as server:
            await server.settle()
            for delivery_id in dead:
                stored = journal.get_delivery(server.db, delivery_id)
                assert stored is not None and stored.status == journal.DEAD
                assert stored.attempts == 3
                rows = decisions.for_delivery(server.db, delivery_id)
                assert [(r.decision, r.reason_code) for r in rows] == [("error", "delivery_failed")]
                assert "after 3 attempts" in rows[0].detail
            status, body = await server.get(f"/api/v1/deliveries/{dead[0]}", server.token("read"))
            assert status == 200 and body["status"] == "dead"
            assert body["decisions"][0]["reason_code"] == "delivery_failed"
            assert journal.count_by_status(server.db)[journal.QUEUED] == 0


async def test_a_poison_delivery_queued_before_a_restart_does_not_wedge_the_next_start(
    tmp_path: Path,
) -> None:
    overrides = {"delivery_max_attempts": 2, "delivery_retry_base_s": 0.05}
    async with sim_world(tmp_path / "data", **overrides) as world:
        pr = world.sim.open_pr("gitea", "acme/api", author="alice")
        # Acknowledged by a server whose workers never ran (the process stopped first).
        async with running_server(world.settings, run_workers=False) as server:
            token = server.token("review")
            # The API refuses such a number now (400); a server before that acknowledged it,
            # so a queue carried across the upgrade can still hold one.
            journal.insert_delivery(
                server.db,
                journal.NewDelivery(
                    delivery_id="api:poison-from-an-older-server",
                    source="api",
                    body=json.dumps(
                        {"forge": "gitea", "repo": "acme/api", "number": POISON_NUMBER}
                    ).encode(),
                    received_at=1_800_000_000.0,
                    forge="gitea",
                    event="review_request",
                    headers={"X-Reviewbot-Token": "old"},
                ),
            )
            good = await post_json(
                server,
                "/api/v1/reviews",
                {"forge": "gitea", "repo": "acme/api", "number": pr.number},
                token,
            )
            assert good[0] == 202
        async with running_server(world.settings) as server:
            stored = await server.wait_done(good[1]["delivery_id"])
            assert stored.status == journal.DONE
            bad = await server.wait_done("api:poison-from-an-older-server")
            assert bad.status == journal.FAILED  # gated once, refused with its reason
            rows = decisions.for_delivery(server.db, bad.delivery_id)
            assert [r.reason_code for r in rows] == ["delivery_unresolved"]


async def test_a_header_the_store_cannot_hold_fails_only_its_own_request(
    tmp_path: Path,
) -> None:
    """A signed delivery whose event header has a byte that is not UTF-8, sent with 36 valid
    ones at once: it gets 400, every valid one its answer."""
    settings = make_settings(tmp_path / "data")
    body = json.dumps({"zen": "hi", "hook_id": 1}).encode()
    async with running_server(settings, run_workers=False) as server:
        from reviewbot.ingress.signatures import sign_github
        from tests.integration.server_support import GITHUB_SECRET

        reader, writer = await asyncio.open_connection(*server.base[7:].split(":"))
        try:
            raw = (
                b"POST /webhooks/github HTTP/1.1\r\nHost: x\r\n"
                b"Content-Type: application/json\r\nX-GitHub-Event: pi\xffng\r\n"
                b"X-GitHub-Delivery: bad-one\r\n"
                b"X-Hub-Signature-256: "
                + sign_github(GITHUB_SECRET.encode(), body).encode()
                + b"\r\nContent-Length: "
                + str(len(body)).encode()
                + b"\r\nConnection: close\r\n\r\n"
                + body
            )

            async def bad_one() -> int:
                writer.write(raw)
                await writer.drain()
                status_line = await reader.readline()
                return int(status_line.split()[1])

            results = await asyncio.gather(
                bad_one(), *(server.github("ping", body) for _ in range(36))
            )
        finally:
            writer.close()
        assert results[0] == 400
        assert [s for s, _ in results[1:]] == [200] * 36
        assert len(server.stored_ids()) == 36
