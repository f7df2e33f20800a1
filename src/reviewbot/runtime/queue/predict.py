"""``queue_predict`` over the store: which queued PRs and trains of a base branch a planned
change to some files would overlap (:func:`reviewbot.core.queue.queue_predict`), by the
repository's path groups and serial paths. The HTTP route, the MCP tool and
``reviewbot queue predict`` all answer :func:`prediction_json`."""

from __future__ import annotations

from typing import Any

from reviewbot.config import Settings
from reviewbot.core.errors import Refused
from reviewbot.core.models import RepoRef
from reviewbot.core.queue import Prediction, QueuedEntry, queue_predict
from reviewbot.runtime.queue.session import key_rules
from reviewbot.store.queue import QueueStore

MAX_FILES = 5000
MAX_PATH = 1024


def predict(
    store: QueueStore, settings: Settings, forge: str, repo: str, base: str, files: list[str]
) -> Prediction:
    """The prediction from the repository's rules and the entries queued for ``base``."""
    try:
        ref = RepoRef.parse(repo, forge=forge)
    except ValueError as exc:
        raise Refused(f"repo: {exc}", code="invalid_request") from None
    rules = settings.rules_for(ref)
    if rules is None:
        raise Refused(
            f"{forge}:{repo} has no rules in the configuration", code="repo_not_configured"
        )
    queued = [
        QueuedEntry(e.number, frozenset(e.keys), e.train) for e in store.entries(forge, repo, base)
    ]
    return queue_predict(files, key_rules(rules.merge_queue), queued)


def prediction_json(prediction: Prediction, forge: str, repo: str, base: str) -> dict[str, Any]:
    return {
        "forge": forge,
        "repo": repo,
        "base": base,
        "keys": list(prediction.keys),
        "serial": prediction.serial,
        "independent": prediction.independent,
        "overlaps": [
            {"number": o.number, "train": o.train, "shared": list(o.shared)}
            for o in prediction.entries
        ],
        "trains": list(prediction.trains),
    }
