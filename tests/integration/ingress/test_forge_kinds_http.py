"""The tables of forge kinds, through real HTTP: an unknown forge is refused by name, and a
third forge added only as two rows and an adapter is parsed and dispatched."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from reviewbot.config import Settings
from reviewbot.core import models
from reviewbot.core.access import AccessFacts
from reviewbot.core.models import (
    CheckResult,
    Comment,
    InlineComment,
    MergeResult,
    PullRequestSnapshot,
    RequiredChecks,
    Review,
    ReviewEvent,
    Trigger,
)
from reviewbot.forges.base import Forge
from reviewbot.forges.errors import Unsupported
from reviewbot.forges.kinds import FORGE_ADAPTERS, AdapterKind, AdapterOptions
from reviewbot.forges.refs import RefOps
from reviewbot.ingress.errors import TriggerError
from reviewbot.ingress.forge_kinds import FORGE_KINDS, ForgeKind, kept_header_names
from reviewbot.ingress.headers import header
from reviewbot.ingress.signatures import sign_gitea, sign_github, verify_gitea
from reviewbot.store import journal
from tests.integration.server_support import GITHUB_SECRET, make_settings, running_server

PING = json.dumps({"zen": "Keep it logically awesome.", "hook_id": 1}).encode()
FAKE_SECRET = b"fake-webhook-secret"
SHA = "f" * 40


async def test_a_forge_without_a_row_is_refused_by_name_and_nothing_is_stored(
    tmp_path: Path,
) -> None:
    async with running_server(make_settings(tmp_path / "data"), forges={}) as server:
        # GitHub's headers and a valid GitHub signature: never read as GitHub's, or Gitea's.
        status, body = await server.post(
            "/webhooks/bitbucket",
            PING,
            {
                "Content-Type": "application/json",
                "X-GitHub-Event": "ping",
                "X-GitHub-Delivery": "d-unknown",
                "X-Hub-Signature-256": sign_github(GITHUB_SECRET.encode(), PING),
            },
        )
        assert status == 404
        assert body["error"] == "unknown_forge"
        assert body["detail"] == "unknown forge 'bitbucket'; known forges: github, gitea"
        assert server.stored_ids() == []
        # The Crew route beside it is still its own.
        status, body = await server.post("/webhooks/crew", b"{}", {})
        assert body.get("error") != "unknown_forge"


# -- a third forge: the two rows and a stub adapter, registered by the test alone ----------


def fake_trigger(
    headers: Mapping[str, str], payload: Mapping[str, Any], *, delivery_id: str, source: str
) -> Trigger:
    event = (header(headers, "X-Fake-Event") or "").strip()
    if event != "change":
        raise TriggerError(f"X-Fake-Event: {event!r} is not a change")
    owner, _, name = str(payload["repo"]).partition("/")
    return Trigger(
        source=source,
        delivery_id=delivery_id,
        forge="fake",
        event=event,
        kind="pull",
        owner=owner,
        name=name,
        number=int(payload["number"]),
        head_sha=str(payload["head"]),
    )


def fake_verify(secret: bytes | None, headers: Mapping[str, str], body: bytes) -> bool:
    return verify_gitea(secret, body, header(headers, "X-Fake-Signature"))


@dataclass
class FakeSection:
    webhook_secret: SecretStr | None = field(
        default_factory=lambda: SecretStr(FAKE_SECRET.decode())
    )
    token: SecretStr | None = None
    configured: bool = True


@dataclass
class StubForge:
    """Answers one open PR and records every call."""

    name: str = "fake"
    url: str = "http://fake.invalid"
    calls: list[tuple[Any, ...]] = field(default_factory=list)

    def _pull(self, repo: str, number: int) -> PullRequestSnapshot:
        owner, _, name = repo.partition("/")
        return PullRequestSnapshot(
            forge="fake",
            owner=owner,
            name=name,
            number=number,
            state="open",
            merged=False,
            draft=False,
            head_sha=SHA,
            base_ref="main",
            head_ref="feature",
            author="alice",
        )

    async def bot_login(self) -> str:
        return "reviewbot"

    async def probe(self) -> str:
        return "reviewbot"

    async def get_pull(
        self, repo: str, number: int, *, read_within_s: float = 0.0
    ) -> PullRequestSnapshot:
        self.calls.append(("get_pull", repo, number))
        return self._pull(repo, number)

    async def list_open_pulls(self, repo: str) -> list[PullRequestSnapshot]:
        return []

    async def pulls_for_sha(self, repo: str, sha: str) -> list[PullRequestSnapshot]:
        return []

    async def required_checks(self, repo: str, branch: str) -> RequiredChecks:
        self.calls.append(("required_checks", repo, branch))
        return RequiredChecks()

    async def check_results(self, repo: str, sha: str) -> list[CheckResult]:
        return []

    async def list_reviews(self, repo: str, number: int) -> list[Review]:
        return []

    async def submit_review(
        self,
        repo: str,
        number: int,
        *,
        commit_sha: str,
        event: ReviewEvent,
        body: str,
        comments: Sequence[InlineComment] = (),
    ) -> Review:
        raise AssertionError("the gate never posts a review")

    async def merge(
        self, repo: str, number: int, *, head_sha: str, method: str = "merge"
    ) -> MergeResult:
        raise AssertionError("the gate never merges")

    async def access(self, repo: str) -> AccessFacts:
        raise AssertionError("not asked by the gate")

    async def merge_permission(self, repo: str, pull: PullRequestSnapshot) -> str | None:
        return None

    async def user_permission(self, repo: str, user: str) -> str:
        return "write"

    async def find_comment(self, repo: str, number: int, marker: str) -> Comment | None:
        return None

    async def create_comment(self, repo: str, number: int, body: str) -> Comment:
        return Comment(1, "reviewbot", body)

    async def edit_comment(self, repo: str, comment_id: int, body: str) -> Comment:
        return Comment(comment_id, "reviewbot", body)

    def ref_ops(self) -> RefOps:
        raise Unsupported("the gate never moves a branch")

    async def aclose(self) -> None:
        pass


@pytest.fixture
def fake_forge(monkeypatch: pytest.MonkeyPatch) -> Iterator[StubForge]:
    """Registers the forge ``fake``: its name, its ingress row and its adapter row."""
    stub = StubForge()
    names = (*models.FORGES, "fake")
    # Every module that took the name list by value sees the longer one.
    for module in list(sys.modules.values()):
        if getattr(module, "FORGES", None) is models.FORGES:
            monkeypatch.setattr(module, "FORGES", names)
    monkeypatch.setitem(
        FORGE_KINDS,
        "fake",
        ForgeKind(
            name="fake",
            event_headers=("X-Fake-Event",),
            delivery_headers=("X-Fake-Delivery",),
            signature_headers=("X-Fake-Signature",),
            verify=fake_verify,
            parse=fake_trigger,
        ),
    )

    def build(settings: Settings, options: AdapterOptions) -> Forge:
        return stub

    monkeypatch.setitem(
        FORGE_ADAPTERS,
        "fake",
        AdapterKind(
            name="fake",
            section=lambda settings: FakeSection(),
            address=lambda settings: stub.url,
            build=build,
        ),
    )
    # The journal's kept headers are worked out once from the fixed table: this test extends
    # the table, so they are worked out again with the fake forge's row, and after it without.
    kept_header_names.cache_clear()
    yield stub
    kept_header_names.cache_clear()


async def test_a_third_forge_is_parsed_and_dispatched(
    tmp_path: Path, fake_forge: StubForge
) -> None:
    body = json.dumps({"repo": "Acme/API", "number": 5, "head": SHA}).encode()
    headers = {
        "Content-Type": "application/json",
        "X-Fake-Event": "change",
        "X-Fake-Delivery": "fake-1",
        "X-Fake-Signature": sign_gitea(FAKE_SECRET, body),
    }
    # forges=None: the service builds its adapters from the adapter table.
    async with running_server(make_settings(tmp_path / "data")) as server:
        assert server.service.forges == {"fake": fake_forge}
        status, answer = await server.post("/webhooks/fake", body, headers)
        assert (status, answer) == (202, {"delivery_id": "fake-1", "status": "queued"})

        wrong = {**headers, "X-Fake-Signature": sign_gitea(b"another secret", body)}
        status, answer = await server.post("/webhooks/fake", body, wrong)
        assert (status, answer["error"]) == (401, "signature_invalid")

        stored = await server.wait_done("fake-1")
        assert stored.status == journal.DONE
        assert (stored.source, stored.event) == ("fake", "change")
        [decision] = await server.decisions_of("fake-1")
    assert (decision.forge, decision.repo, decision.number) == ("fake", "acme/api", 5)
    assert decision.reason_code != "delivery_unresolved", decision.detail
    # The gate asked the fake forge's adapter, and no other, about the PR.
    assert ("get_pull", "acme/api", 5) in fake_forge.calls


async def test_another_casing_or_a_huge_forge_name_is_refused_and_not_echoed_whole(
    tmp_path: Path,
) -> None:
    async with running_server(make_settings(tmp_path / "data"), forges={}) as server:
        headers = {
            "Content-Type": "application/json",
            "X-GitHub-Event": "ping",
            "X-GitHub-Delivery": "d-casing",
            "X-Hub-Signature-256": sign_github(GITHUB_SECRET.encode(), PING),
        }
        for name in ("GitHub", "GITEA", "x" * 4000):
            status, body = await server.post(f"/webhooks/{name}", PING, headers)
            assert status == 404 and body["error"] == "unknown_forge", (name[:20], body)
            assert len(body["detail"]) < 300, len(body["detail"])
        assert server.stored_ids() == []
        with server.db.read() as tx:
            kept = tx.all("SELECT forge, detail FROM refused_webhooks")
        assert all(len(r["forge"]) <= 200 and len(r["detail"]) <= 2000 for r in kept), kept
