"""Plain data shared by every layer: triggers, PR snapshots, checks, reviews, decisions."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum

from reviewbot.core.reasons import Outcome

FORGES = ("github", "gitea")

# Any forge-like name parses; the name is then checked against FORGES (one list of forges).
_FORGELESS_PR_REF = re.compile(r"^[^:/\s#]+/[^/\s#]+#\d+$")
_PR_REF = re.compile(
    r"^(?P<forge>[A-Za-z0-9_-]+):(?P<owner>[^/\s#]+)/(?P<name>[^/\s#]+)#(?P<n>\d+)$"
)


REPO_PART_MAX = 100  # GitHub and Gitea both cap owner and repository names at 100


def _repo_part(label: str, value: str) -> str:
    """One part of a repository name, checked: neither forge allows these characters."""
    if not value:
        raise ValueError(f"repository {label} is empty")
    if len(value) > REPO_PART_MAX:
        raise ValueError(f"repository {label} is longer than {REPO_PART_MAX} characters")
    if "/" in value or "#" in value or ":" in value:
        raise ValueError(f"repository {label} {value!r} contains '/', '#' or ':'")
    if any(c.isspace() or not c.isprintable() for c in value):
        raise ValueError(f"repository {label} {value!r} contains whitespace or control characters")
    return value


@dataclass(frozen=True, eq=False)
class RepoRef:
    """A repository: ``(forge, owner, name)``, compared case-insensitively as the forges do.

    ``owner`` and ``name`` keep the spelling they were given (for display); equality, the
    hash and :attr:`key` use the case-folded form, so any casing is the same repository.
    """

    forge: str
    owner: str
    name: str

    def __post_init__(self) -> None:
        if self.forge not in FORGES:
            raise ValueError(f"unknown forge {self.forge!r}; expected one of {', '.join(FORGES)}")
        _repo_part("owner", self.owner)
        _repo_part("name", self.name)

    @classmethod
    def parse(cls, text: str, *, forge: str | None = None) -> RepoRef:
        """``FORGE:OWNER/NAME``, or ``OWNER/NAME`` with ``forge`` given."""
        text = text.strip()
        named, sep, rest = text.partition(":")
        if sep:
            if forge is not None and named != forge:
                raise ValueError(f"{text!r} names forge {named!r}, not {forge!r}")
            forge = named
            text = rest
        if forge is None:
            raise ValueError(f"{text!r} names no forge: expected FORGE:OWNER/NAME")
        owner, slash, name = text.partition("/")
        if not slash:
            raise ValueError(f"{text!r} is not OWNER/NAME")
        return cls(forge, owner, name)

    @property
    def key(self) -> str:
        """The canonical ``owner/name``: what every store column and dict key holds."""
        return f"{self.owner.casefold()}/{self.name.casefold()}"

    @property
    def qualified_key(self) -> str:
        """The canonical ``forge:owner/name`` (config keys, token bindings)."""
        return f"{self.forge}:{self.key}"

    @property
    def full_name(self) -> str:
        """``OWNER/NAME`` as it was spelled (for display only, never for lookups)."""
        return f"{self.owner}/{self.name}"

    def canonical(self) -> RepoRef:
        return RepoRef(self.forge, self.owner.casefold(), self.name.casefold())

    def _identity(self) -> tuple[str, str, str]:
        return (self.forge, self.owner.casefold(), self.name.casefold())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RepoRef):
            return NotImplemented
        return self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash(self._identity())

    def __str__(self) -> str:
        return f"{self.forge}:{self.owner}/{self.name}"


# The largest integer the store keeps (SQLite's signed 64-bit INTEGER). A PR number or a
# fencing epoch beyond it cannot be looked up or written, so every entry refuses it.
MAX_NUMBER = 2**63 - 1


def number_problem(value: int) -> str | None:
    """Why ``value`` cannot be a PR number (or an epoch), or ``None`` when it can."""
    if value < 1:
        return f"{value} is not positive"
    if value > MAX_NUMBER:
        return f"{value} is larger than {MAX_NUMBER}"
    return None


def _canonical_parts(obj: object) -> None:
    """Case-fold ``owner`` and ``name`` of a frozen model in place.

    Every model that names a repository (pull refs, snapshots, triggers, decisions) holds
    the canonical key; only :class:`RepoRef` keeps a spelling.
    """
    for attr in ("owner", "name"):
        value = getattr(obj, attr)
        if value is not None:
            object.__setattr__(obj, attr, value.casefold())


def repo_key(repo: str) -> str:
    """``OWNER/NAME`` in any casing -> the canonical key; ``ValueError`` if it is no name.

    Every entry (webhooks, Crew, API, delivery files, CLI, tools, config) turns the
    repository it was handed into this key before anything is looked up or stored.
    """
    owner, slash, name = repo.strip().partition("/")
    if not slash:
        raise ValueError(f"{repo!r} is not OWNER/NAME")
    return f"{_repo_part('owner', owner).casefold()}/{_repo_part('name', name).casefold()}"


@dataclass(frozen=True)
class PullRef:
    """A pull request: ``FORGE:OWNER/REPO#NUMBER`` on the command line."""

    forge: str
    owner: str
    name: str
    number: int

    def __post_init__(self) -> None:
        problem = number_problem(self.number)
        if problem is not None:
            raise ValueError(f"PR number: {problem}")
        _canonical_parts(self)

    @property
    def repo(self) -> RepoRef:
        return RepoRef(self.forge, self.owner, self.name)

    @property
    def full_name(self) -> str:
        return f"{self.owner}/{self.name}"

    def __str__(self) -> str:
        return f"{self.forge}:{self.owner}/{self.name}#{self.number}"

    @classmethod
    def parse(cls, text: str) -> PullRef:
        m = _PR_REF.match(text.strip())
        if m is None:
            if _FORGELESS_PR_REF.match(text.strip()):
                tries = " or ".join(f"{forge}:{text.strip()}" for forge in FORGES)
                raise ValueError(f"{text!r} names no forge: write {tries}")
            raise ValueError(f"not a PR reference {text!r}: expected FORGE:OWNER/REPO#NUMBER")
        forge = m["forge"].lower()  # forge names are lower case; GITEA: is gitea:
        if forge not in FORGES:
            raise ValueError(
                f"not a PR reference {text!r}: unknown forge {m['forge']!r}; "
                f"expected one of {', '.join(FORGES)}"
            )
        return cls(forge, m["owner"], m["name"], int(m["n"]))


