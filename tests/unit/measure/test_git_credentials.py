"""Private repositories: the environment benchgate gives git from a mounted Secret (kit/git_auth.py).

A clone over ssh needs an sshd, out of reach here: what is checked is the ssh command git is given (the
Secret's key, its known_hosts, strict host checking) and, for https, a real round trip through git's own
`git credential fill` with the helper benchgate configures. No secret is in the environment or a message.
"""

from __future__ import annotations

import os
import shlex
import stat
import subprocess
from pathlib import Path

import pytest

from benchgate.errors import ConfigError, RunFailedError
from benchgate.kit.git_auth import SECRET_DIR_VARIABLE, git_env, scrubbed
from benchgate.measure.source import checkout, validate_repository

TOKEN = "ghp_s3cr3tT0kenValue0123456789"
KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----"


def secret(tmp_path: Path, **files: str) -> dict[str, str]:
    """A Secret volume as the kubelet mounts it (files readable by all), and an environment naming it."""
    where = tmp_path / "git-secret"
    where.mkdir()
    for name, text in files.items():
        path = where / ("ssh-privatekey" if name == "ssh_privatekey" else name)  # the Secret's key names
        path.write_text(text)
        path.chmod(0o644)
    return {"PATH": os.environ["PATH"], "HOME": str(tmp_path), SECRET_DIR_VARIABLE: str(where)}


def test_without_a_secret_git_only_loses_its_prompt(tmp_path: Path) -> None:
    env = git_env({"PATH": "/bin", SECRET_DIR_VARIABLE: str(tmp_path / "absent")})
    assert env["GIT_TERMINAL_PROMPT"] == "0"
    assert "GIT_SSH_COMMAND" not in env and "GIT_CONFIG_COUNT" not in env


def test_an_ssh_key_is_used_alone_against_the_secrets_known_hosts_only(tmp_path: Path) -> None:
    environ = secret(tmp_path, ssh_privatekey=KEY, known_hosts="github.com ssh-ed25519 AAAAC3Nza\n")
    env = git_env(environ)
    words = shlex.split(env["GIT_SSH_COMMAND"])
    assert words[0] == "ssh"
    key = Path(words[words.index("-i") + 1])
    options = [w for w in words[1:] if w not in ("-o", "-i", str(key))]
    hosts = Path(environ[SECRET_DIR_VARIABLE]) / "known_hosts"
    assert options == [
        "IdentitiesOnly=yes",
        f"UserKnownHostsFile={hosts}",
        "StrictHostKeyChecking=yes",  # an unknown host is refused, never trusted on first use
        "BatchMode=yes",
    ]
    # ssh refuses a key others may read; the Secret's file is 0644, the copy git is given is not.
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert key.read_text() == KEY + "\n"
    assert KEY not in "".join(env.values())  # the key itself is in no variable
    assert git_env(environ)["GIT_SSH_COMMAND"] == env["GIT_SSH_COMMAND"]  # one copy, not one per call


def test_an_ssh_key_without_known_hosts_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"git secret: .* has ssh-privatekey but no known_hosts"):
        git_env(secret(tmp_path, ssh_privatekey=KEY))


def git_credential_fill(env: dict[str, str], cwd: Path) -> dict[str, str]:
    done = subprocess.run(
        ["git", "credential", "fill"],
        input="protocol=https\nhost=github.com\npath=org/private.git\n\n",
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=30,
        check=True,
    )
    return dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)


def test_an_https_token_reaches_git_through_its_credential_helper(tmp_path: Path) -> None:
    environ = secret(tmp_path, username="ci-bot", password=TOKEN + "\n")
    env = git_env(environ)
    answer = git_credential_fill(env, tmp_path)
    assert (answer["username"], answer["password"]) == ("ci-bot", TOKEN)
    assert TOKEN not in "".join(env.values())  # read from the file when git asks, in no variable


def test_a_token_without_a_user_name_gets_the_default_one(tmp_path: Path) -> None:
    env = git_env(secret(tmp_path, password=TOKEN))
    answer = git_credential_fill(env, tmp_path)
    assert (answer["username"], answer["password"]) == ("x-access-token", TOKEN)


def test_a_token_in_a_repository_url_is_refused_and_not_shown() -> None:
    url = f"https://ci-bot:{TOKEN}@github.com/org/private.git"
    with pytest.raises(ConfigError) as raised:
        validate_repository(url)
    assert TOKEN not in str(raised.value) and "ci-bot:***@github.com" in str(raised.value)


def test_a_token_in_gits_own_message_is_scrubbed() -> None:
    said = f"fatal: unable to access 'https://x:{TOKEN}@github.com/org/r.git/': 403\nssh://git@host/r ok"
    assert (
        scrubbed(said)
        == "fatal: unable to access 'https://x:***@github.com/org/r.git/': 403\nssh://git@host/r ok"
    )


def test_a_failed_fetch_says_so_without_the_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkout runs git with the Secret's environment; a refused fetch is a RunFailedError."""
    environ = secret(tmp_path, password=TOKEN)
    monkeypatch.setenv(SECRET_DIR_VARIABLE, environ[SECRET_DIR_VARIABLE])
    missing = (tmp_path / "no-such-repository").as_uri()
    with pytest.raises(RunFailedError) as raised:
        checkout(missing, "0" * 40, tmp_path / "checkout")
    assert "source: git fetch" in str(raised.value) and TOKEN not in str(raised.value)
