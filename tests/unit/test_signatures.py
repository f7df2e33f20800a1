"""Webhook signatures: the published vectors, and every way a signature must fail."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote_plus

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reviewbot.ingress.errors import UnknownForge
from reviewbot.ingress.forge_kinds import verify_delivery
from reviewbot.ingress.signatures import (
    FORM_CONTENT_TYPE,
    form_payload,
    gitea_signed_bytes,
    json_bytes,
    sign_gitea,
    sign_github,
    verify_gitea,
    verify_github,
)


def _vectors(reference_dir: Path) -> list[dict[str, Any]]:
    data = json.loads((reference_dir / "signature-test-vectors.json").read_text("utf-8"))
    vectors: list[dict[str, Any]] = data["vectors"]
    assert vectors
    return vectors


def _flip(data: bytes, index: int) -> bytes:
    return data[:index] + bytes([data[index] ^ 0x01]) + data[index + 1 :]


def test_every_published_vector_verifies(reference_dir: Path) -> None:
    for vector in _vectors(reference_dir):
        secret = vector["secret"].encode()
        body = vector["payload"].encode()
        github_header = vector["published"]["X-Hub-Signature-256"]
        gitea_header = vector["derived"]["X-Gitea-Signature"]
        assert verify_github(secret, body, github_header), vector["id"]
        assert verify_gitea(secret, body, gitea_header), vector["id"]
        assert sign_github(secret, body) == github_header
        assert sign_gitea(secret, body) == gitea_header
        forgejo = vector["derived"].get("X-Forgejo-Signature")
        if forgejo is not None:
            assert verify_delivery("gitea", secret, {"X-Forgejo-Signature": forgejo}, body)


def test_a_flipped_byte_anywhere_fails(reference_dir: Path) -> None:
    for vector in _vectors(reference_dir):
        secret = vector["secret"].encode()
        body = vector["payload"].encode()
        header = vector["published"]["X-Hub-Signature-256"]
        hex_value = vector["derived"]["X-Gitea-Signature"]
        for index in range(len(body)):
            assert not verify_github(secret, _flip(body, index), header)
            assert not verify_gitea(secret, _flip(body, index), hex_value)
        for index in range(len(secret)):
            assert not verify_github(_flip(secret, index), body, header)
        for index in range(len("sha256="), len(header)):
            wrong = header[:index] + ("0" if header[index] != "0" else "1") + header[index + 1 :]
            assert not verify_github(secret, body, wrong)


@pytest.mark.parametrize("header", [None, "", "sha256=", "sha1=abc", "sha256=zz", "sha256"])
def test_github_refuses_missing_empty_or_malformed_headers(header: str | None) -> None:
    assert not verify_github(b"secret", b"{}", header)


def test_github_needs_the_prefix_and_gitea_refuses_it() -> None:
    body = b'{"foo":"bar"}'
    hex_value = sign_gitea(b"mysecret", body)
    assert not verify_github(b"mysecret", body, hex_value)
    assert not verify_gitea(b"mysecret", body, "sha256=" + hex_value)
    assert not verify_gitea(b"mysecret", body, hex_value + "00")


@pytest.mark.parametrize("secret", [None, b""])
def test_no_configured_secret_refuses_everything(secret: bytes | None) -> None:
    body = b"{}"
    assert not verify_github(secret, body, sign_github(b"", body))
    assert not verify_gitea(secret, body, sign_gitea(b"", body))


def test_gitea_empty_signature_header_is_refused() -> None:
    # What Gitea sends when its webhook has no secret.
    headers = {"X-Gitea-Signature": "", "X-Hub-Signature-256": "sha256="}
    assert not verify_delivery("gitea", b"secret", headers, b"{}")


def test_gitea_form_delivery_signs_the_json_in_the_payload_field() -> None:
    document = json.dumps({"action": "opened", "title": "ä & = +"}).encode()
    body = b"payload=" + quote_plus(document).encode()
    headers = {"Content-Type": FORM_CONTENT_TYPE, "X-Gitea-Signature": sign_gitea(b"s", document)}
    assert gitea_signed_bytes(body, FORM_CONTENT_TYPE) == document
    assert verify_delivery("gitea", b"s", headers, body)
    # A signature over the form-encoded body is not what Gitea sends.
    headers["X-Gitea-Signature"] = sign_gitea(b"s", body)
    assert not verify_delivery("gitea", b"s", headers, body)


def test_github_form_delivery_signs_the_raw_body() -> None:
    document = b'{"zen":"hi"}'
    body = b"payload=" + quote_plus(document).encode()
    headers = {"content-type": FORM_CONTENT_TYPE, "x-hub-signature-256": sign_github(b"s", body)}
    assert verify_delivery("github", b"s", headers, body)
    assert json_bytes(body, FORM_CONTENT_TYPE) == document


def test_form_body_without_a_single_payload_field_is_refused() -> None:
    assert form_payload(b"other=1") is None
    assert form_payload(b"payload=1&payload=2") is None
    headers = {"Content-Type": FORM_CONTENT_TYPE, "X-Gitea-Signature": sign_gitea(b"s", b"")}
    assert not verify_delivery("gitea", b"s", headers, b"other=1")


def test_json_content_type_is_the_body_itself() -> None:
    assert json_bytes(b"{}", "application/json; charset=utf-8") == b"{}"
    assert json_bytes(b"{}", None) == b"{}"


def test_unknown_forge_is_an_error_not_another_forge() -> None:
    # A GitHub signature sent under a name without a row is never checked as GitHub's.
    with pytest.raises(UnknownForge, match="unknown forge 'gitlab'; known forges: github, gitea"):
        verify_delivery("gitlab", b"s", {"X-Hub-Signature-256": sign_github(b"s", b"")}, b"")


@given(secret=st.binary(min_size=1, max_size=64), body=st.binary(max_size=256))
def test_sign_then_verify_round_trips(secret: bytes, body: bytes) -> None:
    assert verify_github(secret, body, sign_github(secret, body))
    assert verify_gitea(secret, body, sign_gitea(secret, body))
    assert not verify_github(secret + b"x", body, sign_github(secret, body))
    assert not verify_gitea(secret, body + b"x", sign_gitea(secret, body))
