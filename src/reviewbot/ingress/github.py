"""GitHub webhook deliveries (``X-GitHub-Event`` + JSON body) -> :class:`Trigger`.

Pure: no forge calls. What needs the forge (the commenter's write access, the open PRs of a
commit) is marked on the trigger for the worker.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reviewbot.core.models import Trigger
from reviewbot.ingress.errors import TriggerError
from reviewbot.ingress.forge_event import ForgeEventParser
from reviewbot.ingress.headers import GITHUB_EVENT, header
from reviewbot.ingress.payload import EventReader

PULL_REQUEST_ACTIONS = frozenset(
    {"opened", "reopened", "synchronize", "ready_for_review", "labeled", "unlabeled", "closed"}
)
REVIEW_ACTIONS = frozenset({"submitted", "dismissed"})
CHECK_EVENTS = frozenset({"check_suite", "check_run"})
_PR_NUMBER = ("pull_request.number", "number")


def github_trigger(
    headers: Mapping[str, str],
    payload: Mapping[str, Any],
    *,
    delivery_id: str,
    source: str = "github",
) -> Trigger:
    """Turn one GitHub delivery into a trigger; raise :class:`TriggerError` if unreadable."""
    event = (header(headers, GITHUB_EVENT) or "").strip()
    if not event:
        raise TriggerError(f"{GITHUB_EVENT} header: missing")
    return _GitHubEvent(payload, event, delivery_id=delivery_id, source=source).trigger()


class _GitHubEvent(ForgeEventParser):
    forge = "github"

    def trigger(self) -> Trigger:
        event = self.event
        if event == "pull_request":
            return self._pull_request()
        if event == "pull_request_review":
            return self._review()
        if event in CHECK_EVENTS:
            return self._check(event)
        if event == "status":
            return self.status()
        if event == "push":
            return self.push()
        if event == "issue_comment":
            return self.comment(on_pull=self.r.get("issue.pull_request") is not None)
        if event == "ping":
            hook = self.r.get("hook_id")
            return self.recorded(f"ping from GitHub for webhook {hook}: the webhook reaches us")
        if event == "installation":
            account = self.r.login("installation.account") or "an account"
            return self.recorded(f"GitHub App installation {self.action or 'event'} for {account}")
        return self.not_pull_request_event()

    def _pull_request(self) -> Trigger:
        action = self.require_action()
        if action == "edited":
            if self.r.get("changes.base") is None:
                return self.action_ignored(
                    "pull_request edited without a change of the base branch is not acted on"
                )
        elif action not in PULL_REQUEST_ACTIONS:
            return self.action_ignored()
        parts = [f"updated_at={self.r.get('pull_request.updated_at') or ''}"]
        if action in ("labeled", "unlabeled"):
            parts.append(f"label={self.r.get('label.name') or ''}")
        if action == "edited":
            parts.append(f"base={self.r.get('pull_request.base.ref') or ''}")
        return self.pull(";".join(parts), number_paths=_PR_NUMBER)

    def _review(self) -> Trigger:
        if self.require_action() not in REVIEW_ACTIONS:
            return self.action_ignored()
        semantic = f"review={self.r.get('review.id')}:{self.r.get('review.state')}"
        return self.pull(semantic, number_paths=_PR_NUMBER)

    def _check(self, event: str) -> Trigger:
        if self.require_action() != "completed":
            return self.action_ignored()
        repo_id = self.r.get("repository.id")
        numbers: list[int] = []
        listed = self.r.get(f"{event}.pull_requests")
        for pr in listed if isinstance(listed, list) else []:
            if not isinstance(pr, Mapping):
                continue
            number = pr.get("number")
            if isinstance(number, bool) or not isinstance(number, int) or number <= 0:
                continue
            # A check can list PRs whose base is another repository (forks): keep this one's.
            base_repo_id = EventReader(pr, event).get("base.repo.id")
            if repo_id is not None and base_repo_id not in (None, repo_id):
                continue
            if number not in numbers:
                numbers.append(number)
        conclusion = str(self.r.get(f"{event}.conclusion") or "")
        extra = {
            "semantic": f"{event}={self.r.get(f'{event}.id')}:{conclusion}",
            "conclusion": conclusion,
        }
        check_name = self.r.get(f"{event}.name") or self.r.get(f"{event}.app.name")
        if isinstance(check_name, str):
            extra["check"] = check_name
        details = self.r.get(f"{event}.details_url") or self.r.get(f"{event}.html_url")
        if isinstance(details, str) and details:
            extra["target_url"] = details
        suite = "check_suite" if event == "check_suite" else "check_run.check_suite"
        branch = self.r.get(f"{suite}.head_branch")
        return self.commit(
            f"{event}.head_sha",
            extra,
            pull_numbers=tuple(numbers),
            branches=(branch,) if isinstance(branch, str) and branch else (),
        )
