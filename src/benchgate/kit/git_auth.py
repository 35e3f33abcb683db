"""Git's credentials for private repositories: from files of a mounted Secret, never in a URL, an
argument or a log (kit/credentials.py refuses them in URLs).

The Secret (docs/kubernetes.md, "Private repositories") is mounted at GIT_SECRET_DIR, or where
BENCHGATE_GIT_SECRET_DIR says, and holds either

- `ssh-privatekey` (the key of a `kubernetes.io/ssh-auth` Secret) and `known_hosts`: git runs ssh with
  that key only and checks the server against those hosts (StrictHostKeyChecking=yes; an unknown host
  is refused, never trusted on first use); or
- `password` (an https token; the key of a `kubernetes.io/basic-auth` Secret) and optionally `username`:
  git asks a credential helper that reads the files when it needs them, so the token is in no
  environment variable and no command line.

`git_env()` is the environment every git call of benchgate runs with; without the Secret it only turns
off git's password prompt (a pod has no terminal to answer it).
"""

from __future__ import annotations

import os
import re
import shlex
import tempfile
from pathlib import Path

from benchgate.errors import ConfigError
from benchgate.kit.credentials import redacted

GIT_SECRET_DIR = Path("/var/run/secrets/benchgate/git")
SECRET_DIR_VARIABLE = "BENCHGATE_GIT_SECRET_DIR"
SSH_KEY = "ssh-privatekey"
KNOWN_HOSTS = "known_hosts"
USERNAME = "username"
PASSWORD = "password"
# GitHub takes any user name with a token; GitLab's tokens name theirs in the Secret.
DEFAULT_USERNAME = "x-access-token"
# A URL with user information anywhere in a text (git's own messages may quote one).
_URL_WITH_USER = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/@\s'\"]*@[^\s'\"]*")


def secret_dir(environ: dict[str, str] | None = None) -> Path:
    """Where the git Secret is mounted (it may be absent: public repositories need none)."""
    environ = dict(os.environ) if environ is None else environ
    return Path(environ.get(SECRET_DIR_VARIABLE) or GIT_SECRET_DIR)


def git_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a git call: `environ` (default: this process's), no prompt, and the Secret's
    ssh key or https credential helper where the Secret is mounted."""
    base = dict(os.environ) if environ is None else dict(environ)
    env = {**base, "GIT_TERMINAL_PROMPT": "0"}
    where = secret_dir(base)
    key, hosts, password = where / SSH_KEY, where / KNOWN_HOSTS, where / PASSWORD
    if key.is_file():
        if not hosts.is_file():
            raise ConfigError(
                f"git secret: {where} has {SSH_KEY} but no {KNOWN_HOSTS} (ssh would have to trust the "
                "server unseen): add the host keys, e.g. `ssh-keyscan github.com`"
            )
        env["GIT_SSH_COMMAND"] = " ".join(
            [
                "ssh",
                "-i",
                shlex.quote(str(_private_copy(key))),
                "-o IdentitiesOnly=yes",
                f"-o UserKnownHostsFile={shlex.quote(str(hosts))}",
                "-o StrictHostKeyChecking=yes",
                "-o BatchMode=yes",
            ]
        )
    if password.is_file():
        user = where / USERNAME
        user_command = f"cat {shlex.quote(str(user))}" if user.is_file() else f"echo {DEFAULT_USERNAME}"
        # A helper git runs with `get` when it needs a password; it prints the files' contents then.
        helper = (
            f'!f() {{ test "$1" = get || exit 0; echo "username=$({user_command})"; '
            f'echo "password=$(cat {shlex.quote(str(password))})"; }}; f'
        )
        count = int(base.get("GIT_CONFIG_COUNT") or 0)
        # An empty helper first: git forgets the helpers configured before (a store on disk) for ours.
        for offset, value in enumerate(("", helper)):
            env[f"GIT_CONFIG_KEY_{count + offset}"] = "credential.helper"
            env[f"GIT_CONFIG_VALUE_{count + offset}"] = value
        env["GIT_CONFIG_COUNT"] = str(count + 2)
    return env


_COPIES: dict[tuple[str, int], Path] = {}


def _private_copy(key: Path) -> Path:
    """The key in a file only this user may read: a Secret volume's files are 0644 unless its defaultMode
    says otherwise, and ssh refuses a private key others can read. One copy per key version."""
    version = (str(key), key.stat().st_mtime_ns)
    if version in _COPIES and _COPIES[version].is_file():
        return _COPIES[version]
    data = key.read_bytes()
    if not data.endswith(b"\n"):
        data += b"\n"  # ssh reads a key without its last newline as invalid
    fd, name = tempfile.mkstemp(prefix="benchgate-git-key-")  # created 0600
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    _COPIES[version] = Path(name)
    return Path(name)


def scrubbed(text: str) -> str:
    """`text` with the password or token of every URL in it replaced by ***, for an error message."""
    return _URL_WITH_USER.sub(lambda m: redacted(m[0]), text)
