"""Every reason code a decision can carry. docs/reason-codes.md explains each one."""

from __future__ import annotations

from enum import StrEnum


class Outcome(StrEnum):
    ELIGIBLE = "eligible"
    SKIP = "skip"
    ERROR = "error"
    WAITING = "waiting"


class ReasonCode(StrEnum):
    ELIGIBLE = "eligible"
    NOT_PULL_REQUEST_EVENT = "not_pull_request_event"
    ACTION_IGNORED = "action_ignored"
    PR_CLOSED = "pr_closed"
    PR_DRAFT = "pr_draft"
    HEAD_MOVED = "head_moved"
    AUTHOR_IS_BOT = "author_is_bot"
    BASE_BRANCH_EXCLUDED = "base_branch_excluded"
    SKIP_LABEL = "skip_label"
    REPO_NOT_CONFIGURED = "repo_not_configured"
    FORGE_NOT_CONFIGURED = "forge_not_configured"
    DUPLICATE_DELIVERY = "duplicate_delivery"
    DELIVERY_UNRESOLVED = "delivery_unresolved"
    PR_NOT_FOUND = "pr_not_found"
    NO_OPEN_PULL_REQUESTS = "no_open_pull_requests"
    ROUTED_TO_LISTENER = "routed_to_listener"  # a commit event a registered listener heard
    FORGE_ERROR = "forge_error"
    # why the forge could not be asked (each says what to fix in docs/reason-codes.md)
    APP_NOT_INSTALLED = "app_not_installed"
    FORGE_AUTH_FAILED = "forge_auth_failed"
    FORGE_UNREACHABLE = "forge_unreachable"
    FORGE_URL_WRONG = "forge_url_wrong"
    HEAD_UNKNOWN = "head_unknown"
    WRONG_ENDPOINT = "wrong_endpoint"
    PERMISSION_DENIED = "permission_denied"
    RECORDED = "recorded"
    INTERNAL_ERROR = "internal_error"  # a bug, never a forge or input problem
    DELIVERY_FAILED = "delivery_failed"  # could not be recorded after every attempt
    # review policy
    NO_REQUIRED_CHECKS = "no_required_checks"
    CHECKS_PENDING = "checks_pending"
    CHECKS_FAILED = "checks_failed"
    CHECKS_PASSED = "checks_passed"
    PROTECTION_UNREADABLE = "protection_unreadable"  # the forge's rules could not be read
    REVIEWER_FINDINGS = "reviewer_findings"
    REVIEWER_ERROR = "reviewer_error"
    SANDBOX_UNAVAILABLE = "sandbox_unavailable"  # reviewers cannot be contained here
    REVIEW_POSTED = "review_posted"
    REVIEW_DISMISSED = "review_dismissed"
    # merge
    NOT_APPROVED = "not_approved"
    CHANGES_REQUESTED = "changes_requested"
    CHECKS_NOT_GREEN = "checks_not_green"
    NOT_MERGEABLE = "not_mergeable"
    SUPERSEDED = "superseded"
    # this process is not the code, configuration or schema on disk: it reviews and merges
    # nothing until it restarts
    RESTART_REQUIRED = "restart_required"
    LEASE_NOT_HELD = "lease_not_held"
    LEASE_HELD = "lease_held"
    LANE_LOST = "lane_lost"  # automerge lost its branch's merge lane before the merge call
    # merge queue
    QUEUE_CULPRIT = "queue_culprit"  # failed alone in a car: ejected
    QUEUE_FLAKY = "queue_flaky"  # its batch failed twice while it passed alone: ejected
    CAR_TIMED_OUT = "car_timed_out"  # a car's CI did not finish in time: a failure
    NOT_FIRST_CAR = "not_first_car"  # only the first car of a train lands
    CAR_NOT_GREEN = "car_not_green"  # the car is not green at its tested commit yet
    BASE_MOVED = "base_moved"  # the base is no longer an ancestor of the tested commit
    QUEUE_FROZEN = "queue_frozen"  # a freeze window holds: nothing lands
    QUEUE_OUTSIDE_WINDOW = "queue_outside_window"  # outside every merge window: nothing lands
    QUEUE_PAUSED = "queue_paused"  # paused by hand: nothing starts, nothing lands
    QUEUE_DRAINING = "queue_draining"  # draining: no new admissions, the queued run on
    BRANCH_NOT_FOUND = "branch_not_found"  # the base branch named does not exist
    NOT_QUEUED = "not_queued"  # the PR is in no merge queue
    DEQUEUED = "dequeued"  # taken out of the queue on request
    # capability: who asks, and as which worker
    MISSING_SCOPE = "missing_scope"
    REPO_NOT_ALLOWED = "repo_not_allowed"
    WORKER_UNPROVEN = "worker_unproven"
    NOT_WORKER_OWNER = "not_worker_owner"
    WORKER_STALE = "worker_stale"
    SELF_APPROVAL = "self_approval"  # the only approval is the author's own
