"""GitHub's GraphQL endpoint (``POST /graphql``), answered from the simulator's state.

The executable schema is GitHub's published one (``tests/fixtures/github-graphql``, from the
npm package ``@octokit/graphql-schema``) built by graphql-core, so a query GitHub would refuse
(a field that does not exist, a wrong argument) is refused here the same way, and every answer
is shaped by that schema. Resolvers exist for the fields the bot reads (a repository's pull
request: its state, head, base, labels, the head commit's check runs and statuses with
``isRequired``, the base branch's ``refUpdateRule`` and rulesets, reviews, issue comments,
and ``rateLimit``); any other field answers null (an error where the schema says non-null).

Each part is guarded by the permission of the REST route that shows the same thing
(``sim/permissions.py``): a caller refused there gets GitHub's ``FORBIDDEN`` error at that
field and null in its place, the rest of the answer intact. ``rateLimit.cost`` follows
GitHub's documented calculation (the connections' requested sizes, over 100, at least 1).
Without the schema file (an installed package without the test fixtures) the endpoint
answers 404, as a server without GraphQL does.
"""

from __future__ import annotations

import functools
import inspect
import math
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import graphql
from graphql import GraphQLError, GraphQLSchema

from reviewbot.sim.checks import (
    github_rules,
    latest_check_runs,
    latest_statuses,
    protection_for,
    rulesets_for,
)
from reviewbot.sim.clock import forge_time
from reviewbot.sim.errors import ApiError
from reviewbot.sim.github_auth import GitHubIdentity, identify
from reviewbot.sim.http import Call, Reply, Route
from reviewbot.sim.state import SimPull, SimRepo

if TYPE_CHECKING:
    from reviewbot.sim.github_api import GitHubApi

SCHEMA_ENV = "REVIEWBOT_SIM_GITHUB_GRAPHQL_SCHEMA"
DEFAULT_SCHEMA = (
    Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "github-graphql" / "schema.graphql"
)
POINTS_PER_HOUR = 5000
MAX_PAGE = 100
MAX_NODES = 500_000  # GitHub's node limit of one query
MAX_TOKENS = 50_000  # a query's tokens parsed at most (the bot's query has about 300)
# The only schema-validation findings of the published file (see the fixture's README).
TOLERATED = "is not deprecated, so implementation field"
_UNKNOWN_FIELD = re.compile(r"Cannot query field '(?P<field>\w+)' on type '(?P<type>\w+)'")

Json = dict[str, Any]
_MERGEABLE = {True: "MERGEABLE", False: "CONFLICTING"}


def schema_path() -> Path:
    return Path(os.environ.get(SCHEMA_ENV) or DEFAULT_SCHEMA)


@functools.cache
def load_schema(path: Path) -> GraphQLSchema:
    """GitHub's schema from its SDL file, built once per process."""
    schema = graphql.build_schema(path.read_text(encoding="utf-8"), assume_valid_sdl=True)
    unexpected = [e for e in graphql.validate_schema(schema) if TOLERATED not in e.message]
    if unexpected:
        raise ValueError(f"{path}: {unexpected[0].message}")
    schema._validation_errors = []  # the tolerated findings, checked above
    return schema


def query_cost(schema: GraphQLSchema, document: graphql.DocumentNode, values: Json) -> int:
    """GitHub's point cost: each connection's ``first``/``last`` times the sizes of the
    connections above it, summed, divided by 100, rounded, and at least 1."""
    operation = next(
        (d for d in document.definitions if isinstance(d, graphql.OperationDefinitionNode)),
        None,
    )
    if operation is None:
        return 1
    fragments = {
        d.name.value: d
        for d in document.definitions
        if isinstance(d, graphql.FragmentDefinitionNode)
    }

    def size(node: graphql.FieldNode) -> int | None:
        for argument in node.arguments or ():
            if argument.name.value in ("first", "last"):
                value = graphql.value_from_ast_untyped(argument.value, values)
                return int(value) if isinstance(value, int) else None
        return None

    def walk(selection_set: graphql.SelectionSetNode | None, multiplier: int) -> int:
        if selection_set is None:
            return 0
        total = 0
        for selection in selection_set.selections:
            if isinstance(selection, graphql.FieldNode):
                n = size(selection)
                if n is None:
                    total += walk(selection.selection_set, multiplier)
                else:
                    total += multiplier
                    total += walk(selection.selection_set, multiplier * n)
            elif isinstance(selection, graphql.InlineFragmentNode):
                total += walk(selection.selection_set, multiplier)
            elif isinstance(selection, graphql.FragmentSpreadNode):
                fragment = fragments.get(selection.name.value)
                total += walk(fragment.selection_set if fragment else None, multiplier)
        return total

    return max(1, math.floor(walk(operation.selection_set, 1) / 100 + 0.5))


