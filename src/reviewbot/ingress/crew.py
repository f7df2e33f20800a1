"""Crew function calls: ``{"variables": {...}, "payload": {function, args, from, call_id}}``.

The PR is read from the envelope in the documented order (see
:mod:`reviewbot.ingress.envelope`). The delivery is identified by ``payload.call_id``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from reviewbot.core.models import Trigger
from reviewbot.ingress.envelope import read_envelope
from reviewbot.ingress.errors import TriggerError
from reviewbot.ingress.payload import shown

EVENT = "crew_call"
SOURCE = "crew"


def crew_call_id(envelope: Mapping[str, Any]) -> str | None:
    """``payload.call_id`` when it is a non-empty string or a number, else ``None``."""
    payload = envelope.get("payload")
    if not isinstance(payload, Mapping):
        return None
    call_id = payload.get("call_id")
    if isinstance(call_id, bool) or not isinstance(call_id, str | int):
        return None
    text = str(call_id).strip()
    return text or None


def crew_trigger(
    envelope: Mapping[str, Any],
    *,
    delivery_id: str,
    configured_forges: Sequence[str],
    env: Mapping[str, str] | None = None,
    source: str = "crew",
) -> Trigger:
    """Turn a Crew envelope into a ``pull`` trigger; raise :class:`TriggerError` if unreadable.

    ``env`` holds the ``VAR_*`` variables to fall back on (the server passes none).
    """
    payload = envelope.get("payload")
    function = payload.get("function") if isinstance(payload, Mapping) else None
    caller = payload.get("from") if isinstance(payload, Mapping) else None
    if function is not None and not isinstance(function, str):
        raise TriggerError(f"payload.function: {shown(function)} is not a string")
    if caller is not None and not isinstance(caller, str):
        raise TriggerError(f"payload.from: {shown(caller)} is not a string")
    target = read_envelope(envelope, configured_forges=configured_forges, env=env)
    return Trigger(
        source=source,
        delivery_id=delivery_id,
        forge=target.forge,
        event=EVENT,
        action=function or None,
        kind="pull",
        owner=target.owner,
        name=target.name,
        number=target.number,
        head_sha=target.head_sha,
        sender=caller or None,
        # An explicit request is its own event: two calls are never folded into one.
        extra={"semantic": delivery_id, "read_from": target.read_from()},
    )


def crew_call_parts(envelope: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The ``variables`` and the call (``payload``: function, args, from, call_id) of a Crew
    envelope, or ``None`` when ``envelope`` is not one (its ``payload`` is not an object).

    A step reading ``delivery.json`` finds the call where the documented read order looks:
    ``payload.args`` and the call's flat keys, never ``payload.payload.args``.
    """
    call = envelope.get("payload")
    if not isinstance(call, Mapping):
        return None
    variables = envelope.get("variables")
    return (dict(variables) if isinstance(variables, Mapping) else {}), dict(call)
