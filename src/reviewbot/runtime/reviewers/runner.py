"""External reviewers: commands that read a delivery and print JSON findings.

A repository's rules list reviewer commands (``reviewers = ["command ..."]``, or tables with
grants, see docs/reviewers.md). Each runs inside the sandbox
(:mod:`reviewbot.runtime.reviewers.sandbox`), without a shell, in the run folder, as a child
session of the run with its own short-lived ``REVIEWBOT_SESSION_TOKEN``. Its environment is
built from an allow-list only (:data:`ALLOWED_ENV`, plus ``VAR_*`` and ``STEP_*``): webhook
secrets, private keys and forge tokens of the bot never reach it.

Its stdout is JSON: a list of ``{"path", "line", "message", "severity"}`` or an object
``{"findings": [...]}``. Every way a reviewer can fail (the command cannot start, it exits
non-zero, it runs past its timeout, it prints too much, its output is not valid findings)
is a :class:`ReviewerResult` with a typed :class:`ReviewerError`, never an exception.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shlex
import signal
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from reviewbot.config import ReviewerRule, Settings
from reviewbot.core.findings import Finding, bound_findings, inline_comments, merge_findings
from reviewbot.core.models import InlineComment, PullRequestSnapshot
from reviewbot.core.policy import Verdict
from reviewbot.runtime.reviewers.findings import MalformedFindings, parse_findings
from reviewbot.runtime.reviewers.runs import RunFolder, delivery_document, run_id_for, start_run
from reviewbot.runtime.reviewers.sandbox import Launch, PrepareFailed, Sandbox, command_of, probe
from reviewbot.runtime.reviewers.sessions import SessionExists, SessionManager
from reviewbot.runtime.reviewers.tools import run_tools
from reviewbot.workflowdb.access import DBAccess, session_access
from reviewbot.workflowdb.paths import WorkflowPaths
from reviewbot.workflowdb.query import DEFAULT_LIMITS, QueryLimits

log = logging.getLogger(__name__)

# Exactly these names, plus the prefixes below, may reach a reviewer. PATH, HOME and LANG
# come from the bot's environment; the REVIEWBOT_* values are set for the step.
INHERITED_ENV = ("PATH", "HOME", "LANG")
STEP_ENV = (
    "REVIEWBOT_TRIGGER_FILE",
    "REVIEWBOT_RUN_FOLDER",
    "REVIEWBOT_DB_ACCESS",
    "REVIEWBOT_TOOLS_SOCKET",
    "REVIEWBOT_SESSION_TOKEN",
)
ALLOWED_ENV = frozenset(INHERITED_ENV + STEP_ENV)
ALLOWED_ENV_PREFIXES = ("VAR_", "STEP_")

# A run's own tools endpoint: given the run id, a context that listens on a Unix socket in a
# private folder and answers the session tools route for that run's sessions only, yielding
# the socket's host path; it stops listening and removes the folder when the context ends.
# Every process that runs reviews provides one (the composition root builds it), so a
# reviewer reaches its tools whichever process claimed the review.
ToolsEndpoint = Callable[[str], AbstractAsyncContextManager[Path]]

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ACCESS_VALUE = {DBAccess.NONE: "none", DBAccess.READ: "read", DBAccess.READ_WRITE: "read-write"}
_READ_CHUNK = 64 * 1024
REAP_TIMEOUT_S = 5.0  # after the kill: how long the pipes may take to drain
# After the reviewer exits: how long its output may take to arrive. Something it left
# behind may hold the pipes open; that is no reason to wait for it.
DRAIN_AFTER_EXIT_S = 2.0


@dataclass(frozen=True)
class ReviewerLimits:
    """The runner's bounds (the sandbox's own are :class:`SandboxLimits`, probed with it).
    Findings over a bound are dropped and counted, errors kept first."""

    timeout_s: float = 300.0
    max_stdout_bytes: int = 1024 * 1024
    max_stderr_bytes: int = 64 * 1024  # kept for the record; the rest is read and dropped
    max_findings: int = 500  # per reviewer
    max_run_findings: int = 1000  # per run: every reviewer's, and those recorded by tool
    max_run_findings_bytes: int = 1024 * 1024  # their paths and messages, per run

    @classmethod
    def from_settings(cls, settings: Settings) -> ReviewerLimits:
        limits = settings.reviewer_limits
        return cls(
            timeout_s=limits.timeout_s,
            max_stdout_bytes=limits.stdout_bytes,
            max_findings=limits.findings,
            max_run_findings=limits.run_findings,
            max_run_findings_bytes=limits.run_findings_bytes,
        )


class ReviewerErrorKind(StrEnum):
    SPAWN_FAILED = "spawn_failed"
    EXIT_STATUS = "exit_status"
    TIMEOUT = "timeout"
    OUTPUT_TOO_LARGE = "output_too_large"
    MALFORMED_OUTPUT = "malformed_output"
    # The reviewer did not run (see runtime/reviewers/sandbox.py).
    SANDBOX_UNAVAILABLE = "sandbox_unavailable"
    GRANT_REFUSED = "grant_refused"
    SECRET_UNAVAILABLE = "secret_unavailable"  # noqa: S105 - a kind, not a secret


@dataclass(frozen=True)
class ReviewerError:
    kind: ReviewerErrorKind
    detail: str

    def __str__(self) -> str:
        return f"{self.kind.value}: {self.detail}"


@dataclass(frozen=True)
class ReviewerResult:
    command: str
    session_id: str | None
    findings: tuple[Finding, ...] = ()
    error: ReviewerError | None = None
    exit_code: int | None = None
    stderr: str = ""
    dropped_findings: int = 0

    @property
    def ok(self) -> bool:
        return self.error is None

    def describe_error(self) -> str | None:
        return None if self.error is None else f"{self.command!r}: {self.error}"


@dataclass(frozen=True)
class ReviewersOutcome:
    """Every reviewer's result, and all findings of the run (stdout and ``record_finding``)."""

    results: tuple[ReviewerResult, ...]
    findings: tuple[Finding, ...]
    dropped_findings: int = 0  # over the run's bounds

    @property
    def errors(self) -> tuple[str, ...]:
        return tuple(e for r in self.results if (e := r.describe_error()) is not None)

    @property
    def failed(self) -> bool:
        """A reviewer failed: the head gets no review (reason ``reviewer_error``), because
        an approval must not stand on a review that did not happen."""
        return any(not r.ok for r in self.results)

    @property
    def sandbox_unavailable(self) -> bool:
        """No reviewer could run because the sandbox cannot be enforced here."""
        kind = ReviewerErrorKind.SANDBOX_UNAVAILABLE
        return any(r.error is not None and r.error.kind is kind for r in self.results)

    @property
    def comments(self) -> tuple[InlineComment, ...]:
        return inline_comments(self.findings)

    def apply(self, verdict: Verdict) -> Verdict:
        return merge_findings(verdict, self.findings)


