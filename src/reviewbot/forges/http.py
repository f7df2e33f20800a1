"""The one HTTP policy both forge adapters use: retries, rate limits, ETags, accounting.

* Idempotent requests (GET) are retried with backoff on 5xx, timeouts and connection
  errors. Writes are never retried after a 5xx, a timeout or a broken connection: the
  forge may have applied them, so :class:`ForgeUnavailable` is raised and the caller
  re-reads live state before deciding.
* A rate-limited answer (429, or a 403 that is a primary or secondary limit) was not
  applied, so any request waits and is sent again: ``retry-after`` first, then
  ``x-ratelimit-reset``, else a fixed wait that grows with each attempt. A wait longer
  than the cap is not slept: :class:`RateLimited` is raised with the wait.
* GETs are conditional: the ETag of each answer is kept per URL and credentials, and a
  304 is served from that cache (GitHub does not count a 304 against the rate limit).
* Every request sent is counted under the operation that sent it (``calls``), and every
  304 under ``not_modified``, so a caller can assert the cost of an operation.
* ``on_wait`` (when given) hears each wait: before every retry, and when a request has
  had no answer for ``slow_notice_s``, so a command line can say what it waits for
  instead of going silent for seconds.
"""

from __future__ import annotations

import asyncio
import email.utils
import hashlib
import importlib.util
import json
import socket
import sys
import time
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from reviewbot.core.clock import Clock
from reviewbot.forges.errors import (
    AuthenticationFailed,
    ForgeError,
    ForgeUnavailable,
    ForgeUrlWrong,
    NotFound,
    PermissionDenied,
    RateLimited,
)

Sleep = Callable[[float], Awaitable[None]]
ErrorMap = Mapping[int, type[ForgeError]]


def _record_absent_sniffio() -> None:
    """httpcore runs ``import sniffio`` for every lock and event it sets up, several times
    per request. Where sniffio is not installed (it is optional: httpcore then assumes
    asyncio), each of those failed imports searches every ``sys.path`` entry again, a few
    dozen ``stat`` calls: about half of the CPU of a forge request. A ``None`` entry in
    ``sys.modules`` is Python's own record of a module known to be absent: the import then
    fails at once, exactly as it did."""
    if "sniffio" not in sys.modules and importlib.util.find_spec("sniffio") is None:
        sys.modules["sniffio"] = None  # type: ignore[assignment]


_record_absent_sniffio()

NO_ANSWER_YET = "no answer yet"  # the reason of a wait for a request still in flight


@dataclass(frozen=True)
class ForgeWait:
    """A wait for the forge: a request to be sent again, or one not answered yet."""

    operation: str
    url: str  # the request's URL (credentials travel in headers, never here)
    reason: str  # "connection refused", "timed out", "HTTP 503", "no answer yet"...
    attempt: int  # the attempt that failed (or is still waiting), from 1
    attempts: int  # how many attempts the policy allows for this kind of failure
    wait_s: float  # until the next attempt (or until this one times out)


OnWait = Callable[[ForgeWait], None]

IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
SECONDARY_LIMIT_HINTS = ("secondary rate limit", "abuse detection", "rate limit exceeded")


class ForgeWatcher(Protocol):
    """Who hears of every exchange (``reviewbot.observe.ForgeWatch``: metrics and logs)."""

    def answered(
        self, operation: str, status: int, headers: Mapping[str, str], duration_s: float
    ) -> None: ...

    def unanswered(self, operation: str, why: str, detail: str, duration_s: float) -> None: ...

    def rate_limit_wait(
        self, operation: str, status: int, wait_s: float, *, waits: bool
    ) -> None: ...


@dataclass(frozen=True)
class RetryPolicy:
    """How long and how often to retry; every wait is capped."""

    attempts: int = 4  # tries of an idempotent request on 5xx / timeout / connection error
    backoff_s: float = 0.5  # first backoff; doubles per attempt
    max_backoff_s: float = 8.0
    rate_limit_attempts: int = 3  # tries of any request that is answered "rate limited"
    rate_limit_default_wait_s: float = 60.0  # no retry-after nor x-ratelimit-reset
    max_rate_limit_wait_s: float = 120.0  # a longer wait is raised, not slept
    timeout_s: float = 10.0
    slow_notice_s: float = 1.0  # a request unanswered this long is reported to ``on_wait``
    max_body_bytes: int = 16 * 1024 * 1024
    cache_entries: int = 2048


