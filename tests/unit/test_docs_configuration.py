"""The configuration reference and the example file cannot drift from the settings model."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import BaseModel

from reviewbot.config import ENV_PREFIX, RepoRules, Settings, load_settings
from reviewbot.core.models import RepoRef

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "configuration.md"
EXAMPLE = ROOT / "deploy" / "reviewbot.example.toml"


def _env_names(model: type[BaseModel], prefix: str) -> list[str]:
    names = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if name in ("repos", "defaults"):
            continue
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            names += _env_names(annotation, f"{prefix}{name.upper()}__")
        else:
            names.append(f"{prefix}{name.upper()}")
    return names


SETTING_VARS = _env_names(Settings, ENV_PREFIX)


@pytest.mark.parametrize("variable", SETTING_VARS)
def test_every_setting_is_documented(variable: str) -> None:
    assert f"`{variable}`" in REFERENCE.read_text(), f"{variable} missing from {REFERENCE.name}"


@pytest.mark.parametrize("key", sorted(RepoRules.model_fields))
def test_every_repository_rule_is_documented(key: str) -> None:
    assert f"| `{key}` |" in REFERENCE.read_text()


def test_reference_names_no_setting_that_does_not_exist() -> None:
    documented = set(re.findall(r"`(REVIEWBOT_[A-Z0-9_]+)`", REFERENCE.read_text()))
    allowed = set(SETTING_VARS) | {"REVIEWBOT_CONFIG"}
    assert documented - allowed == set()


def test_example_file_is_valid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REVIEWBOT_CONFIG", str(EXAMPLE))
    settings = load_settings()
    assert settings.port == 8080
    assert settings.rules_for(RepoRef("github", "acme", "api")) is not None
    assert settings.rules_for(RepoRef("github", "acme", "api")).automerge  # type: ignore[union-attr]


def test_every_example_key_is_a_setting() -> None:
    import tomllib

    data = tomllib.loads(EXAMPLE.read_text())
    # Settings forbids unknown keys, so validating the raw file proves each key is real.
    Settings.model_validate(data)
