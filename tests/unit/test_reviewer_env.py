"""The environment of an external reviewer: an allow-list, and nothing from it leaks.

The last tests run a real child process that dumps what it received, so they prove what a
reviewer actually sees, not only what the builder returns.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from reviewbot.runtime.reviewers.runner import (
    ALLOWED_ENV,
    ALLOWED_ENV_PREFIXES,
    env_allowed,
    reviewer_environment,
    run_external_reviewers,
    variable_env_name,
)
from reviewbot.runtime.reviewers.runs import start_run
from reviewbot.runtime.reviewers.sessions import SessionManager, SessionTokenInvalid
from reviewbot.workflowdb.access import DBAccess
from reviewbot.workflowdb.paths import WorkflowPaths

SECRETS = {
    "REVIEWBOT_GITHUB__TOKEN": "ghp_secret_forge_token_value",
    "REVIEWBOT_GITHUB__WEBHOOK_SECRET": "github-webhook-secret-value",
    "REVIEWBOT_GITHUB__PRIVATE_KEY_PATH": "/secret/keys/app-private-key.pem",
    "REVIEWBOT_GITHUB__APP_ID": "424242",
    "REVIEWBOT_GITEA__TOKEN": "gitea-token-secret-value",
    "REVIEWBOT_GITEA__WEBHOOK_SECRET": "gitea-webhook-secret-value",
    "REVIEWBOT_DATABASE_URL": "sqlite:////secret/db.sqlite",
    "GITHUB_TOKEN": "ghs_another_secret_value",
    "AWS_SECRET_ACCESS_KEY": "aws-secret-value",
    "SSH_AUTH_SOCK": "/tmp/ssh-agent.sock",
    "PYTHONPATH": "/secret/pythonpath",
    "LD_PRELOAD": "/secret/preload.so",
}

# What a reviewer may see, exactly: the names below, plus VAR_* and STEP_*.
PINNED_NAMES = {
    "PATH",
    "HOME",
    "LANG",
    "REVIEWBOT_TRIGGER_FILE",
    "REVIEWBOT_RUN_FOLDER",
    "REVIEWBOT_DB_ACCESS",
    "REVIEWBOT_TOOLS_SOCKET",
    "REVIEWBOT_SESSION_TOKEN",
}

# Writes the environment it received to env.json in the run folder, prints no findings.
# Its whole environment, as the message of its one finding.
DUMP_ENV = (
    "import json, os; print(json.dumps([{'path': 'env', 'line': 1, 'severity': 'info', "
    "'message': json.dumps(dict(os.environ))}]))"
)


def test_the_allow_list_is_pinned() -> None:
    assert set(ALLOWED_ENV) == PINNED_NAMES
    assert ALLOWED_ENV_PREFIXES == ("VAR_", "STEP_")


@pytest.mark.parametrize("name", sorted(PINNED_NAMES))
def test_each_pinned_name_is_allowed(name: str) -> None:
    assert env_allowed(name)


@pytest.mark.parametrize("name", sorted(SECRETS))
def test_secrets_are_not_allowed(name: str) -> None:
    assert not env_allowed(name)


@pytest.mark.parametrize("name", ["VAR_FORGE", "STEP_NAME", "VAR_", "var_lower"])
def test_prefixes(name: str) -> None:
    assert env_allowed(name) is name.startswith(("VAR_", "STEP_"))


def test_builder_keeps_only_the_allow_list() -> None:
    parent = {
        "PATH": "/usr/bin:/bin",
        "HOME": "/home/bot",
        "LANG": "C.UTF-8",
        "LC_ALL": "C",
        "VAR_FROM_PARENT": "kept",
        "STEP_NAME": "review",
        "REVIEWBOT_TRIGGER_FILE": "/parent/value/must/not/win",
        "REVIEWBOT_DB_ACCESS": "read-write",  # the bot's bound; the step gets its own value
        **SECRETS,
    }
    env = reviewer_environment(
        parent,
        trigger_file=Path("/runs/r1/delivery.json"),
        run_folder=Path("/runs/r1"),
        db_access=DBAccess.READ,
        tools_socket="/run/reviewbot/tools.sock",
        session_token="rbs_token",
        variables={"forge": "gitea", "head_sha": "abc"},
    )
    assert set(env) == PINNED_NAMES | {"VAR_FROM_PARENT", "STEP_NAME", "VAR_FORGE", "VAR_HEAD_SHA"}
    assert env["REVIEWBOT_TRIGGER_FILE"] == "/runs/r1/delivery.json"
    assert env["REVIEWBOT_RUN_FOLDER"] == "/runs/r1"
    assert env["REVIEWBOT_DB_ACCESS"] == "read"
    assert env["VAR_FORGE"] == "gitea"
    assert env["VAR_HEAD_SHA"] == "abc"
    for secret in SECRETS.values():
        assert all(secret not in value for value in env.values())


@pytest.mark.parametrize(
    ("access", "value"),
    [(DBAccess.NONE, "none"), (DBAccess.READ, "read"), (DBAccess.READ_WRITE, "read-write")],
)
def test_db_access_spelling(access: DBAccess, value: str) -> None:
    env = reviewer_environment({}, trigger_file=Path("t"), run_folder=Path("r"), db_access=access)
    assert env["REVIEWBOT_DB_ACCESS"] == value
    # No tools socket: no socket and no token, and PATH still has a default.
    assert "REVIEWBOT_TOOLS_SOCKET" not in env and "REVIEWBOT_SESSION_TOKEN" not in env
    assert env["PATH"]


def test_variable_names() -> None:
    assert variable_env_name("number") == "VAR_NUMBER"
    assert variable_env_name("VAR_OWNER") == "VAR_OWNER"
    with pytest.raises(ValueError, match="cannot be an environment variable"):
        variable_env_name("bad name=1")


async def test_a_real_child_sees_exactly_the_allow_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("REVIEWBOT_DB_ACCESS", "read-write")
    monkeypatch.setenv("LANG", "C.UTF-8")  # a UTF-8 locale: Python adds no LC_CTYPE of its own
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("VAR_FROM_PARENT", "kept")
    monkeypatch.setenv("STEP_NAME", "external-review")
    paths = WorkflowPaths(tmp_path / "data").ensure()
    run = start_run(paths, "run-env", {"delivery_id": "d1"})
    sessions = SessionManager()
    command = f"{shlex.quote(sys.executable)} -c {shlex.quote(DUMP_ENV)}"
    tools_socket = tmp_path / "tools" / "tools.sock"  # its folder is what the sandbox binds
    tools_socket.parent.mkdir(mode=0o700)

    with sessions.run("run-env", db_access=DBAccess.READ_WRITE) as session:
        outcome = await run_external_reviewers(
            [command],
            run=run,
            sessions=sessions,
            run_session_id=session.id,
            tools_socket=tools_socket,
            variables={"forge": "github", "number": "7"},
            db_access=DBAccess.READ,
        )

    assert outcome.errors == ()
    (dumped_env,) = outcome.findings
    child = json.loads(dumped_env.message)
    # PWD is the sandbox's: bwrap sets it to the folder it starts the reviewer in.
    assert child.pop("PWD") == str(run.path)
    assert set(child) == PINNED_NAMES | {"VAR_FROM_PARENT", "STEP_NAME", "VAR_FORGE", "VAR_NUMBER"}
    assert child["REVIEWBOT_TRIGGER_FILE"] == str(run.delivery_file)
    assert child["REVIEWBOT_RUN_FOLDER"] == str(run.path)
    assert child["REVIEWBOT_DB_ACCESS"] == "read"
    # Where the sandbox shows the run's socket (the host's path when the sandbox is off).
    assert child["REVIEWBOT_TOOLS_SOCKET"] in ("/run/reviewbot/tools.sock", str(tools_socket))
    assert child["VAR_NUMBER"] == "7"
    assert child["STEP_NAME"] == "external-review"
    dumped = json.dumps(child)
    for name, secret in SECRETS.items():
        assert secret not in dumped, name
    # The token was a session token of the step, and it died with the step.
    token = child["REVIEWBOT_SESSION_TOKEN"]
    assert token.startswith("rbs_")
    with pytest.raises(SessionTokenInvalid):
        sessions.authenticate(token)
