"""Checkouts of the commits a bisect compares: detached git worktrees under its out dir, and what it asks
git about a commit (subject, author, first parent).

`git worktree add --detach` checks a commit out into a directory of its own while sharing the user's
object store: nothing is cloned or fetched, and the user's working tree, index and HEAD never change
(only the repository's list of worktrees grows, and shrinks again). Every checkout is removed when the
bisect ends, however it ends: `Worktrees` is a context manager whose exit runs on an error and on
Ctrl-C too, removing each worktree (`git worktree remove --force`: the benchmark leaves __pycache__
behind) and then `git worktree prune`, which also forgets worktrees a killed bisect left registered.

git is only ever called with an argument list, with full SHAs.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from benchgate.errors import RunFailedError
from benchgate.measure.source import import_paths
from benchgate.ranges.commits import run_git


def git(repo: Path, *args: str) -> str:
    """Run git in `repo`; its stdout, or a RunFailedError naming the command and git's message."""
    done = run_git(list(args), repo, RunFailedError)
    if done.returncode != 0:
        raise RunFailedError(f"git {' '.join(args)} in {repo} failed: {done.stderr.strip()[:300]}")
    return done.stdout


@dataclass(frozen=True)
class CommitInfo:
    """A commit as the bisect reports it."""

    sha: str
    subject: str
    author: str  # "Name <email>"

    def to_dict(self) -> dict[str, str]:
        return {"sha": self.sha, "subject": self.subject, "author": self.author}


def commit_info(repo: Path, sha: str) -> CommitInfo:
    # %x1f (unit separator) cannot occur in a one-line subject or a name.
    text = git(repo, "log", "-1", "--no-color", "--format=%H%x1f%s%x1f%an <%ae>", sha, "--")
    full, subject, author = text.rstrip("\n").split("\x1f")
    return CommitInfo(full, subject, author)


def first_parent(repo: Path, sha: str) -> str:
    """The commit `sha` was made on (its first parent): what the culprit's own change is measured against."""
    return git(repo, "rev-parse", "--verify", "--end-of-options", f"{sha}^1").strip()


def repository_root(cwd: Path) -> Path:
    return Path(git(cwd, "rev-parse", "--show-toplevel").strip()).resolve()


def holds_module(root: Path, module: str) -> bool:
    """Whether a checkout holds the top-level package or module of `module` (dotted) where the workers
    import from (its root, or src/): if not, both sides of an A/B import the same installed code."""
    top = module.split(".")[0]
    return any((path / top).is_dir() or (path / f"{top}.py").is_file() for path in import_paths(root))


class Worktrees:
    """Detached worktrees of one repository under `root`, one per commit, all removed on exit."""

    def __init__(self, repo: Path, root: Path) -> None:
        self.repo = repo
        self.root = root
        self.paths: dict[str, Path] = {}

    def __enter__(self) -> Worktrees:
        # A bisect killed outright (kill -9) left its worktrees registered; their directories were
        # cleared with its out dir, so pruning forgets them before any new one is added.
        git(self.repo, "worktree", "prune")
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        try:
            self.remove_all()
        except RunFailedError as cleanup:
            if error is None:
                raise
            # The error that ended the bisect stays the one reported; the cleanup's is said beside it.
            error.add_note(f"and removing the worktrees failed: {cleanup}")

    def checkout(self, sha: str) -> Path:
        """The directory holding `sha`, checked out on first use."""
        if sha not in self.paths:
            path = self.root / sha[:12]
            self.root.mkdir(parents=True, exist_ok=True)
            git(self.repo, "worktree", "add", "--detach", "--quiet", str(path), sha)
            self.paths[sha] = path
        return self.paths[sha]

    def import_paths(self, sha: str) -> tuple[Path, ...]:
        """Where the workers import the code of `sha` from (its checkout, and src/ for src layouts)."""
        return tuple(import_paths(self.checkout(sha)))

    def remove_all(self) -> None:
        """Remove every worktree this object added, then prune; a worktree git will not remove is
        deleted by hand (benchgate made it) and pruned all the same."""
        for path in self.paths.values():
            try:
                git(self.repo, "worktree", "remove", "--force", str(path))
            except RunFailedError:
                shutil.rmtree(path, ignore_errors=True)
        self.paths.clear()
        git(self.repo, "worktree", "prune")
        if self.root.is_dir() and not any(self.root.iterdir()):
            self.root.rmdir()
