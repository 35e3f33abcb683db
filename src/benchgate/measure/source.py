"""The code under test: which commit of which repository a pipeline task benchmarks, and getting it.

On a cluster every task that imports the workload (bench, eval, trace, A/B) fetches exactly one
commit of the user's repository into its own workspace and puts it on the import path; the bench image
already holds benchgate, torch and the workload's dependencies. One shallow fetch per task keeps the
tasks independent (no artifact the size of a repository moves between pods) and pins every task to the
same bytes, because a full SHA names one tree.

Commit, branch and repository arrive from CI, the KFP UI or a custom resource, so they are validated
here before any command sees them, and git is only ever called with an argument list (never a shell
string), with `--` before positional values. A commit must be a full SHA: a ref such as `main~1` or
an abbreviated SHA would resolve to different code over time.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from benchgate.errors import ConfigError, RunFailedError
from benchgate.kit.credentials import GIT_INSTEAD, redacted, refuse_credentials
from benchgate.kit.git_auth import git_env, scrubbed
from benchgate.workloads.origin import ROOT_ENV

# SHA-1 repositories have 40 hex digits, SHA-256 ones 64; nothing else names a single commit.
_SHA = re.compile(r"(?:[0-9a-f]{40}|[0-9a-f]{64})")
# A branch is what `git check-ref-format --branch` accepts, within a conservative character set: '/'-separated
# components of letters, digits, '.', '_' and '-', none empty, none starting with '.' or ending in '.lock';
# no '..', no leading '-' (an option), no trailing '.', and not 'HEAD'.
_BRANCH_COMPONENT = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")
MAX_BRANCH_LENGTH = 200
# The URL schemes git may fetch from (never ext::, which runs a command). Host and user never start with
# '-': git hands "user@host" to ssh as one argument, and `-oProxyCommand=...` there would be an option.
_HOST = r"[A-Za-z0-9][A-Za-z0-9.-]*"
_USER = r"[A-Za-z0-9_][A-Za-z0-9._~%+=-]*"
_PATH = r"[A-Za-z0-9._~:/@%+=-]"
_URL = re.compile(
    rf"https://(?:{_USER}(?::[A-Za-z0-9._~%+=-]*)?@)?{_HOST}(?::[0-9]{{1,5}})?(?:/{_PATH}*)?"
    rf"|ssh://(?:{_USER}@)?{_HOST}(?::[0-9]{{1,5}})?(?:/{_PATH}*)?"
    rf"|git@{_HOST}:[A-Za-z0-9._~/@%+=]{_PATH}*"
    rf"|file://(?:{_HOST})?/{_PATH}*"
)
GIT_TIMEOUT_S = 300
# A fetch of a whole history (a large repository's, for a bisect) may take far longer than one commit's.
HISTORY_FETCH_TIMEOUT_S = 1800
_SHOWN = 120  # characters of an offending value quoted in a message: it is one line on a terminal


def _shown(value: str) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else f"{text[:_SHOWN]}... ({len(value)} characters)"


def validate_commit(value: str, field: str = "commit") -> str:
    """A full lowercase git SHA (40 or 64 hex digits); anything else is a ConfigError naming it."""
    commit = value.lower()
    if not _SHA.fullmatch(commit):
        raise ConfigError(
            f"{field}: got {_shown(value)} (expected a full git commit SHA: 40 hex digits, or 64 for SHA-256 "
            "repositories; refs and abbreviated SHAs are not accepted because they can move)"
        )
    return commit


def validate_branch(value: str, field: str = "branch") -> str:
    """A branch name git accepts (see _BRANCH_COMPONENT); anything else is a ConfigError naming it."""
    components = value.split("/")
    if (
        len(value) > MAX_BRANCH_LENGTH
        or value.startswith("-")
        or value.endswith(".")
        or ".." in value
        or value == "HEAD"
        or not all(_BRANCH_COMPONENT.fullmatch(c) and not c.endswith(".lock") for c in components)
    ):
        raise ConfigError(
            f"{field}: got {_shown(value)} (expected a branch name such as 'main' or 'release/2.1')"
        )
    return value


def validate_repository(value: str, field: str = "repository") -> str:
    """An https://, ssh://, file:// or git@host:path URL (see _URL); anything else is a ConfigError."""
    if not _URL.fullmatch(value):
        raise ConfigError(
            f"{field}: got {_shown(redacted(value))} (expected a git URL: https://, ssh://, file:// or "
            "git@host:path, with a host that does not start with '-')"
        )
    refuse_credentials(value, field, GIT_INSTEAD)
    return value


