"""Settings: a TOML file plus REVIEWBOT_* environment (``__`` nests), environment wins."""

from __future__ import annotations

from pathlib import Path

import pytest

from reviewbot.config import ConfigError, Settings, load_settings
from reviewbot.core.models import RepoRef


def pem_key() -> bytes:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


TOML = """
data_dir = "from-file"
port = 9000

[github]
api_url = "https://github.example/api/v3"
bot_login = "file-bot"

[gitea]
url = "https://gitea.example/"

[leases]
lease_s = 30
renew_s = 20
retry_s = 5

[defaults]
required_checks = ["ci"]

[repos."gitea:acme/api"]
required_checks = ["build", "test"]
automerge = true
merge_method = "squash"
"""


@pytest.fixture
def config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "conf.toml"
    path.write_text(TOML)
    monkeypatch.setenv("REVIEWBOT_CONFIG", str(path))
    return path


def test_defaults_without_file_or_environment() -> None:
    settings = load_settings()
    assert settings.data_dir == Path("./reviewbot-data")
    assert settings.database_path == Path("./reviewbot-data/db/db.sqlite")
    assert (settings.host, settings.port) == ("127.0.0.1", 8080)
    assert settings.github.api_url == "https://api.github.com"
    assert settings.db_access is None
    assert (settings.leases.lease_s, settings.leases.renew_s, settings.leases.retry_s) == (
        15,
        10,
        2,
    )


def test_toml_file_is_read(config_file: Path) -> None:
    settings = load_settings()
    assert settings.data_dir == Path("from-file")
    assert settings.port == 9000
    assert settings.github.api_url == "https://github.example/api/v3"
    assert settings.gitea.api_url == "https://gitea.example/api/v1"
    assert settings.leases.lease_s == 30
    rules = settings.rules_for(RepoRef("gitea", "acme", "api"))
    assert rules is not None
    assert rules.required_checks == ["build", "test"]
    assert rules.automerge and rules.merge_method == "squash"
    other = settings.rules_for(RepoRef("github", "acme", "other"))
    assert other is not None and other.required_checks == ["ci"]


def test_reviewbot_toml_in_working_dir_is_read_when_no_config_is_named(tmp_path: Path) -> None:
    (tmp_path / "reviewbot.toml").write_text('host = "0.0.0.0"\n')
    assert load_settings().host == "0.0.0.0"


def test_environment_nests_with_double_underscore_and_wins(
    config_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REVIEWBOT_DATA_DIR", "from-env")
    monkeypatch.setenv("REVIEWBOT_PORT", "9100")
    monkeypatch.setenv("REVIEWBOT_GITHUB__API_URL", "https://env.example/api")
    monkeypatch.setenv("REVIEWBOT_GITEA__WEBHOOK_SECRET", "s3cret")
    monkeypatch.setenv("REVIEWBOT_LEASES__LEASE_S", "40")
    monkeypatch.setenv("REVIEWBOT_DB_ACCESS", "read")
    settings = load_settings()
    assert settings.data_dir == Path("from-env")
    assert settings.port == 9100
    assert settings.github.api_url == "https://env.example/api"
    assert settings.github.bot_login == "file-bot"  # the file still fills what env leaves
    assert settings.gitea.webhook_secret is not None
    assert settings.gitea.webhook_secret.get_secret_value() == "s3cret"
    assert settings.leases.lease_s == 40
    assert settings.leases.renew_s == 20
    assert settings.db_access == "read"


def test_database_url_names_the_sqlite_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REVIEWBOT_DATABASE_URL", "sqlite:///elsewhere/store.sqlite")
    assert load_settings().database_path == Path("elsewhere/store.sqlite")


def _one_line_error() -> str:
    with pytest.raises(ConfigError) as err:
        load_settings()
    message = str(err.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    ("lease", "renew", "retry", "problem"),
    [
        ("10", "10", "2", "renew_s (10) must be less than lease_s (10)"),
        ("10", "15", "2", "renew_s (15) must be less than lease_s (10)"),
        ("15", "10", "9", "renew_s (10) must be greater than 1.2 x retry_s"),
    ],
)
def test_invalid_lease_timing_is_one_line_naming_the_key(
    monkeypatch: pytest.MonkeyPatch, lease: str, renew: str, retry: str, problem: str
) -> None:
    monkeypatch.setenv("REVIEWBOT_LEASES__LEASE_S", lease)
    monkeypatch.setenv("REVIEWBOT_LEASES__RENEW_S", renew)
    monkeypatch.setenv("REVIEWBOT_LEASES__RETRY_S", retry)
    message = _one_line_error()
    assert message.startswith("invalid setting leases (REVIEWBOT_LEASES)")
    assert problem in message


def test_invalid_lease_timing_in_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[leases]\nlease_s = 5\nrenew_s = 10\n")
    monkeypatch.setenv("REVIEWBOT_CONFIG", str(path))
    message = _one_line_error()
    assert "leases" in message and "renew_s (10) must be less than lease_s (5)" in message


def test_bad_number_names_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REVIEWBOT_PORT", "seventy")
    message = _one_line_error()
    assert message.startswith("invalid setting port (REVIEWBOT_PORT)")


@pytest.mark.parametrize("key", ["acme/api", "bitbucket:acme/api", "gitea:acme", "gitea:/api"])
def test_bad_repo_key_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str) -> None:
    path = tmp_path / "repos.toml"
    path.write_text(f'[repos."{key}"]\nrequired_checks = ["ci"]\n')
    monkeypatch.setenv("REVIEWBOT_CONFIG", str(path))
    message = _one_line_error()
    assert message.startswith(f"invalid setting repos (in {path}): ")
    assert f"repos key {key!r} must look like FORGE:OWNER/NAME" in message
    assert "settings (REVIEWBOT_)" not in message