class CheckState(StrEnum):
    SUCCESS = "success"
    PENDING = "pending"
    FAILURE = "failure"
    ERROR = "error"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"
    NEUTRAL = "neutral"
    SKIPPED = "skipped"
    ACTION_REQUIRED = "action_required"


@dataclass(frozen=True)
class CheckResult:
    """One report of one check for a commit: a commit status or a GitHub check run."""

    name: str
    state: CheckState
    url: str | None = None
    source: str = "status"  # "status" or "check_run"
    updated_at: str = ""  # ISO 8601; the newest report of a name wins


@dataclass(frozen=True)
class RulesGap:
    """A part of the forge's rules for a branch that the bot's credentials could not read.

    "Cannot read" is never "nothing there": a gap keeps the bot from approving on less than
    the operator asked for (``protection_unreadable`` in docs/reason-codes.md).
    """

    source: str  # what was not read: "branch_protection", "rulesets" or "branch"
    permission: str  # what to grant, in the forge's own words
    status: int | None = None  # the forge's answer

    def describe(self) -> str:
        answered = f" (HTTP {self.status})" if self.status is not None else ""
        what = self.source.replace("_", " ")
        return f"the {what} could not be read{answered}: grant {self.permission}"


@dataclass(frozen=True)
class RequiredChecks:
    """What a branch's rules require, as far as the bot could read them.

    On Gitea the names are glob patterns. ``required_approvals`` and ``code_owner_review``
    come from the forge's rules as far as the bot may read them (GitHub rulesets, classic
    protection only where it is readable; Gitea's branch);
    ``unreadable`` lists every part of the rules the credentials could not read.
    """

    names: tuple[str, ...] = ()
    globs: bool = False
    required_approvals: int = 0
    code_owner_review: bool = False
    unreadable: tuple[RulesGap, ...] = ()

    def joined(self, other: RequiredChecks) -> RequiredChecks:
        """Both rule sets at once (protection and rulesets both apply on GitHub)."""
        return RequiredChecks(
            tuple(dict.fromkeys(self.names + other.names)),
            globs=self.globs or other.globs,
            required_approvals=max(self.required_approvals, other.required_approvals),
            code_owner_review=self.code_owner_review or other.code_owner_review,
            unreadable=self.unreadable + other.unreadable,
        )


class ReviewState(StrEnum):
    APPROVED = "approved"
    CHANGES_REQUESTED = "changes_requested"
    COMMENTED = "commented"
    DISMISSED = "dismissed"
    PENDING = "pending"


class ReviewEvent(StrEnum):
    """What the bot submits; each forge adapter spells it its own way."""

    APPROVE = "approve"
    REQUEST_CHANGES = "request_changes"
    COMMENT = "comment"


@dataclass(frozen=True)
class Review:
    id: int
    reviewer: str
    state: ReviewState
    commit_sha: str | None
    body: str = ""
    submitted_at: str = ""
    html_url: str = ""  # where the forge shows it


@dataclass(frozen=True)
class InlineComment:
    path: str
    line: int
    body: str


