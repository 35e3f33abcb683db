import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchgate.errors import ConfigError, RunFailedError
from benchgate.measure.source import (
    checkout,
    resolve_local_ref,
    use_source,
    validate_branch,
    validate_commit,
    validate_repository,
)

SHA1 = "0123456789abcdef0123456789abcdef01234567"


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("$(touch x)", id="command-substitution"),
        pytest.param(";rm -rf .", id="semicolon"),
        pytest.param("main~1", id="ref-expression"),
        pytest.param("main", id="branch"),
        pytest.param("a" * 41, id="41-hex"),
        pytest.param("a" * 39, id="39-hex"),
        pytest.param("0123456", id="abbreviated"),
        pytest.param("g" * 40, id="not-hex"),
        pytest.param(f"{SHA1}\n", id="newline"),
        pytest.param(f"-{SHA1[1:]}", id="option-like"),
        pytest.param("", id="empty"),
    ],
)
def test_validate_commit_rejects_anything_but_a_full_sha(value: str) -> None:
    with pytest.raises(ConfigError, match=r"^commit: got .* \(expected a full git commit SHA"):
        validate_commit(value)


@pytest.mark.parametrize("value", [SHA1, SHA1.upper(), "b" * 64])
def test_validate_commit_accepts_sha1_and_sha256_and_lowercases(value: str) -> None:
    assert validate_commit(value) == value.lower()


@pytest.mark.parametrize("value", ["main", "release/2.1", "feature_x-1"])
def test_validate_branch_accepts_branch_names(value: str) -> None:
    assert validate_branch(value) == value


@pytest.mark.parametrize(
    "value",
    [
        *("-main", "a..b", "a b", "x;y", "$(id)", "main~1", "x.lock", ""),
        *("a/.b", "a//b", "a.lock/b", "HEAD", "a/"),  # git check-ref-format --branch refuses these too
    ],
)
def test_validate_branch_rejects_unsafe_names(value: str) -> None:
    with pytest.raises(ConfigError, match="branch: got"):
        validate_branch(value)


@pytest.mark.parametrize(
    "value",
    [
        "https://github.com/o/r.git",
        "ssh://git@host/o/r.git",
        "git@github.com:o/r.git",
        "file:///srv/r",
        "https://x-access-token@github.com/o/r.git",  # a user name alone; with a password: refused
        "ssh://git@host:2222/o/r.git",
    ],
)
def test_validate_repository_accepts_git_urls(value: str) -> None:
    assert validate_repository(value) == value


@pytest.mark.parametrize(
    "value",
    [
        "--upload-pack=touch x",
        "/srv/repo",
        "https://h/r; rm -rf .",
        "",
        "ext::sh",
        "ssh://-oProxyCommand=touch%20x/r",  # ssh would read the host as an option
        "git@-oProxyCommand=x:r",
        "https:///r",
    ],
)
def test_validate_repository_rejects_other_strings(value: str) -> None:
    with pytest.raises(ConfigError, match="repository: got"):
        validate_repository(value)


def _repo_with_two_commits(root: Path) -> tuple[Path, str, str]:
    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout.strip()

    root.mkdir()
    git("init", "-q")
    (root / "version.txt").write_text("one\n")
    git("add", ".")
    git("commit", "-qm", "one")
    first = git("rev-parse", "HEAD")
    (root / "version.txt").write_text("two\n")
    git("commit", "-qam", "two")
    return root, first, git("rev-parse", "HEAD")


def test_checkout_fetches_exactly_the_requested_commit(tmp_path: Path) -> None:
    repo, first, _ = _repo_with_two_commits(tmp_path / "repo")
    dest = checkout(f"file://{repo}", first, tmp_path / "work")
    assert (dest / "version.txt").read_text() == "one\n"
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=dest, capture_output=True, text=True, check=True)
    assert head.stdout.strip() == first


def test_checkout_of_a_commit_the_repository_lacks_fails_clearly(tmp_path: Path) -> None:
    repo, _, _ = _repo_with_two_commits(tmp_path / "repo")
    with pytest.raises(RunFailedError, match="source: git fetch"):
        checkout(f"file://{repo}", "f" * 40, tmp_path / "work")


def test_use_source_puts_the_checkout_first_on_the_import_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, _, second = _repo_with_two_commits(tmp_path / "repo")
    # sys.path, PYTHONSAFEPATH and BENCHGATE_WORKLOAD_ROOT are restored after by the conftest's
    # _no_checkout, as after every test.
    monkeypatch.setenv("PYTHONPATH", "/already/there")
    root = use_source(f"file://{repo}", second, tmp_path / "ws")
    assert root is not None and sys.path[0] == str(root)
    assert os.environ["PYTHONPATH"].split(os.pathsep) == [str(root), "/already/there"]
    # Children started with `python -m` do not put their working directory ahead of the checkout.
    assert os.environ["PYTHONSAFEPATH"] == "1"
    # ... and load only the checkout's own workloads, or benchgate's (workloads/origin.py).
    assert os.environ["BENCHGATE_WORKLOAD_ROOT"] == str(root)
    assert use_source("", "", tmp_path / "unused") is None


def test_a_long_value_is_shortened_in_the_message() -> None:
    with pytest.raises(ConfigError) as info:
        validate_commit("z" * 100_000)
    message = str(info.value)
    assert message.startswith("commit: got 'zzz") and "(100000 characters)" in message
    assert len(message) < 400


def test_resolve_local_ref_refuses_a_nul_before_running_git(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^--base: got 'main\\x00' \(expected a git ref"):
        resolve_local_ref("main\x00", tmp_path)