def node_count(document: graphql.DocumentNode, values: Json) -> int:
    """The most nodes a query may return (GitHub refuses more than ``MAX_NODES``): each
    connection's ``first``/``last`` times those above it, summed."""
    total = 0

    def walk(selection_set: graphql.SelectionSetNode | None, multiplier: int) -> None:
        nonlocal total
        for selection in selection_set.selections if selection_set else ():
            inner = getattr(selection, "selection_set", None)
            n = None
            if isinstance(selection, graphql.FieldNode):
                for argument in selection.arguments or ():
                    if argument.name.value in ("first", "last"):
                        value = graphql.value_from_ast_untyped(argument.value, values)
                        n = value if isinstance(value, int) else None
            if n is None:
                walk(inner, multiplier)
            else:
                total += multiplier * n
                walk(inner, multiplier * n)

    for definition in document.definitions:
        if isinstance(definition, graphql.OperationDefinitionNode):
            walk(definition.selection_set, 1)
    return total


def _error(message: str, kind: str) -> GraphQLError:
    return GraphQLError(message, extensions={"type": kind})


class GitHubGraphQL:
    """The ``POST /graphql`` route of the simulated GitHub."""

    def __init__(self, api: GitHubApi) -> None:
        self.api = api
        self.sim = api.sim
        self._used: dict[str, tuple[int, float]] = {}  # identity -> (points used, reset)

    def route(self) -> Route:
        return Route("POST", "/graphql", "graphql", self.handle)

    async def handle(self, call: Call) -> Reply:
        path = schema_path()
        if not path.is_file():
            raise ApiError(404, "Not Found")
        schema = load_schema(path)
        body = call.body if isinstance(call.body, dict) else {}
        source = body.get("query")
        values = body.get("variables") or {}
        operation = body.get("operationName")
        if (
            not isinstance(source, str)
            or not isinstance(values, dict)
            or not isinstance(operation, str | None)
        ):
            raise ApiError(400, "Problems parsing JSON")
        who = identify(self.sim, call.request.headers.get("Authorization"))
        try:
            document = graphql.parse(source, max_tokens=MAX_TOKENS)
            refused = graphql.validate(schema, document)
            nodes = node_count(document, values) if not refused else 0
        except GraphQLError as exc:
            return Reply(200, {"errors": [_formatted(exc)]})
        except RecursionError:  # nesting no schema allows this deep
            return Reply(200, {"errors": [{"message": "Query is too deeply nested"}]})
        if refused:
            return Reply(200, {"errors": [_formatted(e) for e in refused]})
        if nodes > MAX_NODES:
            limit = {
                "type": "MAX_NODE_LIMIT_EXCEEDED",
                "message": f"This query requests up to {nodes} possible nodes which exceeds "
                f"the maximum limit of {MAX_NODES}.",
            }
            return Reply(200, {"errors": [limit]})
        cost = query_cost(schema, document, values)
        remaining, reset = self._charge(who, cost)
        context = _Context(self, who, call, cost, remaining, reset)
        executed = graphql.execute(
            schema,
            document,
            root_value=context.root(),
            variable_values=values,
            operation_name=operation,
        )
        result = await executed if inspect.isawaitable(executed) else executed
        answer: Json = {"data": result.data}
        if result.errors:
            answer["errors"] = [_formatted(e) for e in result.errors]
        headers = {
            "x-ratelimit-limit": str(POINTS_PER_HOUR),
            "x-ratelimit-remaining": str(remaining),
            "x-ratelimit-used": str(POINTS_PER_HOUR - remaining),
            "x-ratelimit-reset": str(math.ceil(reset)),
            "x-ratelimit-resource": "graphql",
        }
        return Reply(200, answer, headers)

    def _charge(self, who: GitHubIdentity, cost: int) -> tuple[int, float]:
        key = f"{who.kind}:{who.login}:{who.installation_id}"
        now = self.sim.now()
        used, reset = self._used.get(key, (0, now + 3600))
        if reset <= now:
            used, reset = 0, now + 3600
        used += cost
        self._used[key] = (used, reset)
        return max(0, POINTS_PER_HOUR - used), reset

    def points_used(self) -> int:
        """Every point charged so far, over all callers (for the benchmarks)."""
        return sum(used for used, _ in self._used.values())


