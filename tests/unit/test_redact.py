"""A URL's user part is hidden before a configured value is shown."""

from __future__ import annotations

import pytest

from reviewbot.core.redact import url_for_display


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        ("https://user:pw@gitea.example.com/x", "https://<secret>@gitea.example.com/x"),
        ("https://ghp_token@api.github.com", "https://<secret>@api.github.com"),
        ("postgresql://app:pw@db:5432/rb", "postgresql://<secret>@db:5432/rb"),
        ("https://a:b@c@host", "https://<secret>@host"),  # the last @ ends the user part
        ("https://api.github.com", "https://api.github.com"),
        ("sqlite:///data/db.sqlite", "sqlite:///data/db.sqlite"),
        (
            "postgresql://db/rb?sslmode=require&password=pw",
            "postgresql://db/rb?sslmode=require&password=<secret>",
        ),
        (
            "postgresql://a:b@db/rb?sslpassword=k",
            "postgresql://<secret>@db/rb?sslpassword=<secret>",
        ),
        ("https://h/x?access_token=t&page=2", "https://h/x?access_token=<secret>&page=2"),
        ("merge", "merge"),
        ("http://[::1", "http://[::1"),  # not a URL urlsplit reads: shown as given
    ],
)
def test_url_for_display(given: str, shown: str) -> None:
    assert url_for_display(given) == shown
