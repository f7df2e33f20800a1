"""What an MCP client is shown of a tool's input, and the one way it names a pull request.

Every tool that names a PR takes it as ``pr`` (``FORGE:OWNER/REPO#N``), the spelling its
input schema documents, or as the ``forge``, ``repo`` and ``number`` its REST twin reads;
:func:`pr_spellings` turns the one into the other before the body model validates. The
descriptions a client sees are plain text (:func:`plain_text`).
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel

from reviewbot.core.errors import Refused
from reviewbot.core.models import PullRef

PR_FIELDS = ("forge", "repo", "number")
PR_DESCRIPTION = "the pull request, FORGE:OWNER/REPO#N (any casing), e.g. gitea:acme/api#12"
MAX_PR_CHARS = 300


def pull_style(model: type[BaseModel]) -> str | None:
    """How ``model`` names a PR: ``"pr"`` (one string), ``"fields"`` (forge, repo, number,
    as the REST bodies do), or ``None`` (it names no PR)."""
    fields = model.model_fields
    if "pr" in fields:
        return "pr"
    return "fields" if all(name in fields for name in PR_FIELDS) else None


def pr_spellings(model: type[BaseModel], arguments: dict[str, Any]) -> dict[str, Any]:
    """``arguments`` in the spelling ``model`` reads: every tool that names a PR takes it as
    ``pr`` (the documented spelling) or as ``forge``, ``repo`` and ``number``, whichever its
    REST twin reads. Naming it both ways at once is refused, never silently resolved."""
    style = pull_style(model)
    if style is None:
        return arguments
    split = [name for name in PR_FIELDS if name in arguments]
    if style == "fields" and "pr" in arguments:
        if split:
            raise Refused(
                f"arguments: name the PR once, as pr or as {', '.join(PR_FIELDS)}, not both",
                code="invalid_request",
            )
        rest = {k: v for k, v in arguments.items() if k != "pr"}
        pr = parse_pr_argument(arguments["pr"])
        return {**rest, "forge": pr.forge, "repo": pr.full_name, "number": pr.number}
    if style == "pr" and split:
        if "pr" in arguments:
            raise Refused(
                f"arguments: name the PR once, as pr or as {', '.join(PR_FIELDS)}, not both",
                code="invalid_request",
            )
        missing = [name for name in PR_FIELDS if name not in arguments]
        if missing:
            raise Refused(
                f"arguments: {', '.join(missing)} missing; name the PR as pr, FORGE:OWNER/REPO#N",
                code="invalid_request",
            )
        forge, repo, number = (arguments[name] for name in PR_FIELDS)
        if not (isinstance(forge, str) and isinstance(repo, str) and type(number) is int):
            raise Refused(
                "arguments: forge and repo must be strings and number an integer",
                code="invalid_request",
            )
        rest = {k: v for k, v in arguments.items() if k not in PR_FIELDS}
        return {**rest, "pr": f"{forge}:{repo}#{number}"}
    return arguments


def parse_pr_argument(value: object) -> PullRef:
    if not isinstance(value, str):
        raise Refused("arguments.pr: a string FORGE:OWNER/REPO#N", code="invalid_request")
    if len(value) > MAX_PR_CHARS:
        raise Refused(
            f"arguments.pr: longer than {MAX_PR_CHARS} characters", code="invalid_request"
        )
    try:
        return PullRef.parse(value)
    except ValueError as exc:
        raise Refused(f"arguments.pr: {exc}", code="invalid_request") from None


# reStructuredText roles and literals of docstrings: an MCP client shows plain text.
_ROLE = re.compile(r":[a-z]+:`~?(?:[\w.]+\.)?([^`]+)`")
_LITERAL = re.compile(r"``([^`]*)``")


def plain_text(text: str) -> str:
    """A docstring as plain text: ``x`` and :func:`a.b.x` become x."""
    return _LITERAL.sub(r"\1", _ROLE.sub(r"\1", text))


def _plain_descriptions(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            key: plain_text(value)
            if key == "description" and isinstance(value, str)
            else _plain_descriptions(value)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [_plain_descriptions(item) for item in node]
    return node


def tool_schema(model: type[BaseModel], example: dict[str, Any] | None) -> dict[str, Any]:
    """The input schema a client sees: plain-text descriptions and, for a tool that names a
    PR, ``pr`` as the one documented spelling (forge, repo and number are still accepted,
    marked deprecated)."""
    schema: dict[str, Any] = _plain_descriptions(model.model_json_schema())
    style = pull_style(model)
    properties = schema.setdefault("properties", {})
    if style is not None:
        required = schema.get("required", [])
        # Required when its parts are (a review request may leave out the forge).
        needs_pr = "pr" in required or all(n in required for n in ("repo", "number"))
        for name in PR_FIELDS:
            entry = properties.setdefault(
                name, {"type": "integer" if name == "number" else "string"}
            )
            entry["deprecated"] = True
            entry["description"] = (
                f"the PR's {name} as a separate field, still read; name the PR with pr instead"
            )
        properties["pr"] = {**properties.get("pr", {}), "type": "string", "maxLength": MAX_PR_CHARS}
        properties["pr"]["description"] = PR_DESCRIPTION
        others = [n for n in required if n not in (*PR_FIELDS, "pr")]
        schema["required"] = [*(["pr"] if needs_pr else []), *others]
        if not schema["required"]:
            del schema["required"]
        schema["properties"] = {"pr": properties.pop("pr"), **properties}
    if example is not None:
        schema["examples"] = [example]
    return schema
