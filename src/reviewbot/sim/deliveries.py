"""The scenario API for webhooks: where to send them and which delivery to send."""

from __future__ import annotations

from typing import Any

from reviewbot.sim import webhooks
from reviewbot.sim.core import SimCore, check_forge
from reviewbot.sim.records import Delivery
from reviewbot.sim.state import WebhookTarget


class WebhookScenario(SimCore):
    """Deliveries to the webhook URL configured per forge (see :mod:`webhooks`)."""

    # ------------------------------------------------------------------ webhooks
    def set_webhook(self, forge: str, url: str, secret: str | None = None) -> None:
        check_forge(forge)
        self.webhooks[forge] = WebhookTarget(url=url, secret=secret)

    async def deliver_pull_request(
        self, forge: str, repo: str, number: int, action: str = "opened", **kw: Any
    ) -> Delivery:
        return await webhooks.deliver_pull_request(self, forge, repo, number, action, **kw)

    async def deliver_pull_request_review(
        self, forge: str, repo: str, number: int, review_id: int | None = None, **kw: Any
    ) -> Delivery:
        return await webhooks.deliver_pull_request_review(
            self, forge, repo, number, review_id, **kw
        )

    async def deliver_status(
        self, forge: str, repo: str, status_id: int | None = None, **kw: Any
    ) -> Delivery:
        return await webhooks.deliver_status(self, forge, repo, status_id, **kw)

    async def deliver_check_run(
        self, repo: str, check_run_id: int | None = None, action: str = "completed", **kw: Any
    ) -> Delivery:
        return await webhooks.deliver_check_run(self, repo, check_run_id, action, **kw)

    async def deliver_check_suite(
        self, repo: str, sha: str, action: str = "completed", **kw: Any
    ) -> Delivery:
        return await webhooks.deliver_check_suite(self, repo, sha, action, **kw)

    async def deliver_issue_comment(
        self, forge: str, repo: str, number: int, comment_id: int | None = None, **kw: Any
    ) -> Delivery:
        return await webhooks.deliver_issue_comment(self, forge, repo, number, comment_id, **kw)

    async def deliver_raw(
        self,
        forge: str,
        event: str,
        payload: dict[str, Any] | bytes,
        headers_override: dict[str, str] | None = None,
        event_type: str | None = None,
    ) -> Delivery:
        return await webhooks.deliver_raw(
            self,
            forge,
            event,
            payload,
            headers_override=headers_override,
            event_type=event_type,
        )

    async def redeliver(self, delivery: Delivery) -> Delivery:
        """GitHub redelivers with the same delivery id; a Gitea manual replay gets a new one."""
        return await webhooks.redeliver(self, delivery)