@dataclass(frozen=True)
class HttpResult:
    status: int
    headers: httpx.Headers
    body: bytes
    from_cache: bool = False


@dataclass
class _CacheEntry:
    etag: str
    status: int
    headers: httpx.Headers
    body: bytes


@dataclass
class ForgeHttp:
    """Sends requests for one forge with the policy above.

    ``sleep`` and ``clock`` are injected so tests run against a fake clock.
    """

    client: httpx.AsyncClient
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    sleep: Sleep = asyncio.sleep
    clock: Clock = time.time
    calls: Counter[str] = field(default_factory=Counter)
    watch: ForgeWatcher | None = None
    not_modified: Counter[str] = field(default_factory=Counter)
    on_wait: OnWait | None = None
    _cache: OrderedDict[tuple[str, str], _CacheEntry] = field(default_factory=OrderedDict)
    # Writes go one at a time (GitHub's advice against secondary rate limits).
    _write_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def rate_limited_calls(self) -> Counter[str]:
        """Requests per operation that count against a forge's rate limit (not 304s)."""
        counted = Counter(self.calls)
        counted.subtract(self.not_modified)
        return +counted

    async def send(
        self,
        operation: str,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str],
        body: bytes = b"",
        errors: ErrorMap | None = None,
        once: bool = False,
        read: bool = False,
    ) -> HttpResult:
        """Send one logical request; returns a 2xx result or raises a typed forge error.

        ``errors`` maps statuses the operation gives a meaning of its own (a merge's
        409) to the error type to raise. ``once``: a single exchange, never retried nor
        waited for (a health probe reports what it sees at once). ``read``: a POST that only
        reads (a GraphQL query): not queued behind the writes, retried as a GET is unless
        ``once``, never cached.
        """
        method = method.upper()
        if method in IDEMPOTENT_METHODS or read:
            return await self._send(operation, method, url, headers, body, errors, once, read)
        async with self._write_lock:
            return await self._send(operation, method, url, headers, body, errors, once)

    async def _send(
        self,
        operation: str,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes,
        errors: ErrorMap | None,
        once: bool = False,
        read: bool = False,
    ) -> HttpResult:
        idempotent = (method in IDEMPOTENT_METHODS or read) and not once
        request_headers = dict(headers)
        cache_key = (url, _auth_scope(request_headers)) if method == "GET" else None
        cached = self._cache.get(cache_key) if cache_key else None
        if cached is not None:
            request_headers["if-none-match"] = cached.etag
        failures = 0
        limited = 0
        while True:
            self.calls[operation] += 1
            started = time.perf_counter()
            try:
                status, resp_headers, content = await self._once_noticed(
                    operation, failures + 1, method, url, request_headers, body
                )
            except httpx.TimeoutException as exc:
                self._unanswered(operation, "timeout", exc, started)
                failures += 1
                if not idempotent or failures >= self.policy.attempts:
                    error = ForgeUnavailable(
                        f"timed out after {self.policy.timeout_s:g} s ({type(exc).__name__})",
                        operation=operation,
                    )
                    error.reached = False
                    raise error from exc
                await self._wait(operation, url, "timed out", failures, self._backoff(failures))
                continue
            except ForgeError as exc:
                exc.operation = operation
                raise
            except httpx.TransportError as exc:
                self._unanswered(operation, "unreachable", exc, started)
                failures += 1
                if not idempotent or failures >= self.policy.attempts:
                    error = ForgeUnavailable(
                        f"connection failed ({type(exc).__name__}: {transport_reason(exc)})",
                        operation=operation,
                    )
                    error.reached = False
                    raise error from exc
                reason = transport_reason(exc)
                await self._wait(operation, url, reason, failures, self._backoff(failures))
                continue
            if self.watch is not None:
                self.watch.answered(operation, status, resp_headers, time.perf_counter() - started)

            if status == 304 and cached is not None:
                self.not_modified[operation] += 1
                assert cache_key is not None
                self._cache.move_to_end(cache_key)
                return HttpResult(cached.status, cached.headers, cached.body, from_cache=True)

            if is_rate_limited(status, resp_headers, content):
                limited += 1
                wait = self.rate_limit_wait(resp_headers, limited)
                gives_up = (
                    once
                    or limited >= self.policy.rate_limit_attempts
                    or wait > self.policy.max_rate_limit_wait_s
                )
                if self.watch is not None:
                    self.watch.rate_limit_wait(operation, status, wait, waits=not gives_up)
                if gives_up:
                    raise RateLimited(
                        _message(content) or "rate limited",
                        retry_after=wait,
                        status=status,
                        operation=operation,
                    )
                await self._wait(
                    operation,
                    url,
                    f"rate limited (HTTP {status})",
                    limited,
                    wait,
                    attempts=self.policy.rate_limit_attempts,
                )
                continue

            if status >= 500:
                failures += 1
                wait = _retry_after(resp_headers, self.clock) or self._backoff(failures)
                if (
                    not idempotent
                    or failures >= self.policy.attempts
                    or wait > self.policy.max_rate_limit_wait_s
                ):
                    raise ForgeUnavailable(
                        _message(content) or "server error", status=status, operation=operation
                    )
                await self._wait(operation, url, f"HTTP {status}", failures, wait)
                continue

            if 200 <= status < 300:
                if cache_key is not None:
                    self._remember(cache_key, status, resp_headers, content)
                return HttpResult(status, resp_headers, content)

            refused = error_for_status(status, content, operation=operation, errors=errors)
            if isinstance(refused, PermissionDenied):
                # GitHub names what the call needed (``administration=read``); kept so the
                # refusal can say what to grant.
                refused.accepted = resp_headers.get("x-accepted-github-permissions", "")
            raise refused

    def _unanswered(self, operation: str, why: str, exc: Exception, started: float) -> None:
        if self.watch is not None:
            detail = f"{type(exc).__name__}: {exc}"
            self.watch.unanswered(operation, why, detail, time.perf_counter() - started)

    async def _once(
        self, method: str, url: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, httpx.Headers, bytes]:
        """One HTTP exchange, reading at most ``max_body_bytes`` of the answer."""
        limit = self.policy.max_body_bytes
        async with self.client.stream(
            method, url, headers=headers, content=body or None, timeout=self.policy.timeout_s
        ) as response:
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > limit:
                raise ForgeError(
                    f"response body of {declared} bytes exceeds {limit}",
                    status=response.status_code,
                )
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > limit:
                    raise ForgeError(
                        f"response body exceeds {limit} bytes", status=response.status_code
                    )
                chunks.append(chunk)
            return response.status_code, response.headers, b"".join(chunks)

    def rate_limit_wait(self, headers: httpx.Headers, attempt: int) -> float:
        """Seconds to wait: ``retry-after``, then ``x-ratelimit-reset``, else a growing default."""
        after = _retry_after(headers, self.clock)
        if after is not None:
            return after
        reset = headers.get("x-ratelimit-reset", "")
        if reset.strip().isdigit():
            return max(0.0, float(reset) - self.clock()) + 1.0
        return self.policy.rate_limit_default_wait_s * (2.0 ** (attempt - 1))

    async def _once_noticed(
        self,
        operation: str,
        attempt: int,
        method: str,
        url: str,
        headers: dict[str, str],
        body: bytes,
    ) -> tuple[int, httpx.Headers, bytes]:
        """:meth:`_once`, telling ``on_wait`` when no answer came within ``slow_notice_s``."""
        if self.on_wait is None:
            return await self._once(method, url, headers, body)
        wait = ForgeWait(
            operation,
            url,
            NO_ANSWER_YET,
            attempt,
            self.policy.attempts,
            max(0.0, self.policy.timeout_s - self.policy.slow_notice_s),
        )
        notice = asyncio.get_running_loop().call_later(
            self.policy.slow_notice_s, self.on_wait, wait
        )
        try:
            return await self._once(method, url, headers, body)
        finally:
            notice.cancel()

    async def _wait(
        self,
        operation: str,
        url: str,
        reason: str,
        attempt: int,
        wait_s: float,
        *,
        attempts: int | None = None,
    ) -> None:
        if self.on_wait is not None:
            bound = self.policy.attempts if attempts is None else attempts
            self.on_wait(ForgeWait(operation, url, reason, attempt, bound, wait_s))
        await self.sleep(wait_s)

    def _backoff(self, failures: int) -> float:
        return min(self.policy.max_backoff_s, self.policy.backoff_s * (2.0 ** (failures - 1)))

    def _remember(
        self, key: tuple[str, str], status: int, headers: httpx.Headers, body: bytes
    ) -> None:
        etag = headers.get("etag")
        if not etag:
            self._cache.pop(key, None)
            return
        self._cache[key] = _CacheEntry(etag, status, headers, body)
        self._cache.move_to_end(key)
        while len(self._cache) > self.policy.cache_entries:
            self._cache.popitem(last=False)


