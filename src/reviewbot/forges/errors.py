"""Typed forge errors: callers branch on the type, never on a status code or message text."""

from __future__ import annotations

from reviewbot.core.access import GITHUB_PERMISSIONS
from reviewbot.core.errors import ReviewbotError
from reviewbot.core.reasons import ReasonCode


class ForgeError(ReviewbotError):
    """The forge answered with an error the caller should record (``forge_error``)."""

    def __init__(self, message: str, *, status: int | None = None, operation: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.operation = operation

    def __str__(self) -> str:
        base = super().__str__()
        where = f"{self.operation}: " if self.operation else ""
        code = f"HTTP {self.status}: " if self.status is not None else ""
        return f"{where}{code}{base}"


class NotFound(ForgeError):
    """404: the repository, PR, commit or comment does not exist (or is invisible to us)."""


class ForgeUrlWrong(NotFound):
    """A 404 that is not the API's own (an HTML or plain-text page): the base URL is wrong."""


class AuthenticationFailed(ForgeError):
    """401: the credentials were refused."""


class PermissionDenied(ForgeError):
    """403 that is not a rate limit: the credentials lack a permission (terminal, named).

    ``accepted`` is GitHub's ``X-Accepted-GitHub-Permissions`` header when it sent one
    (``administration=read``; alternatives separated by ``;``), else empty; the message
    then names what to grant.
    """

    accepted: str = ""

    def __str__(self) -> str:
        named = permission_named(self.accepted)
        return super().__str__() + (f" (grant {named})" if named else "")


def permission_named(accepted: str) -> str:
    """GitHub's ``X-Accepted-GitHub-Permissions`` as a person reads it in the App settings.

    Sets are separated by ``;`` (any one will do), the permissions of a set by ``,``
    (all of them): ``pull_requests=read,contents=read; issues=read``.
    """
    options = []
    for alternative in accepted.split(";"):
        needed = []
        for part in alternative.split(","):
            key, _, level = part.strip().partition("=")
            if key:
                title = GITHUB_PERMISSIONS.get(key, key.replace("_", " ").capitalize())
                needed.append(f"{title} ({level or 'read'})")
        if needed:
            options.append(" and ".join(needed))
    return " or ".join(options)


class RateLimited(ForgeError):
    """Primary or secondary rate limit; ``retry_after`` is seconds to wait when known."""

    def __init__(self, message: str, *, retry_after: float | None, **kw: object) -> None:
        super().__init__(message, **kw)  # type: ignore[arg-type]
        self.retry_after = retry_after


class HeadMoved(ForgeError):
    """A pinned merge or review was refused because the PR head is not the pinned SHA."""


class NotMergeable(ForgeError):
    """The forge refuses the merge (conflicts, blocked branch, already merged, closed)."""


class PendingReview(ForgeError):
    """Gitea stored the review as PENDING (unsubmitted): the event was not understood."""


class Unsupported(ForgeError):
    """The adapter cannot do this at all (a capability it lacks, named in the message): the
    caller chooses another way, it never retries."""


class NotFastForward(ForgeError):
    """A branch was not moved: its current commit is not an ancestor of the new commit (the
    forge's compare-and-swap refused, or the branch moved since it was read)."""


class RefExists(ForgeError):
    """A branch to be created already exists."""


class MergeConflict(ForgeError):
    """Two commits cannot be merged without a person resolving conflicts."""


class ForgeUnavailable(ForgeError):
    """5xx, timeouts or connection failures that outlasted the retries (or a write not retried).

    ``reached`` is False when no answer came at all (connection refused, DNS, timeout).
    """

    reached: bool = True


# Operations that only present the bot's credentials: a 403 there is about the credentials,
# not about a permission on one repository.
_CREDENTIAL_OPERATIONS = frozenset({"bot_login", "probe", "app_installation", "app_token"})


_BRANCH_OPERATIONS = frozenset({"required_checks", "merge_permission", "branch", "access"})


def reason_for(exc: ForgeError) -> ReasonCode:
    """The reason code that says what is wrong (and so what to fix) for a forge error."""
    if isinstance(exc, ForgeUrlWrong):
        return ReasonCode.FORGE_URL_WRONG
    if isinstance(exc, NotFound):
        if exc.operation == "app_installation":
            return ReasonCode.APP_NOT_INSTALLED
        if exc.operation == "check_results":  # read by SHA after the PR was found
            return ReasonCode.HEAD_UNKNOWN
        if exc.operation in ("bot_login", "probe"):  # /user exists on every forge API
            return ReasonCode.FORGE_URL_WRONG
        if exc.operation in _BRANCH_OPERATIONS:
            # The base branch, read after the PR was found: missing, or hidden from us
            # (Forgejo answers 404 for a disabled code unit). Never "not protected".
            return ReasonCode.FORGE_ERROR
        return ReasonCode.PR_NOT_FOUND
    if isinstance(exc, AuthenticationFailed):
        return ReasonCode.FORGE_AUTH_FAILED
    if isinstance(exc, PermissionDenied):
        if exc.operation in _CREDENTIAL_OPERATIONS:
            return ReasonCode.FORGE_AUTH_FAILED
        return ReasonCode.PERMISSION_DENIED
    if isinstance(exc, ForgeUnavailable) and exc.status is None and exc.reached is False:
        return ReasonCode.FORGE_UNREACHABLE
    return ReasonCode.FORGE_ERROR