class _Context:
    """One request's resolvers: who asks, and which REST route's permission guards what."""

    def __init__(
        self,
        endpoint: GitHubGraphQL,
        who: GitHubIdentity,
        call: Call,
        cost: int,
        remaining: int,
        reset: float,
    ) -> None:
        self.endpoint = endpoint
        self.api = endpoint.api
        self.sim = endpoint.sim
        self.json = endpoint.api.json
        self.who = who
        self.call = call
        self.cost = cost
        self.remaining = remaining
        self.reset = reset

    def root(self) -> Json:
        return {"repository": self.repository, "rateLimit": self.rate_limit}

    def rate_limit(self, _info: Any, dryRun: bool = False) -> Json:
        return {
            "cost": self.cost,
            "limit": POINTS_PER_HOUR,
            "nodeCount": 0,
            "remaining": self.remaining,
            "resetAt": forge_time(self.reset),
            "used": POINTS_PER_HOUR - self.remaining,
        }

    def _allowed(self, operation: str, repo: SimRepo) -> None:
        """Raise GitHub's GraphQL refusal where the REST route ``operation`` refuses."""
        params = {"owner": repo.owner, "repo": repo.name}
        call = Call(
            sim=self.sim,
            request=self.call.request,
            params=params,
            body=None,
            login=self.who.login,
            installation_id=self.who.installation_id,
        )
        route = Route("GET", "", operation, self.endpoint.handle)
        authorization = self.call.request.headers.get("Authorization", "")
        try:
            self.api._check_installation_scope(self.who, call)
            self.api._check_permission(route, self.who, call, authorization)
        except ApiError as exc:
            if exc.status == 404:
                missing = f"Could not resolve to a Repository with the name '{repo.full_name}'."
                raise _error(missing, "NOT_FOUND") from None
            raise _error(exc.message, "FORBIDDEN") from None

    def repository(self, _info: Any, owner: str, name: str, **_: Any) -> Json | None:
        repo = self.sim.find_repo("github", owner, name)
        if repo is None:
            raise _error(
                f"Could not resolve to a Repository with the name '{owner}/{name}'.", "NOT_FOUND"
            )
        self._allowed("repos/get", repo)
        return {"pullRequest": lambda info, number: self.pull_request(repo, number)}

    def pull_request(self, repo: SimRepo, number: int) -> Json:
        self._allowed("pulls/get", repo)
        pull = repo.pulls.get(number)
        if pull is None:
            raise _error(
                f"Could not resolve to a PullRequest with the number of {number}.", "NOT_FOUND"
            )
        rest = self.json.pull(repo, pull)
        state = "MERGED" if pull.merged else pull.state.upper()
        mergeable = rest.get("mergeable")
        return {
            "number": pull.number,
            "state": state,
            "isDraft": pull.draft,
            "merged": pull.merged,
            "mergeable": "UNKNOWN" if mergeable is None else _MERGEABLE[bool(mergeable)],
            "title": pull.title,
            "url": rest["html_url"],
            "headRefName": pull.head_ref,
            "headRefOid": pull.head_sha,
            "baseRefName": pull.base,
            "mergeCommit": {"oid": pull.merge_commit_sha} if pull.merge_commit_sha else None,
            "author": _actor(pull.author),
            "labels": _paged([{"name": n} for n in pull.labels]),
            "baseRef": self.base_ref(repo, pull) if pull.base in repo.branches else None,
            "commits": _paged([{"commit": self.head_commit(repo, pull)}]),
            "reviews": lambda info, **a: self.reviews(repo, pull, a),
            "comments": lambda info, **a: self.comments(repo, pull, a),
        }

    def base_ref(self, repo: SimRepo, pull: SimPull) -> Json:
        def update_rule(_info: Any) -> Json | None:
            self._allowed("repos/get-branch", repo)
            protection = protection_for(repo, pull.base)
            if protection is None:
                return None
            contexts = list(protection.contexts) + [c for c, _ in protection.checks]
            return {
                "pattern": pull.base,
                "requiredStatusCheckContexts": list(dict.fromkeys(contexts)),
                "requiredApprovingReviewCount": protection.required_approvals,
                "requiresCodeOwnerReviews": False,
                "allowsDeletions": False,
                "allowsForcePushes": False,
                "blocksCreations": False,
                "requiresConversationResolution": False,
                "requiresLinearHistory": False,
                "requiresSignatures": False,
                "viewerAllowedToDismissReviews": False,
                "viewerCanPush": self.sim.permission(repo, self.who.login) in ("write", "admin"),
            }

        def rules(_info: Any, **a: Any) -> Json:
            self._allowed("repos/get-branch-rules", repo)
            nodes = [_rule(r) for r in self.json.branch_rules(repo, rulesets_for(repo, pull.base))]
            return _connection(nodes, a)

        return {
            "name": pull.base,
            "prefix": "refs/heads/",
            "refUpdateRule": update_rule,
            "rules": rules,
        }

    def head_commit(self, repo: SimRepo, pull: SimPull) -> Json:
        sha = pull.head_sha

        def rollup(_info: Any) -> Json | None:
            self._allowed("checks/list-for-ref", repo)
            self._allowed("repos/get-combined-status-for-ref", repo)
            statuses = latest_statuses(repo, sha)
            runs = latest_check_runs(repo, sha)
            if not statuses and not runs:
                return None
            rules = github_rules(repo, pull.base)
            required = set(rules.contexts) | {c for c, _ in rules.checks} if rules else set()
            nodes: list[Json] = []
            for run in runs:
                nodes.append(
                    {
                        "__typename": "CheckRun",
                        "name": run.name,
                        "status": run.status.upper(),
                        "conclusion": run.conclusion.upper() if run.conclusion else None,
                        "detailsUrl": run.details_url,
                        "startedAt": forge_time(run.started_at),
                        "completedAt": forge_time(run.completed_at)
                        if run.completed_at is not None
                        else None,
                        "isRequired": _required(run.name in required, pull),
                    }
                )
            for status in statuses:
                nodes.append(
                    {
                        "__typename": "StatusContext",
                        "context": status.context,
                        "state": status.state.upper(),
                        "targetUrl": status.target_url,
                        "createdAt": forge_time(status.created_at),
                        "isRequired": _required(status.context in required, pull),
                    }
                )
            return {"state": "PENDING", "contexts": lambda info, **a: _connection(nodes, a)}

        return {"oid": sha, "statusCheckRollup": rollup}

    def reviews(self, repo: SimRepo, pull: SimPull, args: Json) -> Json:
        self._allowed("pulls/list-reviews", repo)
        nodes = [
            {
                "databaseId": r.id,
                "state": r.state,
                "body": r.body,
                "submittedAt": forge_time(r.submitted_at) if r.submitted_at else None,
                "commit": {"oid": r.commit_id} if r.commit_id else None,
                "author": _actor(r.user),
            }
            for r in pull.reviews
            if r.state != "PENDING" or r.user == self.who.login
        ]
        return _connection(nodes, args)

    def comments(self, repo: SimRepo, pull: SimPull, args: Json) -> Json:
        self._allowed("issues/list-comments", repo)
        nodes = [
            {"databaseId": c.id, "body": c.body, "author": _actor(c.user)} for c in pull.comments
        ]
        return _connection(nodes, args)


