"""Gitea and Forgejo webhook deliveries -> :class:`Trigger`.

Dispatches on the fine event name (``X-Gitea-Event-Type``, or ``X-Forgejo-Event-Type``).
The coarse ``X-Gitea-Event`` is ambiguous (``pull_request_comment`` there means a *review*
comment, and every PR change is ``pull_request``), so when only it is present the fine name
is worked out from it and the payload's ``action``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reviewbot.core.models import Trigger
from reviewbot.ingress.errors import TriggerError
from reviewbot.ingress.forge_event import ForgeEventParser
from reviewbot.ingress.headers import (
    GITEA_EVENT_HEADERS,
    GITEA_EVENT_TYPE_HEADERS,
    first_header,
    is_forgejo,
)

PULL_REQUEST_ACTIONS = frozenset({"opened", "reopened", "closed"})
REVIEW_EVENT_TYPES = frozenset(
    {
        "pull_request_review_approved",
        "pull_request_review_rejected",
        "pull_request_review_comment",
    }
)
# PR events the bot receives (a webhook set to "all events" sends them) but does not act on.
QUIET_PR_EVENT_TYPES = frozenset(
    {"pull_request_assign", "pull_request_milestone", "pull_request_review_request"}
)

_COARSE_REVIEW = {
    "pull_request_approved": "pull_request_review_approved",
    "pull_request_rejected": "pull_request_review_rejected",
    "pull_request_comment": "pull_request_review_comment",
}
_PR_ACTION_TYPES = {
    "synchronized": "pull_request_sync",
    "label_updated": "pull_request_label",
    "label_cleared": "pull_request_label",
    "assigned": "pull_request_assign",
    "unassigned": "pull_request_assign",
    "milestoned": "pull_request_milestone",
    "demilestoned": "pull_request_milestone",
    "review_requested": "pull_request_review_request",
    "review_request_removed": "pull_request_review_request",
}
_PR_NUMBER = ("pull_request.number", "number")


def gitea_event_type(headers: Mapping[str, str], payload: Mapping[str, Any]) -> str:
    """The fine event name of a Gitea/Forgejo delivery."""
    fine = (first_header(headers, GITEA_EVENT_TYPE_HEADERS) or "").strip()
    if fine:
        return fine
    coarse = (first_header(headers, GITEA_EVENT_HEADERS) or "").strip()
    if not coarse:
        raise TriggerError(
            "X-Gitea-Event-Type header: missing (and no X-Forgejo-Event-Type, "
            "X-Gitea-Event or X-Forgejo-Event either)"
        )
    if coarse in _COARSE_REVIEW:
        return _COARSE_REVIEW[coarse]
    if coarse == "issue_comment":
        return "pull_request_comment" if _is_pull_comment(payload) else "issue_comment"
    if coarse == "pull_request":
        action = payload.get("action")
        if isinstance(action, str):
            return _PR_ACTION_TYPES.get(action, "pull_request")
    return coarse


def gitea_trigger(
    headers: Mapping[str, str],
    payload: Mapping[str, Any],
    *,
    delivery_id: str,
    source: str = "gitea",
) -> Trigger:
    """Turn one Gitea/Forgejo delivery into a trigger; raise :class:`TriggerError` if unreadable."""
    event = gitea_event_type(headers, payload)
    extra = {"flavor": "forgejo"} if is_forgejo(headers) else {}
    parser = _GiteaEvent(payload, event, delivery_id=delivery_id, source=source, extra=extra)
    return parser.trigger()


def _is_pull_comment(payload: Mapping[str, Any]) -> bool:
    issue = payload.get("issue")
    return payload.get("is_pull") is True or (
        isinstance(issue, Mapping) and issue.get("pull_request") is not None
    )


class _GiteaEvent(ForgeEventParser):
    forge = "gitea"

    def trigger(self) -> Trigger:
        event = self.event
        if event == "pull_request":
            return self._pull_request()
        if event == "pull_request_sync":
            self.require_action()
            return self._pull()
        if event == "pull_request_label":
            self.require_action()
            labels = self.r.get("pull_request.labels")
            names = sorted(
                str(label.get("name"))
                for label in (labels if isinstance(labels, list) else [])
                if isinstance(label, Mapping)
            )
            return self._pull("labels=" + ",".join(names))
        if event in REVIEW_EVENT_TYPES:
            self.require_action()
            return self._pull(f"review={self.r.get('review.type')}:{self.r.login('sender')}")
        if event in ("pull_request_comment", "issue_comment"):
            return self.comment(on_pull=_is_pull_comment(self.r.payload))
        if event == "status":
            return self.status()
        if event == "push":
            return self.push()
        if event in QUIET_PR_EVENT_TYPES:
            return self.action_ignored(f"Gitea event {event} is not acted on")
        return self.not_pull_request_event()

    def _pull(self, semantic: str = "") -> Trigger:
        updated = self.r.get("pull_request.updated_at") or ""
        return self.pull(f"updated_at={updated};{semantic}", number_paths=_PR_NUMBER)

    def _pull_request(self) -> Trigger:
        action = self.require_action()
        if action == "edited":
            # Gitea reports a new target branch as changes.ref.
            if self.r.get("changes.ref") is None:
                return self.action_ignored(
                    "pull_request edited without a change of the base branch is not acted on"
                )
            return self._pull(f"base={self.r.get('pull_request.base.ref') or ''}")
        if action not in PULL_REQUEST_ACTIONS:
            return self.action_ignored()
        return self._pull()