@dataclass(frozen=True)
class PullRequestSnapshot:
    """A PR as the forge reports it now."""

    forge: str
    owner: str
    name: str
    number: int
    state: str  # "open" or "closed"
    merged: bool
    draft: bool
    head_sha: str
    base_ref: str
    head_ref: str
    author: str
    labels: tuple[str, ...] = ()
    mergeable: bool | None = None
    title: str = ""
    html_url: str = ""
    merge_commit_sha: str | None = None
    body: str = ""  # the description, where closing keywords name the issues it closes
    head_repo: str | None = None  # OWNER/NAME the head branch lives in (a fork's); None: unknown
    default_branch: str | None = None  # the base repository's default branch, if shown

    def __post_init__(self) -> None:
        _canonical_parts(self)

    @property
    def ref(self) -> PullRef:
        return PullRef(self.forge, self.owner, self.name, self.number)


@dataclass(frozen=True)
class Comment:
    id: int
    author: str
    body: str


@dataclass(frozen=True)
class MergeResult:
    merged: bool
    merge_commit_sha: str | None


@dataclass(frozen=True)
class Reason:
    code: str
    detail: str = ""


@dataclass(frozen=True)
class Trigger:
    """A normalized delivery from any entry path.

    ``kind`` says what it names: ``pull`` (a PR, maybe with a head SHA), ``commit`` (a SHA
    whose open PRs are affected), ``push`` (a branch moved to ``commit_sha``: only a
    registered listener hears of it, PRs hear of their pushes as their own events; the
    reason is the skip when none listens), or ``ignored`` / ``recorded`` (nothing to gate;
    the reason says why).
    """

    source: str  # github, gitea, crew, api, file, sweep
    delivery_id: str
    forge: str | None
    event: str
    action: str | None = None
    kind: str = "pull"
    owner: str | None = None
    name: str | None = None
    number: int | None = None
    head_sha: str | None = None
    commit_sha: str | None = None
    sender: str | None = None
    reason: Reason | None = None  # why an ignored/recorded trigger needs no gate
    extra: dict[str, str] = field(default_factory=dict)
    # For ``commit`` triggers: PR numbers the event itself lists (GitHub check events).
    pull_numbers: tuple[int, ...] = ()
    # For ``commit`` and ``push`` triggers: branches whose head the commit is, as the event
    # names them (a push's ref, a check suite's head branch, a GitHub status's branches).
    branches: tuple[str, ...] = ()
    # The repository as the delivery spelled it and the forge's numeric id, when the
    # delivery carried them (webhooks); owner and name themselves are canonical.
    repo_spelling: str | None = None
    repo_id: int | None = None

    def __post_init__(self) -> None:
        # Every entry path builds a Trigger, so this is where the repository becomes its
        # canonical key (GitHub and Gitea treat names case-insensitively; see RepoRef).
        if self.owner and self.name and self.repo_spelling is None:
            object.__setattr__(self, "repo_spelling", f"{self.owner}/{self.name}")
        _canonical_parts(self)

    @property
    def repo_full_name(self) -> str | None:
        return f"{self.owner}/{self.name}" if self.owner and self.name else None

    def semantic_key(self) -> str:
        """Two deliveries with the same key are the same event (a replay)."""
        parts = (
            self.forge or "",
            f"{self.owner}/{self.name}" if self.owner else "",
            str(self.number or ""),
            self.head_sha or self.commit_sha or "",
            self.event,
            self.action or "",
            self.extra.get("semantic", ""),
        )
        return "|".join(parts)


@dataclass(frozen=True)
class Decision:
    """What the gate (or the worker, for errors) decided for one delivery and one PR.

    ``reasons`` holds every blocking reason of a ``skip`` (never only the first), the one
    ``eligible`` reason, or the error of an ``error``. ``head_sha`` is the head the decision
    is about: the trigger's SHA when it named one, else the live head.
    """

    outcome: Outcome
    reasons: tuple[Reason, ...]
    forge: str | None = None
    owner: str | None = None
    name: str | None = None
    number: int | None = None
    head_sha: str | None = None

    def __post_init__(self) -> None:
        _canonical_parts(self)

    @property
    def repo(self) -> str | None:
        return f"{self.owner}/{self.name}" if self.owner and self.name else None

    @property
    def reason(self) -> Reason:
        """The first reason: the one a one-line summary shows."""
        return self.reasons[0]

    @property
    def codes(self) -> tuple[str, ...]:
        return tuple(r.code for r in self.reasons)

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-ready form (the shape of ``route_selection.json``, minus the delivery)."""
        return {
            "decision": str(self.outcome),
            "reasons": [{"code": r.code, "detail": r.detail} for r in self.reasons],
            "forge": self.forge,
            "repo": self.repo,
            "number": self.number,
            "head_sha": self.head_sha,
        }
