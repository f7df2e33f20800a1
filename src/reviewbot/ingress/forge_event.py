"""What the GitHub and Gitea parsers share: building triggers from one forge event."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reviewbot.core.commit_routes import BRANCH_PREFIX, branch_name
from reviewbot.core.models import Reason, Trigger
from reviewbot.core.reasons import ReasonCode
from reviewbot.ingress.commands import QUEUE_COMMAND, REVIEW_COMMAND, comment_command
from reviewbot.ingress.errors import TriggerError
from reviewbot.ingress.payload import EventReader, is_sha, shown


class ForgeEventParser:
    """One event of one forge; subclasses dispatch on the event name in :meth:`trigger`."""

    forge: str = ""

    def __init__(
        self,
        payload: Mapping[str, Any],
        event: str,
        *,
        delivery_id: str,
        source: str,
        extra: Mapping[str, str] | None = None,
    ) -> None:
        self.r = EventReader(payload, event)
        self.event = event
        self.delivery_id = delivery_id
        self.source = source
        self.common_extra = dict(extra or {})
        action = payload.get("action")
        if action is not None and not isinstance(action, str):
            raise TriggerError(f"action: {shown(action)} is not a string (in the {event} event)")
        self.action: str | None = action or None

    def trigger(self) -> Trigger:
        raise NotImplementedError

    def base(self, *, extra: Mapping[str, str] | None = None, **fields: Any) -> Trigger:
        return Trigger(
            source=self.source,
            delivery_id=self.delivery_id,
            forge=self.forge,
            event=self.event,
            action=self.action,
            sender=self.r.login("sender"),
            extra={**self.common_extra, **(extra or {})},
            repo_id=self.repo_id(),
            **fields,
        )

    def repo_id(self) -> int | None:
        """The forge's numeric repository id: a rename or transfer keeps it."""
        value = self.r.get("repository.id")
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
        return None

    def best_effort_repo(self) -> dict[str, Any]:
        """Repository (and PR number) of an event the bot does not act on, when readable."""
        try:
            owner, name = self.r.repository()
        except TriggerError:
            return {}
        found: dict[str, Any] = {"owner": owner, "name": name}
        for path in ("pull_request.number", "number", "issue.number"):
            value = self.r.get(path)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                found["number"] = value
                break
        return found

    def ignored(self, code: ReasonCode, detail: str) -> Trigger:
        return self.base(kind="ignored", reason=Reason(code, detail), **self.best_effort_repo())

    def recorded(self, detail: str) -> Trigger:
        return self.base(
            kind="recorded", reason=Reason(ReasonCode.RECORDED, detail), **self.best_effort_repo()
        )

    def require_action(self) -> str:
        if self.action is None:
            raise TriggerError(f"action: missing (in the {self.event} event)")
        return self.action

    def action_ignored(self, detail: str | None = None) -> Trigger:
        return self.ignored(
            ReasonCode.ACTION_IGNORED,
            detail or f"{self.event} action {self.action} is not acted on",
        )

    def not_pull_request_event(self) -> Trigger:
        return self.ignored(
            ReasonCode.NOT_PULL_REQUEST_EVENT,
            f"{self.forge} event {self.event} is not a pull-request event",
        )

    def pull(self, semantic: str, *, number_paths: tuple[str, ...]) -> Trigger:
        """A trigger naming one PR at the head the event reports."""
        owner, name = self.r.repository()
        return self.base(
            kind="pull",
            owner=owner,
            name=name,
            number=self.r.number(*number_paths),
            head_sha=self.r.sha("pull_request.head.sha"),
            extra={"semantic": semantic},
        )

    def commit(self, sha_path: str, extra: Mapping[str, str], **fields: Any) -> Trigger:
        """A trigger naming a commit; the worker maps it to the open PRs at that head."""
        owner, name = self.r.repository()
        return self.base(
            kind="commit",
            owner=owner,
            name=name,
            commit_sha=self.r.sha(sha_path),
            extra=extra,
            **fields,
        )

    def status(self) -> Trigger:
        """A commit status event (the same payload fields on both forges)."""
        context = str(self.r.get("context") or "")
        state = str(self.r.get("state") or "")
        extra = {
            "semantic": f"status={self.r.get('id')}:{context}:{state}",
            "context": context,
            "state": state,
        }
        target_url = self.r.get("target_url")
        if isinstance(target_url, str) and target_url:
            extra["target_url"] = target_url
        sha = self.r.sha("sha")
        # GitHub lists branches holding the commit, up to 10; only those at their head
        # name the commit (Gitea lists none).
        listed = self.r.get("branches")
        heads = tuple(
            b["name"]
            for b in (listed if isinstance(listed, list) else [])
            if isinstance(b, Mapping)
            and isinstance(b.get("name"), str)
            and b["name"]
            and str(EventReader(b, self.event).get("commit.sha") or "").lower() == sha
        )
        return self.commit("sha", extra, branches=heads)

    def push(self) -> Trigger:
        """A push (both forges send ``ref`` and ``after``): for registered listeners only.

        A PR hears of a push to its head branch as its own event (``synchronize``,
        ``pull_request_sync``), so a push is never gated. A push that deletes its branch, a
        tag or one whose fields cannot be read stays ``not_pull_request_event``, as a Gitea
        *Test Delivery* (push-shaped) always has.
        """
        reason = Reason(
            ReasonCode.NOT_PULL_REQUEST_EVENT,
            f"{self.forge} event {self.event} is not a pull-request event",
        )
        ref, after = self.r.get("ref"), self.r.get("after")
        if (
            not isinstance(ref, str)
            or not ref.startswith(BRANCH_PREFIX)
            or not isinstance(after, str)
            or not is_sha(after)
            or set(after) == {"0"}  # the branch was deleted
            or self.r.get("deleted") is True
        ):
            return self.not_pull_request_event()
        try:
            owner, name = self.r.repository()
        except TriggerError:
            return self.not_pull_request_event()
        return self.base(
            kind="push",
            owner=owner,
            name=name,
            commit_sha=after.lower(),
            branches=(branch_name(ref),),
            reason=reason,
            extra={"semantic": f"push={ref}:{self.r.get('before') or ''}"},
        )

    def comment(self, *, on_pull: bool) -> Trigger:
        """A new PR comment with a review command line; the worker checks write access."""
        if not on_pull:
            return self.ignored(
                ReasonCode.NOT_PULL_REQUEST_EVENT, "comment on an issue, not on a pull request"
            )
        if self.require_action() != "created":
            return self.action_ignored(
                f"comment {self.action}: only a new comment can carry a command"
            )
        body = self.r.get("comment.body")
        command = comment_command(body) if isinstance(body, str) else None
        if command is None:
            return self.action_ignored(
                f"comment without a {REVIEW_COMMAND} or {QUEUE_COMMAND} line"
            )
        commenter = self.r.login("comment.user") or self.r.login("sender")
        if commenter is None:
            raise TriggerError(f"comment.user.login: missing (in the {self.event} event)")
        owner, name = self.r.repository()
        return self.base(
            kind="pull",
            owner=owner,
            name=name,
            number=self.r.number("issue.number"),
            extra={
                "semantic": f"comment={self.r.get('comment.id')}",
                "command": command,
                "requires_write_access": commenter,
            },
        )