def _git(args: list[str], cwd: Path, timeout_s: float = GIT_TIMEOUT_S) -> None:
    try:
        done = subprocess.run(
            ["git", *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            env=git_env(),  # the git Secret's key or credential helper, and never a prompt
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RunFailedError(scrubbed(f"source: git {args[0]} failed: {e}")) from None
    if done.returncode != 0:
        raise RunFailedError(scrubbed(f"source: git {' '.join(args)} failed: {done.stderr.strip()}"))


def checkout(repository: str, commit: str, dest: Path, history: bool = False) -> Path:
    """Fetch exactly `commit` of `repository` into `dest` (shallow, detached) and return `dest`.
    `history`: with all of the commit's history (a bisect walks it), not shallow."""
    repository = validate_repository(repository)
    commit = validate_commit(commit)
    dest.mkdir(parents=True, exist_ok=True)
    _git(["init", "--quiet"], dest)
    # Fetching one SHA needs the server to allow it (GitHub, GitLab and git-daemon with
    # uploadpack.allowReachableSHA1InWant do); shallow, it avoids cloning the whole history.
    depth = [] if history else ["--depth=1"]
    timeout_s = HISTORY_FETCH_TIMEOUT_S if history else GIT_TIMEOUT_S
    _git(["fetch", "--quiet", *depth, "--", repository, commit], dest, timeout_s)
    _git(["checkout", "--quiet", "--detach", commit], dest)
    return dest


def resolve_local_ref(ref: str, cwd: Path, field: str = "--base") -> tuple[str, str]:
    """A ref of the local repository (branch, tag, `origin/main`, `HEAD~1`, a SHA) resolved once to its
    full SHA; returns (sha, file:// URL of the repository) so that a task can check that SHA out."""
    if not ref or ref.startswith("-") or "\x00" in ref:  # a NUL cannot be a command-line argument
        raise ConfigError(
            f"{field}: got {_shown(ref)} (expected a git ref of this repository, e.g. origin/main)"
        )
    try:
        top = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        done = subprocess.run(
            ["git", "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, ValueError, subprocess.TimeoutExpired) as e:  # ValueError: not encodable as an argument
        raise ConfigError(f"{field}: cannot run git to resolve {_shown(ref)} ({e})") from None
    if top.returncode != 0:
        raise ConfigError(f"{field}: got {_shown(ref)}, but {cwd} is not inside a git repository")
    if done.returncode != 0:
        raise ConfigError(
            f"{field}: got {_shown(ref)}, which names no commit of the repository at {top.stdout.strip()}"
        )
    return validate_commit(done.stdout.strip(), field), Path(top.stdout.strip()).resolve().as_uri()


def local_repository(cwd: Path) -> str:
    """The file:// URL of the git repository that holds `cwd`, or "" outside one (or without git)."""
    try:
        top = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], cwd=cwd, capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return Path(top.stdout.strip()).resolve().as_uri() if top.returncode == 0 else ""


def has_commit(repository: str, commit: str) -> bool:
    """Whether a file:// repository holds `commit` (a baseline recorded on another machine may name one
    it never saw); other repositories are asked when a task fetches from them."""
    if not repository.startswith("file://"):
        return True
    try:
        done = subprocess.run(
            ["git", "cat-file", "-e", f"{validate_commit(commit)}^{{commit}}"],
            cwd=Path(repository.removeprefix("file://")),
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired, ConfigError):
        return False
    return done.returncode == 0


def branch_commits(cwd: Path, limit: int = 10_000) -> list[str] | None:
    """The commits of the branch checked out in `cwd`, oldest first along first parents (the order a
    history is read in); None outside a git repository or where git fails."""
    try:
        done = subprocess.run(
            ["git", "rev-list", "--first-parent", f"--max-count={limit}", "HEAD"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.split()[::-1]


def remote_branch_head(repository: str, branch: str, timeout_s: float = 60.0) -> str:
    """The full SHA at the head of `branch` of `repository`, asked with `git ls-remote` (no clone)."""
    repository = validate_repository(repository)
    branch = validate_branch(branch)
    ref = f"refs/heads/{branch}"
    try:
        done = subprocess.run(
            ["git", "ls-remote", "--", repository, ref],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            # Never wait for a password prompt (a controller has no terminal); the git Secret if mounted.
            env=git_env(),
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RunFailedError(scrubbed(f"repository: git ls-remote {repository} failed: {e}")) from None
    if done.returncode != 0:
        failed = f"repository: git ls-remote {repository} failed: {done.stderr.strip()[:300]}"
        raise RunFailedError(scrubbed(failed))
    for line in done.stdout.splitlines():
        sha, _, name = line.partition("\t")
        if name == ref:
            return validate_commit(sha, "branch head")
    raise ConfigError(f"branch: got {branch!r}, which {repository} does not have")


def import_paths(root: Path) -> list[Path]:
    """The directories of a checkout that hold its packages: the root, and src/ for src layouts."""
    return [p for p in (root / "src", root) if p.is_dir()]


def use_source(repository: str, commit: str, workspace: Path) -> Path | None:
    """Check out the code under test (if a commit is given) and make it importable here and in children.

    Without a commit the task benchmarks the code already importable (the local, `make bench` case).
    """
    if not commit:
        return None
    root = checkout(repository, commit, workspace / "source")
    paths = [str(p) for p in import_paths(root)]
    sys.path[:0] = paths
    os.environ["PYTHONPATH"] = os.pathsep.join([*paths, *filter(None, [os.environ.get("PYTHONPATH")])])
    # A child started as `python -m` (torchrun's workers) puts its working directory first on its import
    # path, ahead of PYTHONPATH: run from inside the repository (a local `run --commit`, a backfill),
    # the working tree's modules would shadow the commit's, and the bench would time the wrong code.
    # PYTHONSAFEPATH (Python 3.11) leaves the working directory out; benchgate itself is installed.
    os.environ["PYTHONSAFEPATH"] = "1"
    confine_workloads(root)
    return root


def confine_workloads(root: Path) -> None:
    """Load workloads, here and in children, only from `root` (a checkout of the code under test) or
    benchgate's own: workloads/origin.py says why. An A/B side's bench narrows it to its own checkout."""
    os.environ[ROOT_ENV] = str(root)
