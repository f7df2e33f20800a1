"""Validate request/response pairs against the forges' official (reduced) API descriptions.

GitHub's description is OpenAPI 3.0, Gitea's is Swagger 2.0. Both are turned into one JSON
Schema document each (draft 7) and checked with ``jsonschema``:

* ``nullable: true`` (OpenAPI) and ``x-nullable`` (Swagger) become ``anyOf [schema, null]``.
* ``oneOf`` is read as ``anyOf``: GitHub's ``private-user`` is also a valid ``public-user``, so a
  strict ``oneOf`` would reject every ``GET /user`` answer the description itself documents.
* Gitea's Swagger is generated from Go structs without nullability marks; pointer fields
  (``merged_at``, ``milestone``, ``merged_by``...) serialise as ``null``. So in Gitea's document
  every object property also accepts ``null``; a non-null value must still have the right type.
* Statuses an API may answer on any operation but that the descriptions do not list per
  operation (GitHub's 400 to a body that is not JSON, 401, 403, 404, 422 on Gitea, 429, 5xx,
  and GitHub's 304 to a conditional GET)
  are accepted, with GitHub's ``basic-error`` body where the answer has one.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7

GENERIC_STATUSES = {
    "github": {304, 400, 401, 403, 404, 429, 500, 502, 503, 504},
    "gitea": {401, 403, 404, 422, 429, 500, 502, 503, 504},
}

# Answers the forge gives that its description omits, each with where it comes from.
KNOWN_UNDOCUMENTED = {
    # merge_when_checks_succeed schedules the merge: Gitea answers 201 with no body
    # (routers/api/v1/repo/pull.go); the swagger lists only 200/404/405/409/423.
    ("gitea", "repoMergePullRequest", 201),
}


# Path parameters that may hold "/" although the description does not mark them (GitHub marks
# its own with ``x-multi-segment``): Gitea routes these as the rest of the path
# (``m.Put("/*", ...)`` under ``/branches``, ``m.Get("/compare/*", ...)`` in
# routers/api/v1/api.go), so ``reviewbot/queue/main/1`` is one branch name.
REST_OF_PATH = {
    ("gitea", "/repos/{owner}/{repo}/branches/{branch}"): "branch",
    ("gitea", "/repos/{owner}/{repo}/compare/{basehead}"): "basehead",
}


def _format_checker() -> jsonschema.FormatChecker:
    checker = jsonschema.FormatChecker(formats=())

    @checker.checks("date-time", raises=ValueError)
    def _date_time(value: object) -> bool:
        if not isinstance(value, str):
            return True
        datetime.fromisoformat(value.replace("Z", "+00:00"))
        return "T" in value

    @checker.checks("uri")
    def _uri(value: object) -> bool:
        return not isinstance(value, str) or bool(urlsplit(value).scheme)

    return checker


FORMATS = _format_checker()


def _convert(node: Any, *, nullable_props: bool) -> Any:
    """OpenAPI/Swagger schema dialect -> JSON Schema draft 7 (see the module docstring)."""
    if isinstance(node, list):
        return [_convert(item, nullable_props=nullable_props) for item in node]
    if not isinstance(node, dict):
        return node
    out = {k: _convert(v, nullable_props=nullable_props) for k, v in node.items()}
    if "oneOf" in out:
        out["anyOf"] = out.pop("oneOf")
    props = out.get("properties")
    if nullable_props and isinstance(props, dict) and out.get("type") in ("object", None):
        out["properties"] = {
            name: {"anyOf": [schema, {"type": "null"}]} for name, schema in props.items()
        }
    if out.pop("nullable", False) or out.pop("x-nullable", False):
        out = {"anyOf": [out, {"type": "null"}]}
    return out


@dataclass(frozen=True)
class Operation:
    method: str
    path: str
    operation_id: str
    raw: dict[str, Any]
    pointer: str  # JSON pointer of the operation object in the document
    multi_segment: frozenset[str] = frozenset()  # path parameters that may hold "/"

    @cached_property
    def regex(self) -> re.Pattern[str]:
        def group(found: re.Match[str]) -> str:
            name = found.group(1)
            # GitHub marks parameters that span segments (``heads/a/b``, ``main...x/y``).
            return f"(?P<{name}>.+)" if name in self.multi_segment else f"(?P<{name}>[^/]+)"

        pattern = re.sub(r"\\\{([a-zA-Z_]+)\\\}", group, re.escape(self.path))
        return re.compile(f"^{pattern}$")


class ForgeSpec:
    """One forge's description, able to validate a request and a response."""

    def __init__(self, forge: str, document: dict[str, Any]) -> None:
        self.forge = forge
        self.document = document
        self.swagger = "swagger" in document
        converted = _convert(copy.deepcopy(document), nullable_props=self.swagger)
        self.registry: Registry[Any] = Registry().with_resource(
            "spec", Resource.from_contents(converted, default_specification=DRAFT7)
        )
        self.operations: list[Operation] = []
        for path, item in document["paths"].items():
            for method, op in item.items():
                if method == "parameters":
                    continue
                pointer = f"/paths/{_escape(path)}/{method}"
                multi = frozenset(
                    str(p["name"])
                    for p in (self._resolve(dict(q)) for q in op.get("parameters", []))
                    if p.get("x-multi-segment")
                )
                rest = REST_OF_PATH.get((forge, path))
                multi = multi | {rest} if rest else multi
                self.operations.append(
                    Operation(method.upper(), path, op["operationId"], op, pointer, multi)
                )
        # Literal paths before templated ones, so /pulls/{n}/merge never matches /pulls/{n}.
        self.operations.sort(key=lambda o: o.path.count("{"))

    @classmethod
    def load(cls, reference_dir: Path, forge: str) -> ForgeSpec:
        path = reference_dir / forge / "openapi-reduced.json"
        return cls(forge, json.loads(path.read_text()))

    # ------------------------------------------------------------------ lookups
    def find(self, method: str, path: str) -> tuple[Operation, dict[str, str]] | None:
        for op in self.operations:
            if op.method != method.upper():
                continue
            match = op.regex.match(path)
            if match:
                return op, match.groupdict()
        return None

    def by_id(self, operation_id: str) -> Operation:
        for op in self.operations:
            if op.operation_id == operation_id:
                return op
        raise KeyError(operation_id)

    def _resolve(self, node: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in node:
            parts = node["$ref"].lstrip("#/").split("/")
            target: Any = self.document
            for part in parts:
                target = target[part.replace("~1", "/").replace("~0", "~")]
            node = target
        return node

    def _validate(self, value: Any, pointer: str) -> list[str]:
        schema = {"$ref": f"spec#{pointer}"}
        validator = jsonschema.Draft7Validator(
            schema, registry=self.registry, format_checker=FORMATS
        )
        errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
        return [
            f"{'/'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message[:300]}"
            for e in errors[:10]
        ]

    # ------------------------------------------------------------------ requests
    def _parameters(self, op: Operation) -> list[tuple[dict[str, Any], str]]:
        found: list[tuple[dict[str, Any], str]] = []
        for index, param in enumerate(op.raw.get("parameters", [])):
            pointer = f"{op.pointer}/parameters/{index}"
            if "$ref" in param:
                pointer = param["$ref"].lstrip("#")
            found.append((self._resolve(param), pointer))
        return found

    def validate_request(
        self,
        method: str,
        path: str,
        query: dict[str, list[str]] | None = None,
        body: Any = None,
        raw_body: bytes = b"",
    ) -> list[str]:
        located = self.find(method, path)
        if located is None:
            return [f"{method} {path}: no such operation in the {self.forge} description"]
        op, path_params = located
        problems: list[str] = []
        query = query or {}
        documented = set()
        body_param: tuple[dict[str, Any], str] | None = None
        for param, pointer in self._parameters(op):
            where, name = param["in"], param["name"]
            spec = param.get("schema", param)
            if where == "path":
                problems += _check_scalar(f"path {name}", path_params.get(name, ""), spec)
            elif where == "query":
                documented.add(name)
                values = query.get(name)
                if values is None:
                    if param.get("required"):
                        problems.append(f"query {name} is required")
                    continue
                for value in values:
                    item = spec.get("items", {}) if spec.get("type") == "array" else spec
                    problems += _check_scalar(f"query {name}", value, item)
            elif where == "body":
                body_param = (param, pointer)
        problems += [f"query {name} is not documented" for name in query if name not in documented]
        problems += self._check_body(op, body_param, body, raw_body)
        return [f"{op.operation_id}: {p}" for p in problems]

    def _check_body(
        self,
        op: Operation,
        body_param: tuple[dict[str, Any], str] | None,
        body: Any,
        raw_body: bytes,
    ) -> list[str]:
        if self.swagger:
            if body_param is None:
                return ["a body was sent to an operation that takes none"] if raw_body else []
            param, pointer = body_param
            required, schema_pointer = bool(param.get("required")), f"{pointer}/schema"
        else:
            request_body = op.raw.get("requestBody")
            if request_body is None:
                return ["a body was sent to an operation that takes none"] if raw_body else []
            required = bool(request_body.get("required"))
            schema_pointer = f"{op.pointer}/requestBody/content/application~1json/schema"
        if not raw_body:
            return ["the request body is required"] if required else []
        if body is None and raw_body.strip() != b"null":
            return ["the request body is not JSON"]
        return [f"body {e}" for e in self._validate(body, schema_pointer)]

    # ------------------------------------------------------------------ responses
    def validate_response(
        self, operation_id: str, status: int, body: Any, raw_body: bytes = b""
    ) -> list[str]:
        op = self.by_id(operation_id)
        responses = op.raw["responses"]
        key = str(status)
        problems: list[str] = []
        if (self.forge, operation_id, status) in KNOWN_UNDOCUMENTED:
            return [f"{operation_id} {status}: must have no body"] if raw_body else []
        if key not in responses:
            if status not in GENERIC_STATUSES[self.forge]:
                return [f"{operation_id}: status {status} is not documented"]
            if status == 304:
                return [f"{operation_id}: a 304 must have no body"] if raw_body else []
            if self.forge == "github":
                errors_pointer = "/components/schemas/basic-error"
                problems = [f"body {e}" for e in self._validate(body, errors_pointer)]
            elif raw_body and not isinstance(body, dict):
                problems = ["an error answer must be a JSON object"]
            return [f"{operation_id} {status}: {p}" for p in problems]
        pointer = f"{op.pointer}/responses/{key}"
        response = responses[key]
        if "$ref" in response:
            pointer = response["$ref"].lstrip("#")
            response = self._resolve(response)
        if self.swagger:
            schema_pointer = f"{pointer}/schema" if "schema" in response else None
        else:
            content = response.get("content", {})
            schema_pointer = (
                f"{pointer}/content/application~1json/schema"
                if "application/json" in content and "schema" in content["application/json"]
                else None
            )
        if schema_pointer is None:
            no_body = self.swagger and response.get("description", "").startswith("APIEmpty")
            if (status == 304 or no_body) and raw_body:
                problems.append("this answer must have an empty body")
            return [f"{operation_id} {status}: {p}" for p in problems]
        if not raw_body:
            return [f"{operation_id} {status}: the documented body is missing"]
        if body is None:
            return [f"{operation_id} {status}: the body is not JSON"]
        return [f"{operation_id} {status}: body {e}" for e in self._validate(body, schema_pointer)]


def _escape(path: str) -> str:
    return path.replace("~", "~0").replace("/", "~1")


def _check_scalar(label: str, value: str, spec: dict[str, Any]) -> list[str]:
    kind = spec.get("type")
    if kind == "integer" and not re.fullmatch(r"-?\d+", value):
        return [f"{label} must be an integer, got {value!r}"]
    if kind == "boolean" and value not in ("true", "false"):
        return [f"{label} must be true or false, got {value!r}"]
    if "enum" in spec and value not in [str(v) for v in spec["enum"]]:
        return [f"{label} must be one of {spec['enum']}, got {value!r}"]
    return []


class ForgeSpecs:
    """Both descriptions; validates simulator records (``RequestRecord``-like objects)."""

    def __init__(self, reference_dir: Path) -> None:
        self.specs = {forge: ForgeSpec.load(reference_dir, forge) for forge in ("github", "gitea")}

    def __getitem__(self, forge: str) -> ForgeSpec:
        return self.specs[forge]

    def check_record(self, record: Any, *, requests: bool = True) -> list[str]:
        spec = self.specs[record.forge]
        where = f"{record.method} {record.path} -> {record.status}"
        if not record.operation_id:
            return [f"{where}: not an operation of the {record.forge} description"]
        if record.operation_id == "graphql":  # not REST: checked against GitHub's schema
            return [f"{where}: {p}" for p in graphql_problems(record, requests=requests)]
        problems: list[str] = []
        if requests:
            problems += spec.validate_request(
                record.method, record.path, record.query, record.body, record.raw_request_body
            )
        if getattr(record, "dropped", False):
            return [f"{where}: {p}" for p in problems]  # no answer was sent
        problems += spec.validate_response(
            record.operation_id, record.status, record.response_body, record.raw_response_body
        )
        return [f"{where}: {p}" for p in problems]

    def check_records(self, records: Iterable[Any], *, requests: bool = True) -> list[str]:
        problems: list[str] = []
        for record in records:
            problems += self.check_record(record, requests=requests)
        return problems


def graphql_problems(record: Any, *, requests: bool) -> list[str]:
    """A ``POST /graphql`` exchange: the query validates against GitHub's schema, and the
    answer's data has the shape the query selects."""
    from tests.support.graphql_schema import query_problems, shape_problems

    body = record.body if isinstance(record.body, dict) else {}
    query = body.get("query")
    if not isinstance(query, str):
        return ["graphql: the request holds no query"] if requests else []
    refused = query_problems(query)
    problems = [f"graphql: {p}" for p in refused] if requests else []
    answer = record.response_body
    if record.status == 200 and not refused and isinstance(answer, dict) and "data" in answer:
        problems += [f"graphql answer: {p}" for p in shape_problems(query, answer["data"])]
    return problems
