"""How each forge decides whether a commit's required checks pass (pure functions)."""

from __future__ import annotations

import fnmatch

from reviewbot.sim.state import SimCheckRun, SimProtection, SimRepo, SimRuleset, SimStatus

GOOD_CONCLUSIONS = ("success", "neutral", "skipped")


def latest_statuses(repo: SimRepo, sha: str) -> list[SimStatus]:
    """The newest status per context for ``sha``, newest first (how both forges combine)."""
    seen: dict[str, SimStatus] = {}
    for status in sorted(repo.statuses, key=lambda s: (s.updated_at, s.id), reverse=True):
        if status.sha == sha and status.context not in seen:
            seen[status.context] = status
    return list(seen.values())


def latest_check_runs(repo: SimRepo, sha: str) -> list[SimCheckRun]:
    seen: dict[tuple[str, int], SimCheckRun] = {}
    for run in sorted(repo.check_runs, key=lambda r: r.id, reverse=True):
        if run.sha == sha and (run.name, run.app_id) not in seen:
            seen[(run.name, run.app_id)] = run
    return sorted(seen.values(), key=lambda r: r.id)


def github_combined_state(statuses: list[SimStatus]) -> str:
    if any(s.state in ("error", "failure") for s in statuses):
        return "failure"
    if not statuses or any(s.state == "pending" for s in statuses):
        return "pending"
    return "success"


# Gitea's precedence when combining statuses (worst wins).
_GITEA_ORDER = ("error", "failure", "warning", "pending", "success", "skipped")


def gitea_combined_state(statuses: list[SimStatus]) -> str:
    if not statuses:
        return "pending"
    return min((s.state for s in statuses), key=_GITEA_ORDER.index)


def github_blocking_check(repo: SimRepo, protection: SimProtection, sha: str) -> str | None:
    """The message GitHub gives when a required check blocks a merge, or ``None``."""
    statuses = {s.context: s for s in latest_statuses(repo, sha)}
    runs = {r.name: r for r in latest_check_runs(repo, sha)}
    required = list(protection.contexts) + [c for c, _ in protection.checks]
    for context in dict.fromkeys(required):
        status = statuses.get(context)
        run = runs.get(context)
        if status is not None and status.state == "success":
            continue
        if run is not None and run.status == "completed" and run.conclusion in GOOD_CONCLUSIONS:
            continue
        failed = (status is not None and status.state in ("error", "failure")) or (
            run is not None and run.status == "completed"
        )
        if failed:
            return f'Required status check "{context}" is failing.'
        return f'Required status check "{context}" is expected.'
    return None


def gitea_checks_pass(repo: SimRepo, protection: SimProtection, sha: str) -> bool:
    """Gitea: every pattern must match at least one status, and every matched one succeed.

    Status checks enabled without patterns means every status: none at all is pending
    (services/pull/commit_status.go MergeRequiredContextsCommitStatus)."""
    if not protection.enable_status_check:
        return True
    statuses = latest_statuses(repo, sha)
    for pattern in protection.contexts or ["*"]:
        matched = [s for s in statuses if fnmatch.fnmatchcase(s.context, pattern)]
        if not matched or any(s.state not in ("success", "skipped") for s in matched):
            return False
    return True


def protection_for(repo: SimRepo, branch: str) -> SimProtection | None:
    """GitHub protections are per branch; Gitea rules may be globs (``release/*``)."""
    exact = repo.protections.get(branch)
    if exact is not None or repo.forge == "github":
        return exact
    for rule, protection in repo.protections.items():
        if fnmatch.fnmatchcase(branch, rule):
            return protection
    return None


def rulesets_for(repo: SimRepo, branch: str) -> list[SimRuleset]:
    """The active rulesets whose conditions include ``branch`` (GitHub's ref patterns)."""
    ref = f"refs/heads/{branch}"
    found = []
    for ruleset in repo.rulesets:
        if ruleset.enforcement != "active":
            continue
        for pattern in ruleset.include:
            if (
                pattern == "~ALL"
                or (pattern == "~DEFAULT_BRANCH" and branch == repo.default_branch)
                or fnmatch.fnmatchcase(ref, pattern)
            ):
                found.append(ruleset)
                break
    return found


def github_rules(repo: SimRepo, branch: str) -> SimProtection | None:
    """What GitHub enforces on a merge into ``branch``: classic protection and every active
    ruleset together (both apply), as one protection; ``None`` when neither exists."""
    protection = protection_for(repo, branch)
    rulesets = rulesets_for(repo, branch)
    if not rulesets:
        return protection
    merged = SimProtection(branch=branch)
    if protection is not None:
        merged.contexts = list(protection.contexts)
        merged.checks = list(protection.checks)
        merged.required_approvals = protection.required_approvals
    for ruleset in rulesets:
        merged.contexts += [c for c in ruleset.contexts if c not in merged.contexts]
        merged.required_approvals = max(merged.required_approvals, ruleset.required_approvals or 0)
    return merged
