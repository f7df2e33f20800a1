"""The GitHub adapter's one GraphQL read of a pull request, and how its answer is read.

One query asks for everything an evaluation needs: the pull (head, base, state,
mergeability), its head commit's check runs and commit statuses with whether each is required
for this pull (``isRequired(pullRequestNumber:)``), the base branch's rules as a non-admin
sees them (``refUpdateRule``) and its rulesets (``rules``), the reviews, and the issue
comments (where the bot's state comment is found). Lists that can run past one page are
followed with their cursors; every page is the same query.

The answer is turned into the REST shapes the adapter already reads (a pull object, a
status, a check run, a review, a comment, a ruleset rule), so one set of converters decides
what each field means whichever API said it.

A part the answer could not give (an error whose path lies in it: a missing permission, a
field this server does not have) is listed in :attr:`Gathered.unread`, never taken as empty:
the adapter reads that part over REST. An answer without the pull itself raises
:class:`GraphQLUnusable`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

PAGE = 100
MAX_PAGES = 10  # 1000 items of a list, the bound the REST listings keep too

PULL_READ = """
query ReviewbotPullRead(
  $owner: String!
  $name: String!
  $number: Int!
  $checks: String
  $reviews: String
  $comments: String
  $rules: String
) {
  rateLimit {
    cost
    remaining
    resetAt
  }
  repository(owner: $owner, name: $name) {
    pullRequest(number: $number) {
      number
      state
      isDraft
      merged
      mergeable
      title
      url
      headRefName
      headRefOid
      baseRefName
      mergeCommit {
        oid
      }
      author {
        __typename
        login
      }
      labels(first: 100) {
        nodes {
          name
        }
      }
      baseRef {
        refUpdateRule {
          requiredStatusCheckContexts
          requiredApprovingReviewCount
          requiresCodeOwnerReviews
        }
        rules(first: 100, after: $rules) {
          pageInfo {
            hasNextPage
            endCursor
          }
          nodes {
            type
            parameters {
              __typename
              ... on RequiredStatusChecksParameters {
                requiredStatusChecks {
                  context
                }
              }
              ... on PullRequestParameters {
                requiredApprovingReviewCount
                requireCodeOwnerReview
              }
            }
          }
        }
      }
      commits(last: 1) {
        nodes {
          commit {
            oid
            statusCheckRollup {
              contexts(first: 100, after: $checks) {
                pageInfo {
                  hasNextPage
                  endCursor
                }
                nodes {
                  __typename
                  ... on CheckRun {
                    name
                    status
                    conclusion
                    detailsUrl
                    startedAt
                    completedAt
                    isRequired(pullRequestNumber: $number)
                  }
                  ... on StatusContext {
                    context
                    state
                    targetUrl
                    createdAt
                    isRequired(pullRequestNumber: $number)
                  }
                }
              }
            }
          }
        }
      }
      reviews(first: 100, after: $reviews) {
        pageInfo {
          hasNextPage
          endCursor
        }
        nodes {
          databaseId
          state
          body
          submittedAt
          commit {
            oid
          }
          author {
            __typename
            login
          }
        }
      }
      comments(first: 100, after: $comments) {
        pageInfo {
          hasNextPage
          endCursor
        }
        nodes {
          databaseId
          body
          author {
            __typename
            login
          }
        }
      }
    }
  }
}
"""

# Every query the adapter sends (the suite validates each against GitHub's schema).
QUERIES: tuple[str, ...] = (PULL_READ,)


class Part(StrEnum):
    """The parts of the read that can fail on their own (each has a REST read)."""

    CHECKS = "checks"  # variable $checks; the head's check runs and statuses
    REVIEWS = "reviews"
    COMMENTS = "comments"
    RULES = "rules"  # the base branch's protection and rulesets


# Errors of a query a server cannot run (a field, type or argument it does not have).
REJECTING_CODES = frozenset({"undefinedField", "undefinedType", "argumentNotAccepted"})
REJECTING_HINTS = ("doesn't exist on type", "doesn't accept argument")

# Where each part sits under ``repository.pullRequest``.
PART_OF_FIELD = {
    "commits": Part.CHECKS,
    "reviews": Part.REVIEWS,
    "comments": Part.COMMENTS,
    "baseRef": Part.RULES,
}


class GraphQLUnusable(Exception):
    """The answer does not hold the pull: the read as a whole goes to REST.

    ``rejected``: the server refused the query itself (a field it does not have, as an older
    GitHub Enterprise Server does), so sending it again would fail the same way."""

    def __init__(self, message: str, *, rejected: bool = False) -> None:
        super().__init__(message)
        self.rejected = rejected


@dataclass
class Gathered:
    """What the pages of one read held, in REST shapes."""

    pull: dict[str, Any]
    statuses: list[dict[str, Any]] = field(default_factory=list)
    check_runs: list[dict[str, Any]] = field(default_factory=list)
    required_names: list[str] = field(default_factory=list)  # contexts with isRequired
    reviews: list[dict[str, Any]] = field(default_factory=list)
    comments: list[dict[str, Any]] = field(default_factory=list)
    rules: list[dict[str, Any]] = field(default_factory=list)
    classic: dict[str, Any] | None = None  # refUpdateRule (None: no protection applies)
    unread: dict[Part, str] = field(default_factory=dict)  # part -> why it was not read
    cursors: dict[Part, str] = field(default_factory=dict)  # parts with another page
    points: int = 0
    pages: int = 0


def variables(owner: str, name: str, number: int, cursors: dict[Part, str]) -> dict[str, Any]:
    found: dict[str, Any] = {"owner": owner, "name": name, "number": number}
    found.update({part.value: cursor for part, cursor in cursors.items()})
    return found


def gather(answer: Any, into: Gathered | None = None) -> Gathered:
    """Add one page of the answer to ``into`` (the first page: ``None``).

    Only the parts ``into`` still had cursors for are taken from a later page; the head
    must not have moved between pages (:class:`GraphQLUnusable` when it did).
    """
    if not isinstance(answer, dict):
        raise GraphQLUnusable("the GraphQL answer is not a JSON object")
    errors = [e for e in answer.get("errors") or () if isinstance(e, dict)]
    data = answer.get("data")
    pr = _at(data, "repository", "pullRequest")
    if not isinstance(pr, dict):
        said = "; ".join(str(e.get("message") or e.get("type") or "") for e in errors)
        rejected = data is None and any(_rejects_query(e) for e in errors)
        raise GraphQLUnusable(said or "the GraphQL answer holds no pull request", rejected=rejected)
    unread: dict[Part, str] = {}
    for error in errors:
        path = error.get("path") or []
        part = (
            PART_OF_FIELD.get(str(path[2]))
            if len(path) > 2
            and path[:2]
            == [
                "repository",
                "pullRequest",
            ]
            else None
        )
        if part is None:
            # An error outside the parts (the pull's own fields, the rate limit): nothing of
            # the answer can be trusted to be whole.
            raise GraphQLUnusable(str(error.get("message") or "GraphQL error"))
        unread.setdefault(part, str(error.get("message") or error.get("type") or "error"))
    pull = _pull(pr)
    cost = _at(data, "rateLimit", "cost")
    if into is None:
        got = Gathered(pull=pull, unread=unread)
        wanted = set(Part)
    else:
        got = into
        if pull["head"]["sha"] != got.pull["head"]["sha"]:
            raise GraphQLUnusable("the head moved while the read's pages were fetched")
        wanted = set(got.cursors)
        got.cursors = {}
        for part in wanted:
            if part in unread:
                got.unread.setdefault(part, unread[part])
    got.points += int(cost) if isinstance(cost, int) else 0
    got.pages += 1
    for part in wanted - set(got.unread):
        _take(part, pr, got)
    return got


def _take(part: Part, pr: dict[str, Any], got: Gathered) -> None:
    if part is Part.CHECKS:
        commit = _first_node(pr.get("commits"))
        commit = commit.get("commit") if isinstance(commit, dict) else None
        if not isinstance(commit, dict) or commit.get("oid") != got.pull["head"]["sha"]:
            got.unread[part] = "the pull's last commit is not its head"
            return
        rollup = commit.get("statusCheckRollup")
        if rollup is None:
            return  # no status and no check run at this commit
        connection = rollup.get("contexts") if isinstance(rollup, dict) else None
        for node in _nodes(connection, got, part):
            _context(node, got)
    elif part is Part.REVIEWS:
        for node in _nodes(pr.get("reviews"), got, part):
            got.reviews.append(
                {
                    "id": node["databaseId"],
                    "user": _user(node.get("author")),
                    "state": node["state"],
                    "commit_id": _at(node, "commit", "oid"),
                    "body": node.get("body") or "",
                    "submitted_at": node.get("submittedAt") or "",
                }
            )
    elif part is Part.COMMENTS:
        for node in _nodes(pr.get("comments"), got, part):
            got.comments.append(
                {"id": node["databaseId"], "user": _user(node.get("author")), "body": node["body"]}
            )
    else:
        base = pr.get("baseRef")
        if not isinstance(base, dict):
            got.unread[part] = "the base branch is not shown"
            return
        rule = base.get("refUpdateRule")
        if isinstance(rule, dict) and got.classic is None:
            got.classic = rule
        for node in _nodes(base.get("rules"), got, part):
            got.rules.append(_rule(node))


def _context(node: dict[str, Any], got: Gathered) -> None:
    kind = node.get("__typename")
    if kind == "CheckRun":
        name = str(node["name"])
        got.check_runs.append(
            {
                "name": name,
                "status": _lower(node.get("status")),
                "conclusion": _lower(node.get("conclusion")),
                "details_url": node.get("detailsUrl"),
                "started_at": node.get("startedAt"),
                "completed_at": node.get("completedAt"),
            }
        )
    elif kind == "StatusContext":
        name = str(node["context"])
        state = _lower(node.get("state"))
        if state != "expected":  # GitHub's stand-in for a required status not yet reported
            got.statuses.append(
                {
                    "context": name,
                    "state": state,
                    "target_url": node.get("targetUrl"),
                    "created_at": node.get("createdAt"),
                }
            )
    else:
        raise GraphQLUnusable(f"a status check of an unknown kind {kind!r}")
    if node.get("isRequired") is True:
        got.required_names.append(name)


def _rule(node: dict[str, Any]) -> dict[str, Any]:
    """A ruleset rule as GET /repos/{owner}/{repo}/rules/branches/{branch} lists it."""
    kind = _lower(node.get("type"))
    parameters = node.get("parameters") or {}
    if kind == "required_status_checks":
        checks = parameters.get("requiredStatusChecks") or []
        return {
            "type": kind,
            "parameters": {"required_status_checks": [{"context": c["context"]} for c in checks]},
        }
    if kind == "pull_request":
        return {
            "type": kind,
            "parameters": {
                "required_approving_review_count": parameters.get("requiredApprovingReviewCount"),
                "require_code_owner_review": parameters.get("requireCodeOwnerReview"),
            },
        }
    return {"type": kind, "parameters": {}}


def _pull(pr: dict[str, Any]) -> dict[str, Any]:
    """The pull as GET /repos/{owner}/{repo}/pulls/{number} shows it (the fields read)."""
    state = _lower(pr.get("state"))
    mergeable = {"MERGEABLE": True, "CONFLICTING": False}.get(str(pr.get("mergeable")))
    return {
        "number": pr["number"],
        "state": "closed" if state == "merged" else state,
        "merged": bool(pr.get("merged")),
        "draft": bool(pr.get("isDraft")),
        "head": {"sha": pr["headRefOid"], "ref": pr["headRefName"]},
        "base": {"ref": pr["baseRefName"]},
        "user": _user(pr.get("author")),
        "labels": [{"name": n["name"]} for n in (_at(pr, "labels", "nodes") or ()) if n],
        "mergeable": mergeable,
        "title": pr.get("title") or "",
        "html_url": pr.get("url") or "",
        "merge_commit_sha": _at(pr, "mergeCommit", "oid"),
    }


def _user(author: Any) -> dict[str, Any] | None:
    """REST's user object: an App's bot is ``NAME[bot]`` there and ``NAME`` in GraphQL."""
    if not isinstance(author, dict) or not author.get("login"):
        return None
    login = str(author["login"])
    if author.get("__typename") == "Bot" and not login.endswith("[bot]"):
        login += "[bot]"
    return {"login": login}


def _nodes(connection: Any, got: Gathered, part: Part) -> list[dict[str, Any]]:
    """A connection's nodes; a null node (an item an error left out) makes the part unread."""
    if not isinstance(connection, dict):
        got.unread[part] = "the list is not shown"
        return []
    nodes = connection.get("nodes") or []
    if any(not isinstance(n, dict) for n in nodes):
        got.unread[part] = "an item of the list is not shown"
        return []
    info = connection.get("pageInfo") or {}
    if info.get("hasNextPage"):
        if got.pages >= MAX_PAGES:
            got.unread[part] = f"more than {MAX_PAGES * PAGE} items"
            return []
        got.cursors[part] = str(info["endCursor"])
    return list(nodes)


def _rejects_query(error: dict[str, Any]) -> bool:
    """An error of the query itself (GitHub validates before it runs anything): a field,
    type or argument this server does not have."""
    code = _at(error, "extensions", "code")
    return code in REJECTING_CODES or any(
        hint in str(error.get("message") or "") for hint in REJECTING_HINTS
    )


def _first_node(connection: Any) -> Any:
    nodes = connection.get("nodes") if isinstance(connection, dict) else None
    return nodes[0] if isinstance(nodes, list) and nodes else None


def _lower(value: Any) -> str | None:
    return str(value).lower() if isinstance(value, str) else None


def _at(data: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data
