"""Credentials in URLs: refused where a user passes them, removed where benchgate picks a URL up itself.

A repository URL and the MLflow tracking URI travel far: into KFP run parameters (readable in the KFP
UI by anyone with access to the namespace), env.json, MLflow tags and params, the report, and logs. A
password or token written into one (`https://user:TOKEN@host/...`, as CI systems put in a checkout's
`origin`) would reach all of them. So:

- a URL the user passes (`--repository`, `tracking.uri`, `MLFLOW_TRACKING_URI`, a BenchmarkRun's
  `repository`) with credentials in it is refused (exit 2), and the message shows it without them;
- the repository benchgate reads from `git remote get-url origin` has them removed.

Credentials belong where the tools look for them: MLflow's `MLFLOW_TRACKING_USERNAME`/`_PASSWORD`/
`_TOKEN`, a git credential helper or a deploy key for git.

A user name alone is normally no secret (`git@`, Azure DevOps' `org@`), but hosts also accept a token in
its place; the token formats of GitHub and GitLab are recognised and count as credentials.
"""

from __future__ import annotations

import re

# scheme://userinfo@ — userinfo is everything up to the first "@" before the host's "/".
_USERINFO = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/@]*)@")
# Personal access, OAuth, app and fine-grained tokens of GitHub; personal/CI tokens of GitLab.
_TOKEN_USER = re.compile(r"^(gh[pousr]_|github_pat_|glpat-|gldt-|glcbt-)", re.IGNORECASE)
REDACTED = "***"


def has_credentials(url: str) -> bool:
    """Whether `url` carries a password, or a token in place of a user name."""
    match = _USERINFO.match(url)
    if not match:
        return False
    userinfo = match["userinfo"]
    return ":" in userinfo or bool(_TOKEN_USER.match(userinfo))


def without_credentials(url: str) -> str:
    """`url` with its password (or token user name) removed; unchanged when it has none."""
    if not has_credentials(url):
        return url
    match = _USERINFO.match(url)
    assert match is not None
    user = match["userinfo"].split(":", 1)[0]
    kept = "" if _TOKEN_USER.match(user) else f"{user}@"
    return f"{match['scheme']}{kept}{url[match.end() :]}"


def redacted(url: str) -> str:
    """`url` as it may be shown: credentials replaced by ***."""
    if not has_credentials(url):
        return url
    match = _USERINFO.match(url)
    assert match is not None
    user = match["userinfo"].split(":", 1)[0]
    shown = REDACTED if _TOKEN_USER.match(user) else f"{user}:{REDACTED}"
    return f"{match['scheme']}{shown}@{url[match.end() :]}"


def refuse_credentials(url: str, field: str, instead: str) -> None:
    """Raise ConfigError naming `field` (and the URL without its secret) when `url` carries credentials."""
    if has_credentials(url):
        from benchgate.errors import ConfigError

        raise ConfigError(
            f"{field}: got {redacted(url)!r}, which carries credentials; they would be recorded in the run "
            f"(KFP parameters, MLflow, env.json, logs). {instead}"
        )


GIT_INSTEAD = "Give git its credentials through a credential helper, GIT_ASKPASS or a deploy key."
MLFLOW_INSTEAD = "Set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD, or MLFLOW_TRACKING_TOKEN."
