"""Every command's ``--help`` ends with an example of that very command.

The commands are found by walking the parser, so a command added later is checked too.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from reviewbot.cli import COMMAND_MODULES, build_parser, main


def commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[str, ...]]:
    yield path
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from commands(sub, (*path, name))


ALL = list(commands(build_parser()))


def test_the_walk_finds_every_command_module_and_nested_commands() -> None:
    top = {path[0] for path in ALL if len(path) == 1}
    assert top == set(COMMAND_MODULES)
    assert ("db", "query") in ALL and ("token", "create") in ALL


def test_demo_is_the_first_command_listed(capsys: pytest.CaptureFixture[str]) -> None:
    assert COMMAND_MODULES[0] == "demo"
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "reviewbot demo" in out.split("Example", 1)[1]


@pytest.mark.parametrize("path", ALL, ids=lambda p: " ".join(p) or "reviewbot")
def test_help_has_an_example_of_the_command(
    path: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*path, "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert "\nExample" in out, f"reviewbot {' '.join(path)} --help has no example"
    example = out.split("\nExample", 1)[1]
    assert f"reviewbot {' '.join(path)}".rstrip() in example, example


@pytest.mark.parametrize("path", ALL, ids=lambda p: " ".join(p) or "reviewbot")
def test_help_is_plain_text(path: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    # The descriptions are the modules' docstrings, written with reStructuredText marks.
    with pytest.raises(SystemExit):
        main([*path, "--help"])
    out = capsys.readouterr().out
    assert "``" not in out, out


def test_explain_has_plain_words_for_every_reason_code() -> None:
    from reviewbot.cli.explain import PLAIN_WORDS
    from reviewbot.core.reasons import ReasonCode

    assert {code.value for code in ReasonCode} <= set(PLAIN_WORDS)
