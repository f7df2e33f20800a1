"""``POST /api/v1/reviews``: ``{"forge", "repo", "number", "head_sha"?}`` -> :class:`Trigger`.

The body is small and validated when the request arrives, so a bad body is answered 400
with the reason instead of being accepted and failing later.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from reviewbot.core import models
from reviewbot.core.models import MAX_NUMBER, Trigger
from reviewbot.ingress.envelope import default_forge, parse_sha, split_repo
from reviewbot.ingress.errors import TriggerError
from reviewbot.ingress.payload import parse_json_object

EVENT = "review_request"


class ReviewRequestBody(BaseModel):
    """The body of ``POST /api/v1/reviews``. ``forge`` may be left out when only one forge
    is configured; ``head_sha``, when given, pins the request to that head."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Checked against FORGES (one list of forges), offered to clients as an enum.
    forge: str | None = Field(default=None, json_schema_extra={"enum": list(models.FORGES)})
    repo: str = Field(description="OWNER/NAME")
    number: int = Field(gt=0, le=MAX_NUMBER, strict=True)
    head_sha: str | None = None

    @field_validator("forge")
    @classmethod
    def _known_forge(cls, value: str | None) -> str | None:
        if value is not None and value not in models.FORGES:
            raise ValueError(f"unknown forge {value!r}; expected one of {', '.join(models.FORGES)}")
        return value

    @field_validator("repo")
    @classmethod
    def _owner_slash_name(cls, value: str) -> str:
        try:
            owner, name = split_repo(value, "repo", name_only_ok=False)
        except TriggerError:
            raise ValueError(f"{value!r} is not OWNER/NAME") from None
        return f"{owner}/{name}"

    @field_validator("head_sha")
    @classmethod
    def _full_sha(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            return parse_sha(value, "head_sha")
        except TriggerError:
            raise ValueError("is not a full commit SHA of 40 or 64 hex digits") from None


def parse_review_request(body: bytes | Mapping[str, Any]) -> ReviewRequestBody:
    """Validate a review request body; :class:`TriggerError` names every problem."""
    data = parse_json_object(body, "request body") if isinstance(body, bytes) else body
    try:
        return ReviewRequestBody.model_validate(dict(data))
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = ".".join(str(part) for part in err["loc"]) or "body"
            msg = str(err["msg"]).removeprefix("Value error, ")
            problems.append(f"{loc}: {msg}")
        raise TriggerError("; ".join(problems)) from None


def api_trigger(
    body: ReviewRequestBody,
    *,
    delivery_id: str,
    configured_forges: Sequence[str],
    sender: str | None = None,
    source: str = "api",
) -> Trigger:
    """A ``pull`` trigger for a validated request. ``sender`` is the token's name."""
    forge = body.forge or default_forge(configured_forges)
    owner, name = body.repo.split("/")
    return Trigger(
        source=source,
        delivery_id=delivery_id,
        forge=forge,
        event=EVENT,
        kind="pull",
        owner=owner,
        name=name,
        number=body.number,
        head_sha=body.head_sha,
        sender=sender,
        # An explicit request is its own event: two requests are never folded into one.
        extra={"semantic": delivery_id},
    )