# -- environment ---------------------------------------------------------------------------


def access_value(access: DBAccess) -> str:
    """How a DB access level is spelled in ``REVIEWBOT_DB_ACCESS``."""
    return _ACCESS_VALUE[access]


def env_allowed(name: str) -> bool:
    return name in ALLOWED_ENV or (
        name.startswith(ALLOWED_ENV_PREFIXES) and _ENV_NAME.match(name) is not None
    )


def variable_env_name(name: str) -> str:
    """``head_sha`` -> ``VAR_HEAD_SHA``."""
    upper = name.upper()
    full = upper if upper.startswith("VAR_") else f"VAR_{upper}"
    if not _ENV_NAME.match(full):
        raise ValueError(f"variable name {name!r} cannot be an environment variable")
    return full


def pull_variables(
    *, forge: str, owner: str, name: str, number: int, head_sha: str
) -> dict[str, str]:
    """The variables every reviewer gets: ``VAR_FORGE``, ``VAR_OWNER``, ``VAR_REPO``,
    ``VAR_NUMBER`` and ``VAR_HEAD_SHA`` (the same names a delivery file's step reads)."""
    return {
        "forge": forge,
        "owner": owner,
        "repo": name,
        "number": str(number),
        "head_sha": head_sha,
    }


def reviewer_environment(
    parent: Mapping[str, str],
    *,
    trigger_file: Path,
    run_folder: Path,
    db_access: DBAccess,
    tools_socket: str | None = None,
    session_token: str | None = None,
    variables: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The complete environment of a reviewer: the allow-list, and nothing else.

    ``parent`` is the bot's environment: only ``PATH``, ``HOME``, ``LANG``, ``VAR_*`` and
    ``STEP_*`` are read from it. ``variables`` (the PR's forge, owner, repo, number, head
    SHA, ...) become ``VAR_<NAME>`` and win over the parent's values.
    """
    env: dict[str, str] = {name: parent[name] for name in INHERITED_ENV if name in parent}
    env.setdefault("PATH", os.defpath)
    for name, value in parent.items():
        if name.startswith(ALLOWED_ENV_PREFIXES) and _ENV_NAME.match(name):
            env[name] = value
    for name, value in (variables or {}).items():
        env[variable_env_name(name)] = value
    env["REVIEWBOT_TRIGGER_FILE"] = str(trigger_file)
    env["REVIEWBOT_RUN_FOLDER"] = str(run_folder)
    env["REVIEWBOT_DB_ACCESS"] = access_value(db_access)
    if tools_socket is not None:
        env["REVIEWBOT_TOOLS_SOCKET"] = tools_socket
    if session_token is not None:
        env["REVIEWBOT_SESSION_TOKEN"] = session_token
    leaked = sorted(name for name in env if not env_allowed(name))
    if leaked:  # unreachable by construction; a last guard, never a silent pass
        raise RuntimeError(f"reviewer environment holds names outside the allow-list: {leaked}")
    return env


# -- running -------------------------------------------------------------------------------


@dataclass
class _Output:
    stdout: bytearray = field(default_factory=bytearray)
    stdout_too_large: bool = False
    stderr: bytearray = field(default_factory=bytearray)
    stop: asyncio.Event = field(default_factory=asyncio.Event)  # exited, or too much output


async def run_reviewer(
    command: str,
    *,
    cwd: Path,
    env: Mapping[str, str],
    limits: ReviewerLimits = ReviewerLimits(),
    session_id: str | None = None,
    launch: Callable[[list[str]], Launch] | None = None,
) -> ReviewerResult:
    """Run one reviewer command and read its findings. Never raises for a reviewer's fault.

    ``launch`` turns the reviewer's argv into the sandbox's, with its resource limits
    (``None``: run it as it is). The timeout counts until the reviewer exits; its output is
    then read for a short bound.
    """

    def failed(kind: ReviewerErrorKind, detail: str, **kw: Any) -> ReviewerResult:
        return ReviewerResult(command, session_id, error=ReviewerError(kind, detail), **kw)

    try:
        argv = shlex.split(command)
    except ValueError as exc:
        return failed(ReviewerErrorKind.SPAWN_FAILED, f"cannot split the command: {exc}")
    if not argv:
        return failed(ReviewerErrorKind.SPAWN_FAILED, "the command is empty")
    try:
        started = launch(argv) if launch is not None else Launch(argv)
    except OSError as exc:
        return failed(ReviewerErrorKind.SPAWN_FAILED, f"cannot start {argv[0]!r}: {exc.strerror}")
    try:
        proc = await asyncio.create_subprocess_exec(
            *started.argv,
            cwd=cwd,
            env=dict(env),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # its own process group, so a timeout kills it all
            **started.popen_kwargs(),
        )
    except OSError as exc:
        return failed(ReviewerErrorKind.SPAWN_FAILED, f"cannot start {argv[0]!r}: {exc.strerror}")
    finally:
        started.close()

    out = _Output()
    timed_out = False
    try:
        timed_out = not await _collect(proc, out, limits)
    finally:
        await _reap(proc)
    stderr = bytes(out.stderr).decode("utf-8", errors="replace")
    code = proc.returncode
    if timed_out:
        return failed(
            ReviewerErrorKind.TIMEOUT,
            f"still running after {limits.timeout_s:g} s; its process group was killed",
            stderr=stderr,
        )
    if out.stdout_too_large:
        return failed(
            ReviewerErrorKind.OUTPUT_TOO_LARGE,
            f"stdout exceeded {limits.max_stdout_bytes} bytes; its process group was killed",
            stderr=stderr,
        )
    if code != 0:
        return failed(
            ReviewerErrorKind.EXIT_STATUS,
            f"exited with status {code}" + (f": {_last_line(stderr)}" if stderr.strip() else ""),
            exit_code=code,
            stderr=stderr,
        )
    try:
        findings = parse_findings(bytes(out.stdout), source=session_id or command)
    except MalformedFindings as exc:
        return failed(ReviewerErrorKind.MALFORMED_OUTPUT, str(exc), exit_code=code, stderr=stderr)
    kept, dropped = bound_findings(
        findings, count=limits.max_findings, total_bytes=limits.max_run_findings_bytes
    )
    return ReviewerResult(
        command,
        session_id,
        findings=kept,
        exit_code=code,
        stderr=stderr,
        dropped_findings=dropped,
    )


async def _collect(proc: asyncio.subprocess.Process, out: _Output, limits: ReviewerLimits) -> bool:
    """Read the reviewer's output until it exits (``False``: it was still running at the
    timeout), then what is left for :data:`DRAIN_AFTER_EXIT_S` at most.

    Its exit, not the end of its stdout, ends the run: a descendant holding the pipe open
    would otherwise turn a reviewer that finished in time into a timeout. ``Process.wait()``
    waits for the pipes too, so the exit is watched through a pidfd.
    """
    assert proc.stdout is not None and proc.stderr is not None
    tasks = (
        asyncio.create_task(_read_capped(proc.stdout, out, limits.max_stdout_bytes)),
        asyncio.create_task(_drain(proc.stderr, out.stderr, limits.max_stderr_bytes)),
    )
    loop = asyncio.get_running_loop()
    pidfd: int | None = None
    try:
        pidfd = os.pidfd_open(proc.pid)
        loop.add_reader(pidfd, out.stop.set)
    except ProcessLookupError:  # already gone
        out.stop.set()
    try:
        try:
            async with asyncio.timeout(limits.timeout_s):
                await out.stop.wait()
        except TimeoutError:
            return False
        if out.stdout_too_large:
            return True  # the caller kills the group; reading on would only fill memory
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(DRAIN_AFTER_EXIT_S):
                await asyncio.gather(*tasks)
        return True
    finally:
        if pidfd is not None:
            loop.remove_reader(pidfd)
            os.close(pidfd)
        for task in tasks:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task


async def _read_capped(stream: asyncio.StreamReader, out: _Output, limit: int) -> None:
    while chunk := await stream.read(_READ_CHUNK):
        if len(out.stdout) + len(chunk) > limit:
            out.stdout_too_large = True
            out.stop.set()
            return
        out.stdout.extend(chunk)


async def _drain(stream: asyncio.StreamReader, keep: bytearray, limit: int) -> None:
    while chunk := await stream.read(_READ_CHUNK):
        room = limit - len(keep)
        if room > 0:
            keep.extend(chunk[:room])


async def _reap(proc: asyncio.subprocess.Process) -> None:
    """Kill the reviewer's process group and collect its exit status.

    ``Process.wait()`` returns only once both pipes are closed, and a pipe whose reader
    stopped early (too much output, a timeout) is paused with data in it and never sees its
    end: so what is left is read and dropped first (little: the writers are dead). A pipe
    still held open by something that escaped the group is closed by force.
    """
    _kill_group(proc)
    try:
        async with asyncio.timeout(REAP_TIMEOUT_S):
            await asyncio.gather(*(_discard(s) for s in (proc.stdout, proc.stderr) if s))
            await proc.wait()
    except TimeoutError:
        transport = getattr(proc, "_transport", None)  # no public way to close the pipes
        if transport is not None:
            transport.close()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(REAP_TIMEOUT_S):
                await proc.wait()


async def _discard(stream: asyncio.StreamReader) -> None:
    while await stream.read(_READ_CHUNK):
        pass


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    # The reviewer leads its own process group (start_new_session), so its pid names the
    # group; killing the group also ends anything it left running in the background.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


async def run_external_reviewers(
    commands: Sequence[str | ReviewerRule],
    *,
    run: RunFolder,
    sessions: SessionManager,
    run_session_id: str,
    tools_socket: Path | None = None,
    parent_env: Mapping[str, str] | None = None,
    variables: Mapping[str, str] | None = None,
    db_access: DBAccess | None = None,
    limits: ReviewerLimits = ReviewerLimits(),
    sandbox: Sandbox | None = None,
    paths: WorkflowPaths | None = None,
) -> ReviewersOutcome:
    """Run every reviewer of a run, one after another, each as a child session of the run.

    Each runs in ``sandbox`` (by default: required, probed once per process), which also
    hands it its own secrets; one the sandbox refuses does not run and is an error result.
    ``paths`` is the workflow folder of ``run`` (by default the one that holds it).
    ``tools_socket`` is the run's own tools endpoint on the host (see :data:`ToolsEndpoint`):
    each reviewer gets it, as its sandbox shows it, in ``REVIEWBOT_TOOLS_SOCKET``.

    Each reviewer gets a token that lives a little longer than its timeout and is revoked
    (its session ended) as soon as it has finished. ``db_access`` lowers the steps' access
    below the run's; it can never raise it. The outcome's findings are those printed by
    the reviewers plus those recorded on the run with ``record_finding``.
    """
    parent = os.environ if parent_env is None else parent_env
    sandbox = sandbox or Sandbox(probe("on"))
    paths = paths or WorkflowPaths(run.path.parent.parent)
    results: list[ReviewerResult] = []
    for index, entry in enumerate(commands, start=1):
        prepared = sandbox.prepare(entry, run=run, paths=paths, tools_socket=tools_socket)
        if isinstance(prepared, PrepareFailed):
            error = ReviewerError(ReviewerErrorKind(prepared.code), prepared.detail)
            results.append(ReviewerResult(command_of(entry), None, error=error))
            continue
        command = prepared.command
        child = sessions.open_child(run_session_id, f"reviewer-{index}", db_access=db_access)
        try:
            token = sessions.issue_token(child.id, ttl_s=limits.timeout_s + 60.0)
            env = reviewer_environment(
                parent,
                trigger_file=run.delivery_file,
                run_folder=run.path,
                db_access=child.db_access,
                tools_socket=prepared.tools_socket,
                session_token=token,
                variables=variables,
            )
            env.update(prepared.env)  # this reviewer's own secrets, never the next one's
            result = await run_reviewer(
                command,
                cwd=run.path,
                env=env,
                limits=limits,
                session_id=child.id,
                launch=prepared.launch,
            )
        finally:
            sessions.end(child.id)
            prepared.cleanup()
        results.append(result)
    printed = [f for r in results for f in r.findings]
    recorded = sessions.findings(run_session_id)
    kept, dropped = bound_findings(
        printed + recorded,
        count=limits.max_run_findings,
        total_bytes=limits.max_run_findings_bytes,
    )
    dropped += sum(r.dropped_findings for r in results)
    if dropped:
        log.warning("external reviewers: %d findings over the limits were dropped", dropped)
    return ReviewersOutcome(tuple(results), kept, dropped)


async def review_in_run(
    commands: Sequence[str | ReviewerRule],
    *,
    paths: WorkflowPaths,
    sessions: SessionManager,
    run_id: str,
    delivery: Mapping[str, Any],
    db_access: DBAccess,
    endpoint: ToolsEndpoint | None = None,
    variables: Mapping[str, str] | None = None,
    step_access: DBAccess | None = None,
    limits: ReviewerLimits = ReviewerLimits(),
    sandbox: Sandbox | None = None,
    query_limits: QueryLimits = DEFAULT_LIMITS,
) -> ReviewersOutcome:
    """The whole external review of one run, for the pipeline to call.

    Starts the run (its folder with ``delivery.json``, its session with the standard
    tools bound to ``db_access``, and its tools socket from ``endpoint``), runs every
    reviewer as a step of it, then ends the run: its socket, its registry, its steps and
    their tokens are gone when this returns. No commands: no run, an empty outcome. A run
    id that is already live, or a socket that cannot be opened, is reported as an error
    result, not raised.
    """
    if not commands:
        return ReviewersOutcome((), ())
    run = start_run(paths, run_id, delivery)
    try:
        session = sessions.open_run(
            run_id, db_access=db_access, tools=run_tools(paths, sessions, query_limits)
        )
    except SessionExists as exc:
        return _none_ran(commands, str(exc))
    try:
        async with contextlib.AsyncExitStack() as stack:
            socket = None
            if endpoint is not None:
                try:
                    socket = await stack.enter_async_context(endpoint(run_id))
                except OSError as exc:
                    return _none_ran(commands, f"the run's tools socket cannot listen: {exc}")
            return await run_external_reviewers(
                commands,
                run=run,
                sessions=sessions,
                run_session_id=session.id,
                tools_socket=socket,
                variables=variables,
                db_access=step_access,
                limits=limits,
                sandbox=sandbox,
                paths=paths,
            )
    finally:
        sessions.end(session.id)


def _none_ran(commands: Sequence[str | ReviewerRule], detail: str) -> ReviewersOutcome:
    """The run could not start: every reviewer is a ``spawn_failed`` result saying why."""
    error = ReviewerError(ReviewerErrorKind.SPAWN_FAILED, detail)
    failed = tuple(ReviewerResult(command_of(c), None, error=error) for c in commands)
    return ReviewersOutcome(failed, ())


async def review_pull(
    commands: Sequence[str | ReviewerRule],
    *,
    settings: Settings,
    sessions: SessionManager,
    pull: PullRequestSnapshot,
    delivery_id: str,
    source: str,
    endpoint: ToolsEndpoint | None = None,
    event: str | None = None,
    action: str | None = None,
    payload: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
    limits: ReviewerLimits = ReviewerLimits(),
    sandbox: Sandbox | None = None,
) -> ReviewersOutcome:
    """:func:`review_in_run` for one pull-request head, everything derived from it.

    The run id comes from the delivery and the head (:func:`run_id_for`), ``delivery.json``
    is the delivery envelope (:func:`delivery_document`), the reviewers get ``VAR_FORGE``,
    ``VAR_OWNER``, ``VAR_REPO``, ``VAR_NUMBER`` and ``VAR_HEAD_SHA``, and the run's DB access
    is what ``REVIEWBOT_REVIEWER_DB_ACCESS`` grants (none when unset), never more than the
    server's own.
    """
    delivery = delivery_document(
        delivery_id=delivery_id,
        source=source,
        forge=pull.forge,
        owner=pull.owner,
        name=pull.name,
        number=pull.number,
        head_sha=pull.head_sha,
        event=event,
        action=action,
        payload=payload,
        headers=headers,
    )
    run_id = run_id_for(
        forge=pull.forge,
        owner=pull.owner,
        name=pull.name,
        number=pull.number,
        head_sha=pull.head_sha,
        delivery_id=delivery_id,
    )
    return await review_in_run(
        commands,
        paths=WorkflowPaths.from_settings(settings),
        sessions=sessions,
        run_id=run_id,
        delivery=delivery,
        db_access=session_access(settings.reviewer_db_access, settings.db_access),
        query_limits=QueryLimits(timeout_s=settings.query_timeout_s),
        endpoint=endpoint,
        variables=pull_variables(
            forge=pull.forge,
            owner=pull.owner,
            name=pull.name,
            number=pull.number,
            head_sha=pull.head_sha,
        ),
        limits=limits,
        sandbox=sandbox,
    )