class HttpAdapter:
    """What both forge adapters share around their :class:`ForgeHttp`: the request
    accounting, and closing the HTTP client they opened (never one they were given)."""

    _http: ForgeHttp
    _owns_client: bool

    def _open_http(
        self,
        client: httpx.AsyncClient | None,
        policy: RetryPolicy | None,
        sleep: Sleep,
        clock: Clock,
        on_wait: OnWait | None = None,
        watch: ForgeWatcher | None = None,
    ) -> None:
        self._owns_client = client is None
        self._http = ForgeHttp(
            client or httpx.AsyncClient(),
            policy or RetryPolicy(),
            sleep=sleep,
            clock=clock,
            on_wait=on_wait,
            watch=watch,
        )

    @property
    def calls(self) -> Counter[str]:
        """HTTP requests sent, per operation (retries and 304s included)."""
        return self._http.calls

    @property
    def not_modified(self) -> Counter[str]:
        """Answers served from the ETag cache (304), per operation."""
        return self._http.not_modified

    @property
    def rate_limited_calls(self) -> Counter[str]:
        return self._http.rate_limited_calls

    async def aclose(self) -> None:
        if self._owns_client:
            await self._http.client.aclose()


def transport_reason(exc: BaseException) -> str:
    """What went wrong below HTTP, in words (httpx says "All connection attempts failed")."""
    seen: set[int] = set()
    chain: list[BaseException] = [exc]
    while chain:
        cause = chain.pop()
        if id(cause) in seen:
            continue
        seen.add(id(cause))
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
        if isinstance(cause, socket.gaierror):
            return "host name not found"
        if isinstance(cause, httpx.TimeoutException | TimeoutError):
            return "timed out"
        chain += [c for c in (cause.__context__, cause.__cause__) if c is not None]
    return str(exc) or type(exc).__name__


