"""A commit range of the local repository as git means `A..B`: the commits reachable from B and not
from A, along first parents, oldest first.

First parents, because that is the order history reads runs in (`measure/source.branch_commits`) and
the line a branch's gate runs were made on: a merge counts as one commit, the one that brought its
changes in, and the commits of the merged branch are not walked.

The range arrives from a user, so it is checked before anything runs and every mistake is a
ConfigError (exit 2) naming the value: `A..B` syntax (two dots, both ends), ends that name commits
(`resolve_local_ref`), A an ancestor of B (a range backwards in history would silently be empty or
surprising), and at least one commit in it. git is only ever called with an argument list, and with
full SHAs once the ends are resolved.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from subprocess import CompletedProcess

from benchgate.errors import BenchgateError, ConfigError
from benchgate.measure.source import resolve_local_ref, validate_branch

GIT_TIMEOUT_S = 120  # a worktree checkout of a large repository too (ranges/worktrees.py)
RANGE_FIELD = "RANGE"


@dataclass(frozen=True)
class RangeCommit:
    sha: str
    subject: str


@dataclass(frozen=True)
class CommitRange:
    """A resolved `A..B`: its ends as full SHAs, its commits oldest first, where they live."""

    text: str
    start: str
    end: str
    commits: list[RangeCommit]
    repository: str  # the file:// URL of the repository, as a pipeline task checks a commit out of it
    branch: str  # B's branch where B names a local branch (or HEAD on one), else ""


def parse_range(text: str) -> tuple[str, str]:
    """The two ends of `A..B`, unresolved; a ConfigError naming `text` if it is not of that shape."""
    if "..." in text:
        raise ConfigError(
            f"{RANGE_FIELD}: got {text!r} (A...B is git's symmetric difference; expected A..B, the commits "
            "reachable from B and not from A)"
        )
    start, sep, end = text.partition("..")
    if not sep or not start or not end or ".." in end:
        raise ConfigError(f"{RANGE_FIELD}: got {text!r} (expected A..B with both ends, e.g. v1.4..main)")
    return start, end


def run_git(args: list[str], cwd: Path, failure: type[BenchgateError] = ConfigError) -> CompletedProcess[str]:
    """git in `cwd`, its result whatever its exit code; `failure` (naming the command) where git cannot
    be run at all. The range's checks call it with ConfigError (exit 2), the worktrees with RunFailedError."""
    try:
        return subprocess.run(
            ["git", "-c", "log.showSignature=false", *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            errors="replace",  # a subject in another encoding is shown, not a crash
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        prefix = f"{RANGE_FIELD}: cannot run" if failure is ConfigError else "cannot run"
        raise failure(f"{prefix} git {args[0]} in {cwd} ({e})") from None


def is_ancestor(older: str, newer: str, cwd: Path) -> bool:
    done = run_git(["merge-base", "--is-ancestor", older, newer], cwd)
    if done.returncode not in (0, 1):
        raise ConfigError(f"{RANGE_FIELD}: git merge-base failed in {cwd}: {done.stderr.strip()[:300]}")
    return done.returncode == 0


def first_parent_commits(start: str, end: str, cwd: Path) -> list[RangeCommit]:
    """The commits of `start..end` (full SHAs) along first parents, oldest first, with their subjects."""
    done = run_git(
        ["log", "--first-parent", "--reverse", "--no-color", "--format=%H %s", f"{start}..{end}"], cwd
    )
    if done.returncode != 0:
        raise ConfigError(f"{RANGE_FIELD}: git log failed in {cwd}: {done.stderr.strip()[:300]}")
    commits = []
    for line in done.stdout.splitlines():
        sha, _, subject = line.partition(" ")
        commits.append(RangeCommit(sha, subject))
    return commits


def local_branch(ref: str, cwd: Path) -> str:
    """The local branch `ref` names (`main`, or `HEAD` while on main), else "" (a SHA, a tag, main~3)."""
    # `ref` resolved already (resolve_local_ref refuses one that starts with "-", an option); rev-parse
    # would echo an --end-of-options back.
    done = run_git(["rev-parse", "--symbolic-full-name", ref], cwd)
    name = done.stdout.strip().removeprefix("refs/heads/") if done.returncode == 0 else ""
    if not name or name.startswith("refs/"):
        return ""
    try:
        return validate_branch(name)
    except ConfigError:  # a branch name git allows and the pipeline does not: the runs go without one
        return ""


def resolve_range(text: str, cwd: Path) -> CommitRange:
    """`A..B` of the repository holding `cwd`, checked (see the module's docstring) and listed."""
    start_ref, end_ref = parse_range(text)
    start, repository = resolve_local_ref(start_ref, cwd, f"{RANGE_FIELD} {text!r}: A")
    end, _ = resolve_local_ref(end_ref, cwd, f"{RANGE_FIELD} {text!r}: B")
    if start == end:
        raise ConfigError(f"{RANGE_FIELD}: got {text!r}, whose ends are the same commit: it holds no commits")
    if not is_ancestor(start, end, cwd):
        raise ConfigError(
            f"{RANGE_FIELD}: got {text!r}, but A ({start[:12]}) is not an ancestor of B ({end[:12]}); "
            "a range goes forward in history, from an older A to a newer B"
        )
    commits = first_parent_commits(start, end, cwd)
    if not commits:
        raise ConfigError(f"{RANGE_FIELD}: got {text!r}, which holds no commits along B's first parents")
    return CommitRange(text, start, end, commits, repository, local_branch(end_ref, cwd))
