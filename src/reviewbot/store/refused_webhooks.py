"""Webhooks the acknowledgement path refused: what the headers said and why, never a body.

``explain DELIVERY_ID`` reads them, so a delivery the forge shows as failed is explained
even though it never reached the journal. The table keeps only the newest rows
(``retention.refused_webhooks``): a flood of refused requests costs a bounded table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reviewbot.core.clock import iso
from reviewbot.store.database import Database, rows_as

# Longest delivery id, forge name and event kept: the values come from unverified requests.
MAX_FIELD_CHARS = 200


@dataclass(frozen=True)
class RefusedWebhook:
    delivery_id: str
    forge: str
    event: str | None
    code: str
    detail: str
    received_at: float

    def to_json(self) -> dict[str, Any]:
        return {
            "delivery_id": self.delivery_id,
            "forge": self.forge,
            "event": self.event,
            "code": self.code,
            "detail": self.detail,
            "received_at": iso(self.received_at, timespec="microseconds"),
        }


def _clip(text: str) -> str:
    """A header value fit to store and print: printable, at most ``MAX_FIELD_CHARS``."""
    return "".join(c if c.isprintable() else "?" for c in text.strip()[:MAX_FIELD_CHARS])


def record(db: Database, refused: RefusedWebhook, *, keep: int) -> None:
    """Store ``refused`` and delete all but the newest ``keep`` rows (``keep`` 0: none)."""
    if keep <= 0:
        return
    with db.write() as tx:
        tx.execute(
            "INSERT INTO refused_webhooks (delivery_id, forge, event, code, detail, received_at)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (
                _clip(refused.delivery_id),
                _clip(refused.forge),
                None if refused.event is None else _clip(refused.event) or None,
                refused.code,
                refused.detail,
                refused.received_at,
            ),
        )
        tx.execute(
            "DELETE FROM refused_webhooks WHERE id <= (SELECT max(id) FROM refused_webhooks) - ?",
            (keep,),
        )


def for_delivery(db: Database, delivery_id: str, *, limit: int = 20) -> list[RefusedWebhook]:
    """The refusals of the deliveries named ``delivery_id``, newest first."""
    if not delivery_id.strip():
        return []  # requests without a delivery header are kept, but name no delivery
    with db.read() as tx:
        rows = tx.all(
            "SELECT * FROM refused_webhooks WHERE delivery_id = ? ORDER BY id DESC LIMIT ?",
            (delivery_id.strip(), limit),
        )
    return rows_as(RefusedWebhook, rows)
