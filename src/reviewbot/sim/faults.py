"""Fault injection: rules matched in order against each forge API request."""

from __future__ import annotations

import fnmatch
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

BeforeHook = Callable[[], object | Awaitable[object]]


@dataclass
class FaultRule:
    """What to do to matching requests; ``times=None`` means every matching request.

    ``status``: answer this status with the forge's error body instead of handling the request.
    ``retry_after``: seconds, sent as ``retry-after``. ``secondary_rate_limit``: GitHub's 403 body
    for the secondary limit (status defaults to 403). ``delay``: seconds to wait before handling.
    ``timeout``: hold the answer this many seconds (``True``: 30 s) so a client's timeout fires
    first. ``apply_then_fail``: perform the request's effect, then answer ``status``.
    ``before``: a callable (sync or async) run before the request is handled, e.g. to push a new
    head between two calls of the client.
    """

    forge: str | None = None
    method: str | None = None
    path: str | None = None  # exact path or a glob (``/repos/acme/api/pulls/*``)
    status: int | None = None
    times: int | None = 1
    retry_after: float | None = None
    delay: float = 0.0
    timeout: float | bool = False
    secondary_rate_limit: bool = False
    apply_then_fail: bool = False
    before: BeforeHook | None = None
    hits: int = 0

    def matches(self, forge: str, method: str, path: str) -> bool:
        if self.times is not None and self.hits >= self.times:
            return False
        if self.forge is not None and self.forge != forge:
            return False
        if self.method is not None and self.method.upper() != method.upper():
            return False
        if self.path is None:
            return True
        return self.path == path or fnmatch.fnmatchcase(path, self.path)

    @property
    def hold_seconds(self) -> float:
        if self.timeout is True:
            return 30.0
        if self.timeout is False:
            return 0.0
        return float(self.timeout)

    @property
    def answer_status(self) -> int | None:
        if self.status is None and self.secondary_rate_limit:
            return 403
        return self.status


class Faults:
    """The ordered fault rules of one simulator."""

    def __init__(self) -> None:
        self._rules: list[FaultRule] = []
        self._lock = threading.Lock()

    def add(
        self,
        forge: str | None = None,
        method: str | None = None,
        path: str | None = None,
        *,
        status: int | None = None,
        times: int | None = 1,
        retry_after: float | None = None,
        delay: float = 0.0,
        timeout: float | bool = False,
        secondary_rate_limit: bool = False,
        apply_then_fail: bool = False,
        before: BeforeHook | None = None,
    ) -> FaultRule:
        if apply_then_fail and status is None and not timeout:
            raise ValueError("apply_then_fail needs a status or a timeout to fail with")
        rule = FaultRule(
            forge=forge,
            method=method,
            path=path,
            status=status,
            times=times,
            retry_after=retry_after,
            delay=delay,
            timeout=timeout,
            secondary_rate_limit=secondary_rate_limit,
            apply_then_fail=apply_then_fail,
            before=before,
        )
        with self._lock:
            self._rules.append(rule)
        return rule

    def take(self, forge: str, method: str, path: str) -> FaultRule | None:
        """The first rule matching the request, counted as used once."""
        with self._lock:
            for rule in self._rules:
                if rule.matches(forge, method, path):
                    rule.hits += 1
                    return rule
        return None

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    @property
    def rules(self) -> list[FaultRule]:
        return list(self._rules)
