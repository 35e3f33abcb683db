"""Fuzzing the commit, branch and repository validators (measure/source.py) and `--base REF` resolution.

Any text (control characters, unicode, leading dashes, `ext::`, `file://`, `--upload-pack=`, whitespace,
very long) is either accepted as a value that keeps the documented invariant, or refused with a
ConfigError naming the field and the value; never any other exception. Accepted branch names are
checked against the real `git check-ref-format --branch`, accepted refs against the real repository.

Hypothesis runs derandomized: the examples are a fixed function of each test, so CI checks the same
inputs on every run and a failure reproduces on any machine instead of flaking an unrelated change.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchgate.errors import EXIT_BAD_INPUT, ConfigError
from benchgate.kit.credentials import has_credentials, redacted
from benchgate.measure.source import (
    MAX_BRANCH_LENGTH,
    resolve_local_ref,
    validate_branch,
    validate_commit,
    validate_repository,
)

FUZZ = settings(max_examples=300, deadline=None, derandomize=True)
# Pieces that matter to git, a shell or ssh: joined at random they reach the edges of each rule.
FRAGMENTS = [
    *("ext::", "ext::sh -c touch% x", "file://", "file:///", "https://", "ssh://", "git@", "http://"),
    *("--upload-pack=", "--", "-", "-oProxyCommand=", "-c", "--end-of-options"),
    *("/", "//", ".", "..", ".lock", "@", "@{", ":", "::", "~", "^", "?", "*", "[", "\\", "%", "=", "+"),
    *(" ", "\t", "\n", "\r", "\x00", "\x1b", "\x7f", "\u00a0", "\u200b", "\ud800"),
    *("é", "İ", "\u212a", "\uff46"),  # İ and the Kelvin sign lower-case to ASCII; a full-width f
    *("HEAD", "main", "release", "x", "host", "github.com", "o/r.git", ":22", "0", "9", "a", "f", "A", "F"),
    *("0123456789abcdef" * 2, "0123456789ABCDEF" * 3, "$(id)", ";", "'", '"', "`"),
]
SHA1 = "0123456789abcdef0123456789abcdef01234567"
texts = (
    st.text()
    | st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=3), max_size=12).map("".join)
    | st.text(alphabet="0123456789abcdefABCDEFg-\n ", min_size=38, max_size=66)  # near-SHAs
    | st.text(min_size=190, max_size=5000)  # very long
    | st.sampled_from(["", SHA1, SHA1.upper(), "b" * 64, "main", "release/2.1", "-" + SHA1[1:]])
)


def assert_refused(error: ConfigError, field: str, value: str) -> None:
    """A refusal names the field first, then the value (as repr, shortened past 120 characters, and with
    any password or token in a URL shown as ***)."""
    message = str(error)
    assert error.exit_code == EXIT_BAD_INPUT
    assert message.startswith(f"{field}: "), message
    assert repr(redacted(value))[:100] in message, message
    if has_credentials(value):
        assert value not in message, message
    assert "\n" not in message and len(message) < 600, message


# ---------------------------------------------------------------- commit


@FUZZ
@given(value=texts)
def test_a_commit_is_a_full_lowercase_sha_or_a_named_config_error(value: str) -> None:
    try:
        commit = validate_commit(value, "--commit")
    except ConfigError as e:
        assert_refused(e, "--commit", value)
        return
    assert re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", commit), commit
    assert value.isascii() and commit == value.lower()


# ---------------------------------------------------------------- branch


def git_accepts_branch(name: str, cwd: Path) -> bool:
    done = subprocess.run(
        ["git", "check-ref-format", "--branch", name], cwd=cwd, capture_output=True, text=True, check=False
    )
    return done.returncode == 0 and done.stdout.strip() == name


@FUZZ
@given(value=texts | st.lists(st.sampled_from(["a", "b", ".", "-", "_", "/", ".lock", "HEAD"])).map("".join))
def test_a_branch_is_one_git_accepts_or_a_named_config_error(
    value: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    try:
        branch = validate_branch(value)
    except ConfigError as e:
        assert_refused(e, "branch", value)
        return
    assert branch == value and 0 < len(value) <= MAX_BRANCH_LENGTH
    assert re.fullmatch(r"[A-Za-z0-9._/-]+", value) and not value.startswith("-")
    # Outside any repository: check-ref-format then judges the name alone.
    assert git_accepts_branch(value, tmp_path_factory.getbasetemp()), f"git refuses the branch {value!r}"


@pytest.mark.parametrize(
    "value", ["a/.b", "a//b", "a.lock/b", "a/./b", "HEAD", "/a", "a/", "x.", "a..b", "-x", "a b", "a\nb"]
)
def test_branches_git_refuses_are_refused(value: str, tmp_path: Path) -> None:
    assert not git_accepts_branch(value, tmp_path)
    with pytest.raises(ConfigError) as info:
        validate_branch(value)
    assert_refused(info.value, "branch", value)


# ---------------------------------------------------------------- repository


def host_and_user(url: str) -> tuple[str, str]:
    """The host git connects to and the user it connects as, for each accepted form."""
    if url.startswith("git@"):
        return url[len("git@") :].partition(":")[0], "git"
    parts = urlsplit(url)
    return parts.hostname or "", parts.username or ""


def url_part(*typical: str) -> st.SearchStrategy[str]:
    return st.sampled_from(typical) | st.lists(st.sampled_from(FRAGMENTS), max_size=3).map("".join)


# URLs built the way git reads them, each part either typical or made of fragments: random text alone
# rarely puts a '-' exactly where ssh would read an option.
urls = st.builds(
    lambda scheme, user, host, port, path: (
        f"git@{host}:{path}" if scheme == "git@" else f"{scheme}{user}{host}{port}/{path}"
    ),
    url_part("https://", "ssh://", "file://", "git@", "ext::", "http://", ""),
    url_part("", "git@", "u:token@", "-oProxyCommand=x@", "-u@"),
    url_part("github.com", "h", "-oProxyCommand=touch x", "-x", "", "[::1]", "localhost"),
    url_part("", ":22", ":-1", ":port"),
    url_part("o/r.git", "", "--upload-pack=x", "-x", "srv/r"),
)


@FUZZ
@given(value=texts | urls)
def test_a_repository_is_an_allowed_url_without_option_injection_or_a_named_config_error(value: str) -> None:
    try:
        repository = validate_repository(value, "--repository")
    except ConfigError as e:
        assert_refused(e, "--repository", value)
        return
    assert repository == value
    assert value.startswith(("https://", "ssh://", "file://", "git@")), value
    assert re.fullmatch(r"[A-Za-z0-9._~:/@%+=-]+", value), value  # no space, control, quote or shell syntax
    host, user = host_and_user(value)
    if not value.startswith("file://"):
        assert host and not host.startswith("-"), f"{value!r}: host {host!r}"
    assert not user.startswith("-"), f"{value!r}: user {user!r}"
    assert not has_credentials(value), value  # it would be recorded in KFP, MLflow and env.json


@pytest.mark.parametrize(
    "value",
    [
        "ssh://-oProxyCommand=x@host/r",  # the user, too, reaches ssh as the start of an argument
        "https://-x/r",
        "ext::sh -c touch% x",
        "file://",
        "git@host:",
        "https://host:port/r",
    ],
)
def test_repository_urls_that_inject_an_option_or_name_nothing_are_refused(value: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate_repository(value)
    assert_refused(info.value, "repository", value)


# ---------------------------------------------------------------- --base REF against a real repository


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("fuzz-ref") / "repo"
    root.mkdir()

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout.strip()

    git("init", "-q", "-b", "main")
    (root / "f").write_text("one\n")
    git("add", ".")
    git("commit", "-qm", "one")
    git("tag", "v1")
    return root, git("rev-parse", "HEAD")


# Each example runs git twice; 100 keep this test near a second.
@settings(max_examples=100, deadline=None, derandomize=True)
@given(
    ref=texts | st.sampled_from(["HEAD", "main", "v1", "HEAD~0", "main^{tree}", ":/one", "@{-1}", "HEAD@{0}"])
)
def test_a_base_ref_resolves_to_a_full_sha_or_a_named_config_error(
    repository: tuple[Path, str], ref: str
) -> None:
    root, head = repository
    try:
        sha, url = resolve_local_ref(ref, root)
    except ConfigError as e:
        assert_refused(e, "--base", ref)
        return
    assert sha == head  # the repository has one commit
    assert validate_repository(url) == url and url == root.resolve().as_uri()
