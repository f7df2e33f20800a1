"""Reading a PR's lease audit trail (``reviewbot lease history``, the API, ``explain``)."""

from __future__ import annotations

from reviewbot.core.lease_history import LeaseHistory
from reviewbot.core.leases import Role
from reviewbot.core.models import PullRef
from reviewbot.store import lease_history as history_rows
from reviewbot.store import repositories
from reviewbot.store.leases import LeaseStore


def read_lease_history(
    leases: LeaseStore,
    pr: PullRef,
    *,
    role: Role | None = None,
    limit: int = history_rows.DEFAULT_LIMIT,
) -> LeaseHistory:
    """The trail of ``pr`` (a renamed repository's old name finds the same rows).

    Blocking: async callers go through ``leases.run``.
    """
    repo = repositories.resolve(leases.db, pr.forge, pr.full_name)
    entries = leases.history(pr.forge, repo, pr.number, role=role, limit=limit)
    return LeaseHistory(f"{pr.forge}:{repo}#{pr.number}", tuple(entries))