def _required(required: bool, pull: SimPull) -> Callable[..., bool]:
    def answer(_info: Any, pullRequestNumber: int | None = None, **_: Any) -> bool:
        if pullRequestNumber is not None and pullRequestNumber != pull.number:
            raise _error("isRequired asks about another pull request", "UNPROCESSABLE")
        return required

    return answer


def _actor(login: str) -> Json:
    """An App's bot is ``NAME`` (a Bot) in GraphQL where REST says ``NAME[bot]``."""
    if login.endswith("[bot]"):
        return {"__typename": "Bot", "login": login.removesuffix("[bot]")}
    return {"__typename": "User", "login": login}


def _rule(rest: Json) -> Json:
    parameters = rest.get("parameters") or {}
    if rest["type"] == "required_status_checks":
        shown: Json = {
            "__typename": "RequiredStatusChecksParameters",
            "requiredStatusChecks": [
                {"context": c["context"], "integrationId": None}
                for c in parameters.get("required_status_checks") or ()
            ],
            "strictRequiredStatusChecksPolicy": False,
        }
    else:
        shown = {
            "__typename": "PullRequestParameters",
            "requiredApprovingReviewCount": parameters.get("required_approving_review_count"),
            "requireCodeOwnerReview": bool(parameters.get("require_code_owner_review")),
        }
    return {"type": str(rest["type"]).upper(), "parameters": shown}


