"""The ``reviewbot`` command line. Each command group lives in its own module here.

A command module exposes ``register(subparsers)``; the handler it sets as ``func`` takes
the parsed arguments and returns the exit code. A refusal raises :class:`CommandError`
(or a known domain error) and becomes one line on stderr and a non-zero exit.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shlex
import shutil
import sys
from collections.abc import Mapping, Sequence

from reviewbot import __version__
from reviewbot.config import ConfigError
from reviewbot.core.errors import ReviewbotError
from reviewbot.workflowdb.access import AccessDenied

# Command modules, in the order ``reviewbot --help`` lists them.
COMMAND_MODULES: tuple[str, ...] = (
    "demo",
    "serve",
    "db",
    "review",
    "gate",
    "explain",
    "replay",
    "doctor",
    "token",
    "lease",
    "merge",
    "queue",
    "mcp",
    "sim",
)


class CommandError(ReviewbotError):
    """A refusal with a one-line reason; ``exit_status`` is the process's exit status."""

    code = "command_failed"

    def __init__(self, message: str, exit_status: int = 1) -> None:
        super().__init__(message)
        self.exit_status = exit_status


INVOKED_AS_ENV = "REVIEWBOT_INVOKED_AS"
CLIENT_ENV = "REVIEWBOT_CLIENT"
SESSION_ID_ENV = "REVIEWBOT_SESSION_ID"
MAX_DECLARED_CHARS = 200


def add_client_args(parser: argparse.ArgumentParser) -> None:
    """``--client`` and ``--session-id``: who acts, declared by the caller, never guessed."""
    parser.add_argument(
        "--client", help=f"the program acting (default: ${CLIENT_ENV}; one of them is required)"
    )
    parser.add_argument(
        "--session-id",
        help=f"the session it acts in (default: ${SESSION_ID_ENV}; one of them is required)",
    )


def declared_client(
    args: argparse.Namespace, environ: Mapping[str, str] = os.environ
) -> tuple[str, str]:
    """The client and session the caller declared (flags first, then the environment); a
    missing one is refused naming both flags and both variables."""
    client = (args.client or environ.get(CLIENT_ENV, "")).strip()
    session = (args.session_id or environ.get(SESSION_ID_ENV, "")).strip()
    missing = [
        name for name, value in (("--client", client), ("--session-id", session)) if not value
    ]
    if missing:
        raise CommandError(
            f"{' and '.join(missing)} missing: this command acts as a client, so declare "
            f"--client NAME and --session-id ID (or set {CLIENT_ENV} and {SESSION_ID_ENV}); "
            "reviewbot never guesses who acts",
            exit_status=2,
        )
    for name, value in (("--client", client), ("--session-id", session)):
        if len(value) > MAX_DECLARED_CHARS or not value.isprintable():
            raise CommandError(
                f"{name}: at most {MAX_DECLARED_CHARS} printable characters", exit_status=2
            )
    return client, session


def declared_actor(client: str, session: str) -> str:
    """The actor a lease's history records for a command-line call."""
    return f"cli client {client!r} session {session!r}"


def invoked_as(argv0: str | None = None, environ: Mapping[str, str] = os.environ) -> str:
    """How to run reviewbot the way this process was started, so that a printed command
    works when typed as it is: ``./dev reviewbot`` (``dev`` says so in REVIEWBOT_INVOKED_AS),
    ``python -m reviewbot``, ``reviewbot`` when that is what PATH finds, or the script's path.
    """
    given = environ.get(INVOKED_AS_ENV, "").strip()
    if given:
        return given
    argv0 = sys.argv[0] if argv0 is None else argv0
    name = os.path.basename(argv0)
    if not argv0 or name == "__main__.py" or argv0 == "-m":
        return f"{shlex.quote(sys.executable)} -m reviewbot"
    found = shutil.which(name)
    if found and os.path.realpath(found) == os.path.realpath(argv0):
        return name
    return shlex.quote(os.path.abspath(argv0))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="reviewbot",
        description="Review-and-merge bot for GitHub and Gitea/Forgejo.",
        epilog="Examples:\n"
        "  reviewbot demo          see the bot review and merge, nothing to set up\n"
        "  reviewbot serve         run it for real (configure a forge first)\n"
        "  reviewbot COMMAND --help",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"reviewbot {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        module = importlib.import_module(f"reviewbot.cli.{name}")
        module.register(sub)
    _plain_help(parser)
    return parser


def _plain_help(parser: argparse.ArgumentParser) -> None:
    """Drop the reStructuredText literal marks of the module docstrings the commands use as
    their descriptions: ``--help`` is read in a terminal, not rendered."""
    for text in ("description", "epilog"):
        value = getattr(parser, text)
        if value:
            setattr(parser, text, value.replace("``", ""))
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _plain_help(child)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except (CommandError, ConfigError, AccessDenied) as exc:
        print(f"reviewbot: {exc}", file=sys.stderr)
        if isinstance(exc, CommandError):
            return exc.exit_status
        return 2 if isinstance(exc, ConfigError) else 1  # 2: fix the configuration
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader (e.g. `| head`) went away: not an error of ours
        sys.stderr.close()
        return 0
    except Exception as exc:
        from reviewbot.store.database import is_transient  # only on this path: start-up cost

        if not is_transient(exc):
            raise
        # Locked, disk full, I/O error, the server gone: one line, not a traceback.
        print(f"reviewbot: the store failed ({exc}); try again when it answers", file=sys.stderr)
        return 1
    return code
