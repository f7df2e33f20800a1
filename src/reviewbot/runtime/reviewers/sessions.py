"""Sessions, their tokens and their tool registries. Authority belongs to a session.

A run of the pipeline is a session. A step of the run (an external reviewer) is a child
session of that run. Every session has its own tool registry; a call resolves in the
caller's registry first, then in its parent run's, and nowhere else: there is no global
table to fall back on, so a tool one session registered can never be reached by another
unrelated session, however the calls interleave. A tool found in neither registry is
refused with :class:`NotSessionOwner`, naming the caller and the owner it looked for.

A session token is random, shown once (to the step, in ``REVIEWBOT_SESSION_TOKEN``), kept
only as its SHA-256 hash, and expires. Ending a run removes its registry, its children and
every token they held, so a token of an ended run is refused.

Everything lives in the memory of the process that runs the pipeline: tools are code, and
a registry cannot outlive the process that registered it.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from reviewbot.core.errors import Refused
from reviewbot.core.findings import Finding, finding_bytes
from reviewbot.store.tokens import hash_token
from reviewbot.workflowdb.access import DBAccess

SESSION_TOKEN_PREFIX = "rbs_"  # noqa: S105 - a prefix, not a secret
MAX_FINDINGS_PER_RUN = 5000
MAX_FINDING_BYTES_PER_RUN = 8 * 1024 * 1024  # their paths and messages


class SessionError(Refused):
    """A session refusal; ``code`` names it (the server maps it to a status)."""

    code = "session_error"


class SessionTokenInvalid(SessionError):
    code = "invalid_session_token"


class NotSessionOwner(SessionError):
    code = "not_session_owner"


class SessionNotFound(SessionError):
    code = "session_not_found"


class SessionExists(SessionError):
    code = "session_exists"


@dataclass(frozen=True)
class Session:
    """One session: a run (no parent) or a step of a run (``parent_id`` is the run)."""

    id: str
    parent_id: str | None
    db_access: DBAccess
    started_at: float

    @property
    def is_run(self) -> bool:
        return self.parent_id is None

    @property
    def run_id(self) -> str:
        """The run this session belongs to (itself for a run)."""
        return self.parent_id or self.id


@dataclass(frozen=True)
class ToolCall:
    """What a tool is called with: who called, whose registry answered, the arguments."""

    caller: Session
    owner: Session
    arguments: Mapping[str, Any]

    @property
    def db_access(self) -> DBAccess:
        """The caller's access, never more than the owner's: a grant only lowers."""
        return min(self.caller.db_access, self.owner.db_access)


ToolHandler = Callable[[ToolCall], Awaitable[Any]]


@dataclass(frozen=True)
class Tool:
    name: str
    handler: ToolHandler
    description: str = ""


@dataclass
class _Entry:
    session: Session
    tools: dict[str, Tool] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    findings_size: int = 0  # their paths and messages, in bytes
    token_hashes: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class _TokenRecord:
    session_id: str
    expires_at: float


class SessionManager:
    """Live sessions of this process, their registries and token hashes.

    Thread-safe: tools may run in worker threads while the server authenticates calls.
    ``clock`` returns seconds (``time.time`` by default) and ``new_secret`` the random part
    of a token; both are injected so tests can control them.
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.time,
        new_secret: Callable[[], str] = lambda: secrets.token_urlsafe(32),
    ) -> None:
        self._clock = clock
        self._new_secret = new_secret
        self._lock = threading.Lock()
        self._sessions: dict[str, _Entry] = {}
        self._tokens: dict[str, _TokenRecord] = {}

    # -- lifecycle ---------------------------------------------------------------------

    def open_run(self, run_id: str, *, db_access: DBAccess, tools: Iterable[Tool] = ()) -> Session:
        """Start the session of a run, with its tools. A live run id is refused."""
        return self._open(run_id, None, db_access, tools)

    def open_child(
        self,
        parent_id: str,
        name: str,
        *,
        db_access: DBAccess | None = None,
        tools: Iterable[Tool] = (),
    ) -> Session:
        """Start a step of run ``parent_id`` as the session ``<parent>/<name>``.

        The step's DB access defaults to the run's and can only be lower.
        """
        with self._lock:
            parent = self._sessions.get(parent_id)
            if parent is None:
                raise SessionNotFound(f"run session {parent_id!r} is not live")
            if not parent.session.is_run:
                raise SessionError(
                    f"session {parent_id!r} is a step of run {parent.session.parent_id!r}; "
                    "only a run can have steps"
                )
            run_access = parent.session.db_access
        access = run_access if db_access is None else min(db_access, run_access)
        return self._open(f"{parent_id}/{name}", parent_id, access, tools)

    def _open(
        self, session_id: str, parent_id: str | None, access: DBAccess, tools: Iterable[Tool]
    ) -> Session:
        if not session_id or len(session_id) > 300:
            raise SessionError("a session id must be 1 to 300 characters")
        session = Session(session_id, parent_id, access, self._clock())
        entry = _Entry(session, {tool.name: tool for tool in tools})
        with self._lock:
            if session_id in self._sessions:
                raise SessionExists(f"session {session_id!r} is already live")
            if parent_id is not None and parent_id not in self._sessions:
                raise SessionNotFound(f"run session {parent_id!r} has ended")
            self._sessions[session_id] = entry
        return session

    def end(self, session_id: str) -> list[Finding]:
        """End a session: its registry, its steps and every token they hold are removed.

        Returns the findings recorded for it (a run's findings; a step records into its
        run). Ending a session that is not live is a no-op returning nothing.
        """
        with self._lock:
            ids = [session_id] + [
                sid for sid, e in self._sessions.items() if e.session.parent_id == session_id
            ]
            findings: list[Finding] = []
            for sid in ids:
                entry = self._sessions.pop(sid, None)
                if entry is None:
                    continue
                for token_hash in entry.token_hashes:
                    self._tokens.pop(token_hash, None)
                if sid == session_id:
                    findings = list(entry.findings)
            return findings

    @contextmanager
    def run(
        self, run_id: str, *, db_access: DBAccess, tools: Iterable[Tool] = ()
    ) -> Iterator[Session]:
        """``with manager.run(...) as session``: the run's session, ended on exit."""
        session = self.open_run(run_id, db_access=db_access, tools=tools)
        try:
            yield session
        finally:
            self.end(session.id)

    def get(self, session_id: str) -> Session | None:
        with self._lock:
            entry = self._sessions.get(session_id)
            return None if entry is None else entry.session

    def live_sessions(self) -> list[str]:
        with self._lock:
            return sorted(self._sessions)

    # -- tokens ------------------------------------------------------------------------

    def issue_token(self, session_id: str, *, ttl_s: float) -> str:
        """A new token for a live session; the plain token exists only in the return value."""
        if ttl_s <= 0:
            raise SessionError("a session token needs a positive lifetime")
        token = SESSION_TOKEN_PREFIX + self._new_secret()
        digest = hash_token(token)
        with self._lock:
            entry = self._sessions.get(session_id)
            if entry is None:
                raise SessionNotFound(f"session {session_id!r} is not live")
            self._tokens[digest] = _TokenRecord(session_id, self._clock() + ttl_s)
            entry.token_hashes.add(digest)
        return token

    def authenticate(self, token: str) -> Session:
        """The live session a token belongs to; anything else is :class:`SessionTokenInvalid`."""
        if not token.startswith(SESSION_TOKEN_PREFIX) or len(token) > 200:
            raise SessionTokenInvalid("not a session token")
        digest = hash_token(token)
        now = self._clock()
        with self._lock:
            record = self._tokens.get(digest)
            if record is None:
                raise SessionTokenInvalid("unknown session token (revoked, or its run has ended)")
            if now >= record.expires_at:
                self._drop_token(digest, record)
                raise SessionTokenInvalid(f"session token of {record.session_id!r} has expired")
            entry = self._sessions.get(record.session_id)
            if entry is None:  # cannot happen while end() drops tokens; fail closed anyway
                self._tokens.pop(digest, None)
                raise SessionTokenInvalid(f"session {record.session_id!r} has ended")
            return entry.session

    def revoke_tokens(self, session_id: str) -> int:
        """Revoke every token of a session (it stays live); returns how many."""
        with self._lock:
            entry = self._sessions.get(session_id)
            if entry is None:
                return 0
            hashes = list(entry.token_hashes)
            for digest in hashes:
                self._tokens.pop(digest, None)
            entry.token_hashes.clear()
            return len(hashes)

    def prune_expired(self) -> int:
        """Forget expired tokens; returns how many."""
        now = self._clock()
        with self._lock:
            expired = [(d, r) for d, r in self._tokens.items() if now >= r.expires_at]
            for digest, record in expired:
                self._drop_token(digest, record)
            return len(expired)

    def _drop_token(self, digest: str, record: _TokenRecord) -> None:
        self._tokens.pop(digest, None)
        entry = self._sessions.get(record.session_id)
        if entry is not None:
            entry.token_hashes.discard(digest)

    # -- registries --------------------------------------------------------------------

    def register_tool(self, session_id: str, tool: Tool) -> None:
        with self._lock:
            entry = self._sessions.get(session_id)
            if entry is None:
                raise SessionNotFound(f"session {session_id!r} is not live")
            entry.tools[tool.name] = tool

    def tool_names(self, session_id: str) -> list[str]:
        with self._lock:
            entry = self._sessions.get(session_id)
            return [] if entry is None else sorted(entry.tools)

    def resolve(self, caller: Session, name: str) -> tuple[Tool, Session]:
        """The tool ``name`` for ``caller`` and the session whose registry holds it.

        Looks in the caller's registry, then in its parent run's; never anywhere else.
        """
        with self._lock:
            own = self._sessions.get(caller.id)
            if own is None:
                raise SessionTokenInvalid(f"session {caller.id!r} has ended")
            tool = own.tools.get(name)
            if tool is not None:
                return tool, own.session
            if caller.parent_id is None:
                raise NotSessionOwner(
                    f"caller does not own this tool session: tool {name!r} is not registered "
                    f"for caller session {caller.id!r}, the only owner looked for (it has no "
                    "parent run)"
                )
            parent = self._sessions.get(caller.parent_id)
            if parent is not None:
                tool = parent.tools.get(name)
                if tool is not None:
                    return tool, parent.session
            raise NotSessionOwner(
                f"caller does not own this tool session: tool {name!r} is registered neither "
                f"for caller session {caller.id!r} nor for its owner run {caller.parent_id!r}"
            )

    # -- findings ----------------------------------------------------------------------

    def record_finding(self, run_id: str, finding: Finding) -> int:
        """Append a finding to a live run; returns how many the run holds now."""
        with self._lock:
            entry = self._sessions.get(run_id)
            if entry is None or not entry.session.is_run:
                raise SessionNotFound(f"run session {run_id!r} is not live")
            if len(entry.findings) >= MAX_FINDINGS_PER_RUN:
                raise SessionError(
                    f"run {run_id!r} already holds {MAX_FINDINGS_PER_RUN} findings, the limit"
                )
            size = entry.findings_size + finding_bytes(finding)
            if size > MAX_FINDING_BYTES_PER_RUN:
                raise SessionError(
                    f"run {run_id!r} would hold more than {MAX_FINDING_BYTES_PER_RUN} bytes of "
                    "findings, the limit"
                )
            entry.findings.append(finding)
            entry.findings_size = size
            return len(entry.findings)

    def findings(self, run_id: str) -> list[Finding]:
        with self._lock:
            entry = self._sessions.get(run_id)
            return [] if entry is None else list(entry.findings)