def _paged(nodes: list[Json]) -> Callable[..., Json]:
    return lambda info, **a: _connection(nodes, a)


def _connection(nodes: Sequence[Json], args: Json) -> Json:
    """A connection page as GitHub serves it: ``first``/``last`` required, at most 100."""
    first, last = args.get("first"), args.get("last")
    if first is None and last is None:
        raise _error(
            "You must provide a `first` or `last` value to properly paginate the connection.",
            "MISSING_PAGINATION_BOUNDARIES",
        )
    for n in (first, last):
        if n is not None and not 0 <= n <= MAX_PAGE:
            too_many = f"Requesting {n} records exceeds the `first` limit of 100 records."
            raise _error(too_many, "EXCESSIVE_PAGINATION")
    start = _offset(args.get("after"))
    items = list(nodes)[start:]
    if first is not None:
        page = items[:first]
    else:
        page = items[-last:] if last else []
        start += len(items) - len(page)
    end = start + len(page)
    return {
        "nodes": page,
        "totalCount": len(nodes),
        "pageInfo": {
            "hasNextPage": end < len(nodes),
            "hasPreviousPage": start > 0,
            "startCursor": _cursor(start) if page else None,
            "endCursor": _cursor(end) if page else None,
        },
    }


def _cursor(offset: int) -> str:
    return f"cursor:{offset}"


def _offset(cursor: Any) -> int:
    if cursor is None:
        return 0
    text = str(cursor)
    if not text.startswith("cursor:") or not text[7:].isdigit():
        raise _error(f"`{text}` does not appear to be a valid cursor.", "INVALID_CURSOR_ARGUMENTS")
    return int(text[7:])


def _formatted(error: GraphQLError) -> Json:
    """graphql-core's error in GitHub's shape: ``type`` beside the message, and an unknown
    field named as GitHub names it (``undefinedField``)."""
    found: Json = {"message": error.message}
    if error.locations:
        found["locations"] = [{"line": at.line, "column": at.column} for at in error.locations]
    if error.path:
        found["path"] = list(error.path)
    extensions = dict(error.extensions or {})
    kind = extensions.pop("type", None)
    if kind is not None:
        found["type"] = kind
    unknown = _UNKNOWN_FIELD.search(error.message)
    if unknown is not None:
        found["message"] = f"Field '{unknown['field']}' doesn't exist on type '{unknown['type']}'"
        extensions = {
            "code": "undefinedField",
            "typeName": unknown["type"],
            "fieldName": unknown["field"],
        }
    if extensions:
        found["extensions"] = extensions
    return found
