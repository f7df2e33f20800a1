"""One error root: every exception class reviewbot defines derives from ``ReviewbotError``.

So a caller (the HTTP face, the command line, a test) can tell reviewbot's own errors from
everything else with one ``except``, and each carries a ``code`` and a ``detail``. A class
may keep a standard base beside the root (``ValueError``, ``PermissionError``) for callers
that catch those; one that cannot derive from the root at all (a library demands another
base) is listed in ``EXEMPT`` with the reason.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import reviewbot
from reviewbot.config import ConfigError
from reviewbot.core.errors import ReviewbotError
from reviewbot.workflowdb.access import AccessDenied
from reviewbot.workflowdb.migrations import BadMigrationName, MigrationError
from reviewbot.workflowdb.protected import ProtectedTable

# "module.Class" -> why it cannot derive from ReviewbotError. Empty today.
EXEMPT: dict[str, str] = {}


def _exception_classes() -> list[type[BaseException]]:
    found: list[type[BaseException]] = []
    for info in pkgutil.walk_packages(reviewbot.__path__, prefix="reviewbot."):
        if info.name == "reviewbot.__main__":  # running it is its only purpose
            continue
        module = importlib.import_module(info.name)
        found += [
            cls
            for _, cls in inspect.getmembers(module, inspect.isclass)
            if issubclass(cls, BaseException) and cls.__module__ == info.name
        ]
    return sorted(found, key=lambda c: f"{c.__module__}.{c.__qualname__}")


CLASSES = _exception_classes()


def test_the_walk_finds_the_errors_of_every_layer() -> None:
    layers = {c.__module__.split(".")[1] for c in CLASSES}
    assert {"core", "config", "forges", "ingress", "store", "workflowdb", "runtime"} <= layers
    assert {"server", "cli", "sim", "demo"} <= layers


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_every_error_derives_from_the_root(cls: type[BaseException]) -> None:
    name = f"{cls.__module__}.{cls.__qualname__}"
    if name in EXEMPT:
        assert not issubclass(cls, ReviewbotError), f"{name} is rooted now: drop the exemption"
        return
    assert issubclass(cls, ReviewbotError), f"{name} derives from {cls.__mro__[1].__name__}"


def test_the_workflow_db_and_configuration_errors_keep_their_names_and_messages() -> None:
    message = "migration file 'x.sql' not found in /tmp/db/migrations"
    for cls in (MigrationError, BadMigrationName, ConfigError, AccessDenied):
        err = cls(message)
        assert isinstance(err, ReviewbotError) and str(err) == message and err.detail == message
    protected = ProtectedTable("mutate: leases is one of reviewbot's own tables", table="leases")
    assert isinstance(protected, PermissionError) and protected.table == "leases"
    assert str(protected) == "mutate: leases is one of reviewbot's own tables"