@pytest.mark.parametrize("key", ["gitea:acme/a b", "github:acme/api/x", "gitea:acme/\\u0007"])
def test_repo_key_with_characters_no_forge_allows_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str
) -> None:
    path = tmp_path / "repos.toml"
    path.write_text(f'[repos."{key}"]\nrequired_checks = ["ci"]\n')
    monkeypatch.setenv("REVIEWBOT_CONFIG", str(path))
    assert "must look like FORGE:OWNER/NAME" in _one_line_error()


def test_repo_keys_are_case_insensitive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "repos.toml"
    path.write_text('[repos."github:Acme/Demo"]\nrequired_checks = ["ci/test"]\n')
    monkeypatch.setenv("REVIEWBOT_CONFIG", str(path))
    settings = load_settings()
    assert list(settings.repos) == ["github:acme/demo"]
    for spelling in ("acme/demo", "ACME/DEMO", "Acme/Demo"):
        rules = settings.rules_for(RepoRef.parse(spelling, forge="github"))
        assert rules is not None and rules.required_checks == ["ci/test"]
    assert settings.rules_for(RepoRef.parse("acme/demo", forge="gitea")) is None


def test_repo_keys_differing_only_by_case_stop_the_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "repos.toml"
    path.write_text(
        '[repos."github:acme/demo"]\nrequired_checks = ["ci/test"]\n'
        '[repos."github:Acme/Demo"]\nautomerge = true\n'
    )
    monkeypatch.setenv("REVIEWBOT_CONFIG", str(path))
    message = _one_line_error()
    assert "'github:acme/demo' and 'github:Acme/Demo' name the same repository" in message


def test_unknown_key_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "typo.toml"
    path.write_text("[github]\napi_ulr = 'x'\n")
    monkeypatch.setenv("REVIEWBOT_CONFIG", str(path))
    assert _one_line_error() == (
        f"invalid setting github.api_ulr (REVIEWBOT_GITHUB__API_ULR or {path}): unknown key; "
        "did you mean github.api_url (REVIEWBOT_GITHUB__API_URL)?"
    )


def test_mistyped_repository_rule_offers_the_right_key_and_no_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "typo.toml"
    path.write_text('[repos."gitea:acme/api"]\nrequried_checks = ["ci/*"]\n')
    monkeypatch.setenv("REVIEWBOT_CONFIG", str(path))
    assert _one_line_error() == (
        f'invalid setting repos."gitea:acme/api".requried_checks (in {path}): unknown key; '
        "did you mean required_checks?"
    )


def test_mistyped_repository_rule_from_the_environment_names_no_impossible_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("REVIEWBOT_REPOS__GITEA:ACME/API__REQURIED_CHECKS", '["ci/*"]')
    message = _one_line_error()
    assert "REQURIED" not in message and "did you mean required_checks?" in message


@pytest.mark.parametrize(
    ("name", "meant"),
    [
        ("REVIEWBOT_GITEA_TOKEN", "REVIEWBOT_GITEA__TOKEN"),
        ("REVIEWBOT_PORTT", "REVIEWBOT_PORT"),
        ("REVIEWBOT_GITHUB__WEBHOOK_SECRT", "REVIEWBOT_GITHUB__WEBHOOK_SECRET"),
    ],
)
def test_near_miss_environment_variable_is_refused_with_did_you_mean(
    monkeypatch: pytest.MonkeyPatch, name: str, meant: str
) -> None:
    monkeypatch.setenv(name, "x")
    assert _one_line_error() == (
        f"environment variable {name} is not a setting; did you mean {meant}?"
    )


def test_unrelated_reviewbot_variables_are_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("REVIEWBOT_SESSION_TOKEN", "REVIEWBOT_VENV", "REVIEWBOT_SOMETHING_ELSE"):
        monkeypatch.setenv(name, "x")
    load_settings()


