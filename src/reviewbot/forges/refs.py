"""Ref operations: an optional capability of a forge adapter.

A caller asks the adapter for them with ``forge.ref_ops()``. It returns a :class:`RefOps`
when the adapter can do all of them, and raises :class:`~reviewbot.forges.errors.Unsupported`
naming what is missing when it cannot (a Gitea adapter built without a folder for its git
clone, say). There is no partial answer: a caller that holds a ``RefOps`` may rely on every
operation below.

Branch names are plain (``main``, ``reviewbot/queue/main/1``), never ``refs/heads/...``.
Every move of an existing branch is a fast-forward or nothing: a branch whose current commit
is not an ancestor of the new one is left where it is and :class:`NotFastForward` is raised,
so two writers racing on one branch cannot lose each other's commits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Comparison:
    """Two commits compared: ``base`` against ``head``.

    ``base_is_ancestor``: ``head`` contains ``base`` (also when they are the same commit),
    so a branch at ``base`` may be fast-forwarded to ``head``. ``files``: the paths changed on
    ``head``'s side since the two diverged (both names of a renamed file); ``files_complete``
    is False when the forge cut the list short (GitHub lists at most 300), so a caller
    keying work on paths treats the change as touching everything.
    """

    base: str
    head: str
    base_is_ancestor: bool
    files: tuple[str, ...]
    files_complete: bool = True


@dataclass(frozen=True)
class MergeCommit:
    """The branch after a merge: ``sha`` is its new commit, or its unchanged one with
    ``created`` False when it already contained the merged commit. ``onto`` is the branch's
    commit the merge was made on (the merge commit's first parent; ``sha`` itself when
    nothing was created): a caller that knows where it left the branch sees whether anyone
    else moved it in between."""

    sha: str
    created: bool
    onto: str


class RefOps(Protocol):
    """Branch and commit operations on one forge; ``repo`` is ``OWNER/NAME``.

    Errors are those of :mod:`reviewbot.forges.errors`: ``NotFound`` for a missing branch or
    commit, ``PermissionDenied`` naming what the credentials lack, ``RefExists``,
    ``MergeConflict``, ``NotFastForward``; writes are never retried blindly.
    """

    async def create_branch(self, repo: str, branch: str, sha: str) -> None:
        """Create ``branch`` at commit ``sha``; ``RefExists`` when it exists already."""
        ...

    async def delete_branch(self, repo: str, branch: str) -> None: ...

    async def compare(self, repo: str, base: str, head: str) -> Comparison:
        """``base`` and ``head`` are commit SHAs or branch names."""
        ...

    async def merge_into(self, repo: str, branch: str, sha: str, message: str) -> MergeCommit:
        """Merge commit ``sha`` into ``branch`` with a merge commit, moving the branch to it
        (a fast-forward of the branch: the merge commit's first parent is its tip)."""
        ...

    async def fast_forward(self, repo: str, branch: str, sha: str) -> None:
        """Move ``branch`` to ``sha``, only when its current commit is an ancestor of
        ``sha``; else ``NotFastForward`` and the branch is left as it was."""
        ...

    async def record_landed(self, repo: str, number: int, sha: str) -> None:
        """Pull request ``number`` landed: its base branch moved to ``sha``, which contains
        its head. Make the forge show it merged by ``sha``: GitHub does so by itself when
        the commits reach the base (nothing is sent); Gitea/Forgejo is told with the merge
        API's ``Do: manually-merged`` and ``MergeCommitID`` (409 when ``sha`` is not on the
        base branch: ``NotMergeable``)."""
        ...
