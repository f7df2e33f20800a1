"""``reviewbot lease acquire --wait`` and ``reviewbot lease leave`` as real processes on a
real SQLite store: the command line waits in the same line as the API's callers."""

from __future__ import annotations

import json
from pathlib import Path

from tests.integration.process_support import run_reviewbot

HEAD = "a" * 40
PR = "gitea:acme/api#12"


def cli_env(tmp_path: Path) -> dict[str, str]:
    config = tmp_path / "reviewbot.toml"
    config.write_text("[defaults]\n")
    return {
        "REVIEWBOT_CONFIG": str(config),
        "REVIEWBOT_DATA_DIR": str(tmp_path / "data"),
        # Each command is a new Python process: long terms, so no test here is about expiry.
        "REVIEWBOT_LEASES__LEASE_S": "600",
        "REVIEWBOT_LEASES__RENEW_S": "300",
        # Who acts, declared (the command line never guesses it).
        "REVIEWBOT_CLIENT": "line-test",
        "REVIEWBOT_SESSION_ID": "s-line",
    }


def test_the_command_line_waits_in_line_and_leaves_it(tmp_path: Path) -> None:
    env = cli_env(tmp_path)

    def lease(*args: str) -> tuple[int, str, str]:
        done = run_reviewbot("lease", *args, cwd=tmp_path, env=env)
        return done.returncode, done.stdout, done.stderr

    a, b, c = (
        lease("register", "--name", n, "--client", "t", "--session-id", n)[1].strip()
        for n in ("a", "b", "c")
    )
    rc, out, err = lease("acquire", PR, "--worker", a, "--head", HEAD, "--json")
    assert rc == 0, err
    epoch = json.loads(out)["epoch"]

    rc, out, err = lease(
        "acquire", PR, "--worker", b, "--head", HEAD, "--wait", "0", "--issue", "#7", "--json"
    )
    assert rc == 1 and "lease_held" in err
    refused = json.loads(out)
    assert (refused["error"], refused["holder"], refused["position"]) == ("lease_held", a, 1)
    rc, out, err = lease("acquire", PR, "--worker", c, "--head", HEAD, "--wait", "0", "--json")
    assert (rc, json.loads(out)["position"]) == (1, 2)

    rc, _, err = lease("acquire", PR, "--worker", c, "--head", HEAD, "--wait", "400")
    assert rc == 1 and "invalid_request" in err and "max_wait_s" in err

    rc, _, err = lease("release", PR, "--worker", a, "--epoch", str(epoch))
    assert rc == 0, err
    rc, out, err = lease("acquire", PR, "--worker", b, "--head", HEAD, "--wait", "5", "--json")
    assert rc == 0, err
    granted = json.loads(out)
    # Each command is a process of its own: its grant starts above the last one's reservation.
    assert (granted["holder"], granted["issue"]) == (b, "#7") and granted["epoch"] > epoch

    rc, out, err = lease("leave", PR, "--worker", c, "--json")
    assert rc == 0 and json.loads(out)["left"] is True, err
    rc, out, err = lease("history", PR)
    assert rc == 0 and "issue=#7" in out and "by line" in out, out