@pytest.mark.parametrize(
    ("variable", "value", "problem"),
    [
        ("REVIEWBOT_GITEA__URL", "gitea.example.com", "is not an http(s) URL"),
        ("REVIEWBOT_GITEA__URL", "ftp://gitea.example.com", "is not an http(s) URL"),
        ("REVIEWBOT_GITHUB__API_URL", "api.github.com", "is not an http(s) URL"),
        (
            "REVIEWBOT_GITEA__URL",
            "https://gitea.example.com/api/v1/",
            "without /api/v1 (reviewbot adds it): https://gitea.example.com",
        ),
    ],
)
def test_urls_are_checked_when_settings_load(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, problem: str
) -> None:
    monkeypatch.setenv(variable, value)
    message = _one_line_error()
    assert f"({variable})" in message and problem in message


def test_gitea_url_under_a_path_is_kept() -> None:
    settings = Settings(gitea={"url": "https://example.com/gitea/"})
    assert settings.gitea.api_url == "https://example.com/gitea/api/v1"


def test_app_key_that_is_not_pem_is_refused_at_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = tmp_path / "app.pem"
    key.write_text("ghp_this-is-a-token-not-a-key\n")
    monkeypatch.setenv("REVIEWBOT_GITHUB__APP_ID", "7")
    monkeypatch.setenv("REVIEWBOT_GITHUB__PRIVATE_KEY_PATH", str(key))
    message = _one_line_error()
    assert message.startswith(f"github.private_key_path: {key} is not a PEM private key")


def test_app_key_that_is_missing_is_refused_at_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REVIEWBOT_GITHUB__APP_ID", "7")
    monkeypatch.setenv("REVIEWBOT_GITHUB__PRIVATE_KEY_PATH", str(tmp_path / "nope.pem"))
    message = _one_line_error()
    assert "cannot read" in message and "REVIEWBOT_GITHUB__PRIVATE_KEY_PATH" in message


def test_real_app_key_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = tmp_path / "app.pem"
    key.write_bytes(pem_key())
    monkeypatch.setenv("REVIEWBOT_GITHUB__APP_ID", "7")
    monkeypatch.setenv("REVIEWBOT_GITHUB__PRIVATE_KEY_PATH", str(key))
    assert load_settings().github.private_key_path == key


def test_missing_named_config_file_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REVIEWBOT_CONFIG", "nowhere.toml")
    assert _one_line_error() == "REVIEWBOT_CONFIG: config file nowhere.toml does not exist"


def test_toml_syntax_error_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "broken.toml"
    path.write_text("port = = 1\n")
    monkeypatch.setenv("REVIEWBOT_CONFIG", str(path))
    assert _one_line_error().startswith(f"config file {path}: TOML syntax error: ")


def test_config_file_that_is_a_directory_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "conf").mkdir()
    monkeypatch.setenv("REVIEWBOT_CONFIG", str(tmp_path / "conf"))
    assert _one_line_error().startswith(f"config file {tmp_path / 'conf'}: cannot read it: ")


def test_unsupported_database_scheme(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REVIEWBOT_DATABASE_URL", "mysql://x")
    settings = load_settings()
    with pytest.raises(ConfigError, match="unsupported scheme in 'mysql'"):
        _ = settings.database_path


def test_a_value_of_the_wrong_kind_shows_the_form_expected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "reviewbot.toml"
    path.write_text('[defaults]\nrequired_checks = "ci/test"\n')
    monkeypatch.setenv("REVIEWBOT_CONFIG", str(path))
    message = _one_line_error()
    assert message.startswith("invalid setting defaults.required_checks")
    assert 'got "ci/test"' in message and 'expected a list, e.g. ["ci/test", "ci/*"]' in message


def test_every_problem_is_shown_not_only_the_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "reviewbot.toml"
    path.write_text(
        'port = "eighty"\n[defaults]\nrequired_checks = "ci/test"\nautomerge = "maybe"\n'
    )
    monkeypatch.setenv("REVIEWBOT_CONFIG", str(path))
    with pytest.raises(ConfigError) as err:
        load_settings()
    lines = str(err.value).splitlines()
    assert lines[0] == "3 invalid settings:"
    assert "more problem" not in str(err.value)
    assert any(
        line.startswith("  - invalid setting port (") and "whole number" in line for line in lines
    )
    assert all(line.startswith("  - invalid setting ") for line in lines[1:])
    assert any("defaults.required_checks" in line and "a list" in line for line in lines)
    assert any("defaults.automerge" in line and "true or false" in line for line in lines)


def test_a_list_from_the_environment_is_shown_as_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REVIEWBOT_DEFAULTS__REQUIRED_CHECKS", "ci/test")
    message = _one_line_error()
    assert message.startswith("invalid setting defaults (REVIEWBOT_DEFAULTS__REQUIRED_CHECKS)")
    assert """REVIEWBOT_DEFAULTS__REQUIRED_CHECKS='["ci/test"]'""" in message