def is_rate_limited(status: int, headers: httpx.Headers, body: bytes) -> bool:
    """429, or a 403 that GitHub uses for its primary and secondary limits."""
    if status == 429:
        return True
    if status != 403:
        return False
    if headers.get("x-ratelimit-remaining") == "0" or "retry-after" in headers:
        return True
    message = _message(body).lower()
    return any(hint in message for hint in SECONDARY_LIMIT_HINTS)


def error_for_status(
    status: int, body: bytes, *, operation: str, errors: ErrorMap | None = None
) -> ForgeError:
    """The typed error for a non-2xx answer that is not a rate limit."""
    message = _message(body) or f"HTTP {status}"
    if errors and status in errors:
        return errors[status](message, status=status, operation=operation)
    if status == 404 and body.strip() and not _is_json(body):
        # Both APIs answer 404 in JSON; a page means the URL is not the API.
        return ForgeUrlWrong(
            "the answer is not the forge API's (is the configured URL right?)",
            status=status,
            operation=operation,
        )
    kind: type[ForgeError] = {
        401: AuthenticationFailed,
        403: PermissionDenied,
        404: NotFound,
    }.get(status, ForgeUnavailable if status >= 500 else ForgeError)
    return kind(message, status=status, operation=operation)


def decode_json(result: HttpResult, *, operation: str) -> Any:
    """The JSON body of a result; a body that is not JSON is a :class:`ForgeError`."""
    try:
        return json.loads(result.body)
    except ValueError:
        raise ForgeError(
            "malformed JSON in response", status=result.status, operation=operation
        ) from None


def _retry_after(headers: httpx.Headers, clock: Clock) -> float | None:
    value = headers.get("retry-after", "").strip()
    if not value:
        return None
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - clock())


def _is_json(body: bytes) -> bool:
    try:
        json.loads(body)
    except ValueError:
        return False
    return True


def _message(body: bytes) -> str:
    """The forge's error message (GitHub and Gitea both use ``message``), else empty."""
    try:
        data = json.loads(body)
    except ValueError:
        return ""
    if isinstance(data, dict) and isinstance(data.get("message"), str):
        return str(data["message"])[:500]
    return ""


def _auth_scope(headers: Mapping[str, str]) -> str:
    """Cache entries are kept per credentials, identified by a hash (never the secret)."""
    for key, value in headers.items():
        if key.lower() == "authorization":
            return hashlib.sha256(value.encode()).hexdigest()
    return ""
