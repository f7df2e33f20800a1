"""What the bot needs on a repository against what its credentials hold (core/access.py)."""

from __future__ import annotations

from reviewbot.core.access import AccessFacts, access_lines, version_notes

DOCUMENTED = {
    "checks": "read",
    "contents": "write",
    "metadata": "read",
    "pull_requests": "write",
    "statuses": "read",
}


def test_the_documented_app_permissions_meet_every_required_need() -> None:
    lines = access_lines(AccessFacts("github", "acme/api", "app", granted=DOCUMENTED), merges=True)
    assert [line.permission for line in lines if not line.ok] == ["Workflows (read and write)"]
    assert all(line.ok for line in lines if line.required)


def test_merging_needs_contents_write_only_where_the_bot_merges() -> None:
    read_only = {**DOCUMENTED, "contents": "read"}
    facts = AccessFacts("github", "acme/api", "app", granted=read_only)
    (merge,) = [line for line in access_lines(facts, merges=True) if "merges" in line.used_for]
    assert merge.ok is False and merge.required
    (merge,) = [line for line in access_lines(facts, merges=False) if "merges" in line.used_for]
    assert merge.ok is False and not merge.required


def test_grants_the_forge_did_not_report_are_unknown() -> None:
    lines = access_lines(AccessFacts("github", "acme/api", "app", granted=None), merges=True)
    assert {line.ok for line in lines} == {None}


def test_a_gitea_writer_lacks_only_the_optional_admin_role() -> None:
    shown = {"admin": False, "push": True, "pull": True}
    lines = access_lines(AccessFacts("gitea", "acme/api", "token", shown=shown), merges=True)
    assert [(line.permission, line.required) for line in lines if not line.ok] == [("Admin", False)]


def test_what_a_server_version_lacks() -> None:
    assert version_notes("1.25.4", 300) == []
    (note,) = version_notes("1.22.6", 120)
    assert "added in 1.23" in note and "reconcile_interval_s = 120 s" in note
    (note,) = version_notes("11.0.1+gitea-1.22.0", 300)
    assert note.startswith("Forgejo")
    (note,) = version_notes("nightly", 300)
    assert "not recognised" in note
