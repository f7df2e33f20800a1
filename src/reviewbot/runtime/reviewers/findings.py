"""The output boundary of an external reviewer: the findings it prints (or reports
through the ``report_finding`` tool), read into core :class:`Finding` values."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from reviewbot.core.errors import ReviewbotError
from reviewbot.core.findings import Finding, Severity


class FindingModel(BaseModel):
    """One finding as a reviewer prints it. Unknown keys are ignored."""

    model_config = ConfigDict(extra="ignore", str_strip_whitespace=True)

    path: str = Field(min_length=1, max_length=1024)
    line: int = Field(ge=1, le=10_000_000, strict=True)
    message: str = Field(min_length=1, max_length=10_000)
    severity: Literal["error", "warning", "info"]

    @field_validator("path")
    @classmethod
    def _relative_path(cls, value: str) -> str:
        if any(ch in value for ch in "\0\r\n\\"):
            raise ValueError("path holds a control character or a backslash")
        while value.startswith("./"):
            value = value[2:]
        parts = value.split("/")
        if value.startswith("/") or ".." in parts or not value:
            raise ValueError("path must be relative to the repository root, without '..'")
        return value


class FindingsEnvelope(BaseModel):
    model_config = ConfigDict(extra="ignore")

    findings: list[FindingModel]


_FINDINGS_LIST: TypeAdapter[list[FindingModel]] = TypeAdapter(list[FindingModel])
_ENVELOPE_OR_LIST: TypeAdapter[FindingsEnvelope | list[FindingModel]] = TypeAdapter(
    Annotated[FindingsEnvelope | list[FindingModel], Field(union_mode="left_to_right")]
)


class MalformedFindings(ReviewbotError, ValueError):
    """The output is not JSON findings; the message says where."""


def to_finding(model: FindingModel, *, source: str) -> Finding:
    return Finding(model.path, model.line, model.message, Severity(model.severity), source)


def parse_findings(raw: bytes, *, source: str = "") -> list[Finding]:
    """Findings from a reviewer's stdout; anything else raises :class:`MalformedFindings`."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedFindings(f"output is not UTF-8 (byte {exc.start})") from None
    if not text.strip():
        raise MalformedFindings("output is empty; a reviewer with nothing to say prints []")
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MalformedFindings(
            f"output is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except RecursionError:
        raise MalformedFindings("output nests JSON arrays or objects too deeply") from None
    except ValueError as exc:  # an integer with more digits than Python converts
        raise MalformedFindings(f"output is not usable JSON: {exc}") from None
    if not isinstance(data, list | dict):
        raise MalformedFindings(
            'output must be a list of findings or {"findings": [...]}, '
            f"not a JSON {type(data).__name__}"
        )
    try:
        parsed = (
            FindingsEnvelope.model_validate(data).findings
            if isinstance(data, dict)
            else _FINDINGS_LIST.validate_python(data)
        )
    except ValidationError as exc:
        raise MalformedFindings(_first_problem(exc, enveloped=isinstance(data, dict))) from None
    except RecursionError:
        raise MalformedFindings("output nests JSON arrays or objects too deeply") from None
    return [to_finding(model, source=source) for model in parsed]


def _first_problem(exc: ValidationError, *, enveloped: bool) -> str:
    err = exc.errors()[0]
    loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"])
    where = ("" if enveloped else "findings") + loc
    more = exc.error_count() - 1
    return f"{where.lstrip('.')}: {err['msg']}" + (f" (and {more} more)" if more else "")
