"""The tables of forge kinds: one row per forge in each, and no name is "the other forge"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reviewbot.cli.review import forge_url
from reviewbot.config import ConfigError, GiteaSettings, GitHubSettings, Settings
from reviewbot.core.models import FORGES
from reviewbot.forges.kinds import FORGE_ADAPTERS, adapter_kind
from reviewbot.ingress import delivery_file
from reviewbot.ingress.errors import DeliveryFileError, UnknownForge
from reviewbot.ingress.forge_kinds import FORGE_KINDS, forge_kind, forge_of_headers
from reviewbot.server.webhooks import event_of

TABLES = {"ingress": FORGE_KINDS, "adapters": FORGE_ADAPTERS}
GITEA_HEADERS = {"X-Gitea-Event-Type": "pull_request", "X-GitHub-Event": "pull_request"}


@pytest.mark.parametrize("table", TABLES, ids=str)
def test_every_forge_has_one_row_in_every_table_and_no_other_rows(table: str) -> None:
    rows = TABLES[table]
    assert sorted(rows) == sorted(FORGES), f"the {table} table and FORGES differ"
    for name, row in rows.items():
        assert row.name == name


def test_an_unknown_name_is_an_error_naming_the_known_forges() -> None:
    with pytest.raises(UnknownForge, match=r"unknown forge 'gitlab'; known forges: github, gitea"):
        forge_kind("gitlab")
    with pytest.raises(ConfigError, match=r"unknown forge 'gitlab': expected one of github, gitea"):
        adapter_kind("gitlab")


def test_the_event_of_an_unknown_forge_is_an_error_not_gitea_s() -> None:
    # Headers Gitea would send: an unknown name once fell back to reading them.
    assert event_of("gitea", GITEA_HEADERS) == "pull_request"
    with pytest.raises(UnknownForge, match="unknown forge 'gitlab'"):
        event_of("gitlab", GITEA_HEADERS)


def test_the_forge_url_of_an_unknown_forge_is_an_error_not_gitea_s() -> None:
    settings = Settings(
        github=GitHubSettings(api_url="https://gh.example/api"),
        gitea=GiteaSettings(url="https://git.example"),
    )
    assert forge_url(settings, "github") == "https://gh.example/api"
    assert forge_url(settings, "gitea") == "https://git.example"
    with pytest.raises(ConfigError, match="unknown forge 'gitlab'"):
        forge_url(settings, "gitlab")


def test_a_delivery_file_of_a_forge_without_a_row_is_an_error_not_gitea_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "delivery.json"
    payload = {"action": "opened", "number": 3, "repository": {"full_name": "acme/api"}}
    path.write_text(json.dumps({"headers": GITEA_HEADERS, "payload": payload}))
    # The headers name a forge the ingress table does not hold (a row removed, a name
    # misspelt): the file is refused by name, never parsed by another forge's parser.
    monkeypatch.setattr(delivery_file, "forge_of_headers", lambda headers: "gitlab")
    with pytest.raises(DeliveryFileError, match="unknown forge 'gitlab'; known forges"):
        delivery_file.trigger_from_delivery_file(path, configured_forges=("gitea",))


def test_a_forge_is_told_by_its_own_headers() -> None:
    assert forge_of_headers({"X-GitHub-Event": "ping"}) == "github"
    # Gitea also sends X-GitHub-Event; its own header names it.
    assert forge_of_headers(GITEA_HEADERS) == "gitea"
    assert forge_of_headers({"X-Forgejo-Event": "push"}) == "gitea"
    assert forge_of_headers({"X-Other-Event": "push"}) is None


def test_references_and_api_requests_accept_the_listed_forges_and_name_them_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from reviewbot.core import models
    from reviewbot.core.models import PullRef
    from reviewbot.ingress.api import parse_review_request
    from reviewbot.ingress.errors import TriggerError

    body = b'{"forge": "fake", "repo": "acme/api", "number": 3}'
    with pytest.raises(ValueError, match="unknown forge 'fake'; expected one of github, gitea"):
        PullRef.parse("fake:acme/api#3")
    with pytest.raises(TriggerError, match="forge: unknown forge 'fake'"):
        parse_review_request(body)
    # A forge added to the one list is accepted by both, with no other edit.
    monkeypatch.setattr(models, "FORGES", (*FORGES, "fake"))
    assert str(PullRef.parse("fake:acme/api#3")) == "fake:acme/api#3"
    assert parse_review_request(body).forge == "fake"
