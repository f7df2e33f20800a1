"""GitHub's published GraphQL schema (tests/fixtures/github-graphql) for the suite: every query
a test sends to the simulated ``POST /graphql`` must validate against it, and every answer
must have the shape the query asked for (each selected field, no other, of its schema type).
"""

from __future__ import annotations

from typing import Any

import graphql
from graphql import GraphQLSchema

from reviewbot.sim.github_graphql import load_schema
from tests.support.paths import REPO_ROOT

SCHEMA_FILE = REPO_ROOT / "tests" / "fixtures" / "github-graphql" / "schema.graphql"
SCALARS: dict[str, type | tuple[type, ...]] = {
    "Int": int,
    "Float": (int, float),
    "Boolean": bool,
}


def github_schema() -> GraphQLSchema:
    return load_schema(SCHEMA_FILE)


def query_problems(source: str) -> list[str]:
    """Why GitHub's schema refuses ``source`` (empty: it validates)."""
    try:
        document = graphql.parse(source)
    except graphql.GraphQLError as exc:
        return [exc.message]
    return [e.message for e in graphql.validate(github_schema(), document)]


def shape_problems(source: str, data: Any) -> list[str]:
    """Where ``data`` (an answer's ``data``) is not the shape ``source`` selects."""
    schema = github_schema()
    document = graphql.parse(source)
    operation = next(
        d for d in document.definitions if isinstance(d, graphql.OperationDefinitionNode)
    )
    root = schema.query_type
    assert root is not None
    problems: list[str] = []
    _walk(schema, root, operation.selection_set, data, "data", problems)
    return problems


def _walk(
    schema: GraphQLSchema,
    type_: Any,
    selection_set: graphql.SelectionSetNode | None,
    value: Any,
    where: str,
    problems: list[str],
) -> None:
    if graphql.is_non_null_type(type_):
        if value is None:
            problems.append(f"{where}: null for a non-null {type_}")
            return
        _walk(schema, type_.of_type, selection_set, value, where, problems)
        return
    if value is None:
        return  # a nullable field may be null (an error beside it says why)
    if graphql.is_list_type(type_):
        if not isinstance(value, list):
            problems.append(f"{where}: expected a list")
            return
        for i, item in enumerate(value):
            _walk(schema, type_.of_type, selection_set, item, f"{where}[{i}]", problems)
        return
    if graphql.is_enum_type(type_):
        if value not in type_.values:
            problems.append(f"{where}: {value!r} is not a {type_.name}")
        return
    if graphql.is_scalar_type(type_):
        expected = SCALARS.get(type_.name, str)
        if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
            problems.append(f"{where}: {value!r} is not a {type_.name}")
        return
    if not isinstance(value, dict):
        problems.append(f"{where}: expected an object of {type_.name}")
        return
    concrete = type_
    if graphql.is_abstract_type(type_):
        name = value.get("__typename")
        concrete = schema.get_type(name) if isinstance(name, str) else None
        if concrete is None or not schema.is_sub_type(type_, concrete):
            problems.append(f"{where}: __typename {name!r} is not a {type_.name}")
            return
    expected_keys: dict[str, tuple[Any, graphql.SelectionSetNode | None]] = {}
    _collect(schema, concrete, selection_set, expected_keys)
    if set(value) != set(expected_keys):
        problems.append(
            f"{where}: keys {sorted(value)} where the query selects {sorted(expected_keys)}"
        )
    for key, (field_type, sub) in expected_keys.items():
        if key in value:
            _walk(schema, field_type, sub, value[key], f"{where}.{key}", problems)


def _collect(
    schema: GraphQLSchema,
    concrete: Any,
    selection_set: graphql.SelectionSetNode | None,
    into: dict[str, tuple[Any, graphql.SelectionSetNode | None]],
) -> None:
    for selection in selection_set.selections if selection_set else ():
        if isinstance(selection, graphql.FieldNode):
            key = selection.alias.value if selection.alias else selection.name.value
            if selection.name.value == "__typename":
                into[key] = (graphql.GraphQLNonNull(graphql.GraphQLString), None)
            else:
                field = concrete.fields[selection.name.value]
                into[key] = (field.type, selection.selection_set)
        elif isinstance(selection, graphql.InlineFragmentNode):
            condition = selection.type_condition
            target = schema.get_type(condition.name.value) if condition else concrete
            if target is concrete or (
                target is not None
                and graphql.is_abstract_type(target)
                and schema.is_sub_type(target, concrete)
            ):
                _collect(schema, concrete, selection.selection_set, into)
