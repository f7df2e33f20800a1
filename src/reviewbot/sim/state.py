"""The simulator's in-memory model of both forges: plain dataclasses, no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field

FORGES = ("github", "gitea")


@dataclass
class SimUser:
    id: int
    login: str
    bot: bool = False
    created_at: float = 0.0
    email: str = ""
    full_name: str = ""


@dataclass
class SimCommit:
    sha: str
    message: str
    parents: list[str]
    author: str
    created_at: float
    tree_sha: str
    real: bool = False  # an object in the repository's git store (not a named, virtual SHA)
    email: str = ""  # the author's, as git recorded it


@dataclass
class SimStatus:
    id: int
    sha: str
    context: str
    state: str
    target_url: str | None
    description: str | None
    creator: str
    created_at: float
    updated_at: float


@dataclass
class SimCheckSuite:
    id: int
    sha: str
    app_id: int
    head_branch: str | None
    created_at: float
    updated_at: float


@dataclass
class SimCheckRun:
    id: int
    sha: str
    name: str
    status: str  # queued | in_progress | completed
    conclusion: str | None
    details_url: str | None
    app_id: int
    suite_id: int
    started_at: float
    completed_at: float | None
    title: str | None = None
    summary: str | None = None
    external_id: str | None = None


@dataclass
class SimInlineComment:
    id: int
    path: str
    body: str
    line: int | None
    position: int | None
    side: str | None


@dataclass
class SimReview:
    """``state`` uses the forge's own spelling.

    GitHub: ``APPROVED``, ``CHANGES_REQUESTED``, ``COMMENTED``, ``DISMISSED``, ``PENDING``.
    Gitea: ``APPROVED``, ``REQUEST_CHANGES``, ``COMMENT``, ``PENDING`` (``dismissed`` is a flag).
    """

    id: int
    user: str
    state: str
    body: str
    commit_id: str
    submitted_at: float | None
    updated_at: float
    dismissed: bool = False
    comments: list[SimInlineComment] = field(default_factory=list)


@dataclass
class SimComment:
    id: int
    number: int
    user: str
    body: str
    created_at: float
    updated_at: float


@dataclass
class SimPull:
    number: int
    id: int
    repo: str
    forge: str
    title: str
    body: str
    author: str
    base: str
    head_ref: str
    head_sha: str
    base_sha: str
    created_at: float
    updated_at: float
    state: str = "open"  # open | closed
    draft: bool = False
    labels: list[str] = field(default_factory=list)
    mergeable: bool = True
    merged: bool = False
    merged_at: float | None = None
    merged_by: str | None = None
    merge_commit_sha: str | None = None
    closed_at: float | None = None
    commits: list[str] = field(default_factory=list)
    reviews: list[SimReview] = field(default_factory=list)
    comments: list[SimComment] = field(default_factory=list)
    auto_merge_scheduled: str | None = (
        None  # Gitea merge style scheduled by merge_when_checks_succeed
    )
    mergeable_set: bool | None = None  # a scenario's override of what git computes

    @property
    def open(self) -> bool:
        return self.state == "open"


@dataclass
class SimIssue:
    """An issue (not a pull request); it shares the repository's numbers with them."""

    number: int
    id: int
    title: str
    author: str
    created_at: float
    updated_at: float
    state: str = "open"  # open | closed
    closed_at: float | None = None
    closed_by: str | None = None


@dataclass
class SimProtection:
    """Branch protection. GitHub: ``contexts`` are exact names (``checks`` adds app ids).
    Gitea: ``contexts`` are glob patterns, enforced only when ``enable_status_check``."""

    branch: str
    contexts: list[str] = field(default_factory=list)
    checks: list[tuple[str, int | None]] = field(default_factory=list)
    strict: bool = False
    enable_status_check: bool = True
    required_approvals: int = 0
    merge_whitelist: list[str] | None = None  # Gitea: who may merge (None: every writer)
    created_at: float = 0.0
    updated_at: float = 0.0


@dataclass
class SimRuleset:
    """A GitHub repository ruleset targeting branches.

    ``include`` holds GitHub's ref patterns: ``~DEFAULT_BRANCH``, ``~ALL`` or
    ``refs/heads/NAME`` (fnmatch globs). Only ``active`` rulesets apply (``evaluate`` and
    ``disabled`` ones are not returned by the branch-rules endpoint).
    """

    id: int
    name: str
    include: list[str]
    contexts: list[str] = field(default_factory=list)
    required_approvals: int | None = None  # None: no pull_request rule
    code_owner_review: bool = False
    enforcement: str = "active"


@dataclass
class SimRepo:
    id: int
    forge: str
    owner: str
    name: str
    default_branch: str
    created_at: float
    branches: dict[str, str] = field(default_factory=dict)
    commits: dict[str, SimCommit] = field(default_factory=dict)
    pulls: dict[int, SimPull] = field(default_factory=dict)
    statuses: list[SimStatus] = field(default_factory=list)
    check_runs: list[SimCheckRun] = field(default_factory=list)
    check_suites: list[SimCheckSuite] = field(default_factory=list)
    protections: dict[str, SimProtection] = field(default_factory=dict)
    rulesets: list[SimRuleset] = field(default_factory=list)
    permissions: dict[str, str] = field(default_factory=dict)  # login -> admin|write|read|none
    issues: dict[int, SimIssue] = field(default_factory=dict)
    next_number: int = 1
    private: bool = False
    # Gitea's "Allow manual merge" pull-request setting (``allow_manual_merge``), off on a new
    # repository as Gitea creates it; ``Do: manually-merged`` is refused without it
    # (go-gitea/gitea services/pull/merge.go ``MergedManually``: ``IsMergeStyleAllowed``).
    allow_manual_merge: bool = False

    @property
    def full_name(self) -> str:
        return f"{self.owner}/{self.name}"


@dataclass
class SimApp:
    id: int
    slug: str
    name: str
    owner: str
    bot_login: str
    public_key_pem: str
    created_at: float


@dataclass
class SimInstallation:
    """``permissions``: the repository permissions the installation was granted."""

    id: int
    app_id: int
    account: str
    permissions: dict[str, str]
    repos: set[str] = field(default_factory=set)
    created_at: float = 0.0


@dataclass
class SimInstallationToken:
    token_hash: str
    installation_id: int
    expires_at: float


@dataclass
class WebhookTarget:
    url: str
    secret: str | None


@dataclass(frozen=True)
class RefMove:
    """A branch created, moved or deleted (``before``/``after``: 40 zeros for none)."""

    forge: str
    repo: str
    ref: str
    before: str
    after: str
    pusher: str
    forced: bool = False
