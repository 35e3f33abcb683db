"""The run's summary as one pull-request comment (GitHub) or merge-request note (GitLab), kept current.

The comment is summary.md (benchgate.publish.ci_report) under a hidden first line, the marker
`<!-- benchgate:<workload>:<profile> -->`. Posting lists the request's comments (every page) and edits
the first one that starts with the same marker instead of adding another, so a pull request that is
pushed ten times carries one benchgate comment per workload and machine profile, always the latest.

    GitHub   REST v3. GITHUB_TOKEN (sent as a bearer token), GITHUB_REPOSITORY (owner/name), the pull
             request number from --pr or the event payload (GITHUB_EVENT_PATH: pull_request.number),
             GITHUB_API_URL (default https://api.github.com; GitHub Enterprise sets it). Comments are
             issue comments: GET/POST /repos/{repo}/issues/{n}/comments, PATCH .../issues/comments/{id}.
    GitLab   v4. GITLAB_TOKEN (sent as PRIVATE-TOKEN; it needs the api scope), CI_API_V4_URL,
             CI_PROJECT_ID, the merge request IID from --pr or CI_MERGE_REQUEST_IID. Notes: GET/POST
             /projects/{id}/merge_requests/{iid}/notes, PUT .../notes/{note_id}.

Without a token nothing is sent: the comment is only printed. A missing variable is a ConfigError
naming it (exit 2); a forge that refuses (401, 403, 404, any other error status) or cannot be reached is
a RunFailedError with the status and what to check (exit 3). No message ever carries the token.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import requests

from benchgate.errors import ConfigError, RunFailedError
from benchgate.publish.ci_report import render_summary
from benchgate.results.comparison import load_comparison

FORGES = ("auto", "github", "gitlab")
GITHUB_API = "https://api.github.com"
TIMEOUT_S = 30.0
PER_PAGE = 100
MAX_PAGES = 50  # 5,000 comments: past that, a loop between pages, not a real pull request
_REPOSITORY = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
_REFUSED = {
    401: "the token was refused: is {token} set to a valid, unexpired token?",
    403: "the token may not write comments here: GitHub needs pull-requests: write (or issues: write) in "
    "the job's permissions, GitLab a token with the api scope",
    404: "no such repository, project or request, or the token cannot see it",
}


def marker(workload: str | None, profile: str) -> str:
    """The hidden first line that finds this workload's and profile's earlier comment again."""
    # `--` would end the HTML comment early; a newline would split the line the marker must be.
    text = f"benchgate:{workload}:{profile}".replace("--", "-").replace("\n", " ")
    return f"<!-- {text} -->"


def comment_body(out_dir: Path) -> tuple[str, str]:
    """(marker, the comment) for the run in `out_dir`: the marker line, then the summary."""
    if not (out_dir / "compare.json").is_file():
        raise ConfigError(f"--out: {out_dir} holds no benchgate run (no compare.json)")
    comparison = load_comparison(out_dir / "compare.json")
    tag = marker(comparison.workload, comparison.machine_profile)
    return tag, f"{tag}\n{render_summary(out_dir, out_dir)}"


@dataclass(frozen=True)
class Target:
    """Where the comment goes: the forge's API, the request's comments, and how to authenticate."""

    forge: str  # "github" or "gitlab"
    comments_url: str  # list (GET) and create (POST)
    item_url: str  # edit one: format with id=
    headers: dict[str, str] = field(repr=False)
    token: str = field(repr=False)
    token_variable: str = ""
    description: str = ""


def _required(env: Mapping[str, str], name: str, why: str) -> str:
    value = env.get(name, "").strip()
    if not value:
        raise ConfigError(f"{name} is not set: {why}")
    return value


def _number(value: Any, source: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str) or not str(value).isdigit():
        raise ConfigError(f"{source}: got {value!r}, expected a pull/merge request number")
    number = int(value)
    if number <= 0:
        raise ConfigError(f"{source}: got {value!r}, expected a pull/merge request number")
    return number


def _github_pr(env: Mapping[str, str], pr: int | None) -> int:
    if pr is not None:
        return _number(pr, "--pr")
    path = env.get("GITHUB_EVENT_PATH", "").strip()
    if not path:
        raise ConfigError(
            "no pull request number: pass --pr N, or run on a pull_request event "
            "(GITHUB_EVENT_PATH is not set)"
        )
    try:
        event = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConfigError(f"GITHUB_EVENT_PATH: cannot read the event payload {path}: {e}") from None
    number = (event.get("pull_request") or {}).get("number") if isinstance(event, dict) else None
    if number is None:
        raise ConfigError(
            f"GITHUB_EVENT_PATH: {path} holds no pull_request.number (not a pull_request event): pass --pr N"
        )
    return _number(number, "GITHUB_EVENT_PATH pull_request.number")


def github_target(env: Mapping[str, str], pr: int | None) -> Target:
    token = _required(env, "GITHUB_TOKEN", "it is the token that posts the comment")
    repository = _required(env, "GITHUB_REPOSITORY", "the owner/name of the repository to comment in")
    if not _REPOSITORY.fullmatch(repository):
        raise ConfigError(f"GITHUB_REPOSITORY: got {repository!r}, expected owner/name")
    number = _github_pr(env, pr)
    api = (env.get("GITHUB_API_URL", "").strip() or GITHUB_API).rstrip("/")
    return Target(
        "github",
        f"{api}/repos/{repository}/issues/{number}/comments",
        f"{api}/repos/{repository}/issues/comments/{{id}}",
        {
            "Authorization": f"Bearer {token}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
        },
        token,
        "GITHUB_TOKEN",
        f"{repository}#{number}",
    )


def gitlab_target(env: Mapping[str, str], pr: int | None) -> Target:
    token = _required(env, "GITLAB_TOKEN", "it is the token that posts the note")
    api = _required(env, "CI_API_V4_URL", "the GitLab API to post to (GitLab CI sets it)").rstrip("/")
    project = _required(env, "CI_PROJECT_ID", "the project of the merge request (GitLab CI sets it)")
    if pr is not None:
        iid = _number(pr, "--pr")
    else:
        raw = _required(
            env, "CI_MERGE_REQUEST_IID", "pass --pr N, or run in a merge request pipeline, which sets it"
        )
        iid = _number(raw, "CI_MERGE_REQUEST_IID")
    notes = f"{api}/projects/{quote(project, safe='')}/merge_requests/{iid}/notes"
    return Target(
        "gitlab",
        notes,
        f"{notes}/{{id}}",
        {"PRIVATE-TOKEN": token},
        token,
        "GITLAB_TOKEN",
        f"{project}!{iid}",
    )


def target_from_env(env: Mapping[str, str], pr: int | None = None, forge: str = "auto") -> Target | None:
    """The forge to post to, or None when no token is set (the comment is printed only)."""
    if forge not in FORGES:
        raise ConfigError(f"--forge: got {forge!r}, expected one of {', '.join(FORGES)}")
    if forge == "auto":
        github, gitlab = bool(env.get("GITHUB_TOKEN", "").strip()), bool(env.get("GITLAB_TOKEN", "").strip())
        if not (github or gitlab):
            return None
        # Both tokens set: the CI system running this decides (GitLab CI sets GITLAB_CI).
        forge = "gitlab" if gitlab and (not github or env.get("GITLAB_CI")) else "github"
    return github_target(env, pr) if forge == "github" else gitlab_target(env, pr)


@dataclass(frozen=True)
class Posted:
    action: str  # "created" or "updated"
    comment_id: int
    url: str


class _Forge:
    """HTTP to one forge; every failure a RunFailedError with the status, never with the token."""

    def __init__(self, target: Target, session: requests.Session | None = None) -> None:
        self.target = target
        self.session = session or requests.Session()
        self.name = "GitHub" if target.forge == "github" else "GitLab"

    def _clean(self, text: str) -> str:
        return text.replace(self.target.token, "***") if self.target.token else text

    def request(self, method: str, url: str, body: dict[str, Any] | None = None) -> requests.Response:
        try:
            response = self.session.request(
                method, url, headers=self.target.headers, json=body, timeout=TIMEOUT_S
            )
        except requests.RequestException as e:
            raise RunFailedError(
                self._clean(f"{self.name} unreachable: {method} {url}: {type(e).__name__}: {e}")
            ) from None
        if response.status_code >= 400:
            hint = _REFUSED.get(response.status_code, "the forge refused the request").format(
                token=self.target.token_variable
            )
            raise RunFailedError(
                self._clean(
                    f"{self.name} answered {response.status_code} {response.reason} to {method} {url} "
                    f"({_said(response)}): {hint}"
                )
            )
        return response

    def pages(self, url: str) -> Iterator[dict[str, Any]]:
        """Every item of a paginated list, following the Link header's rel="next" (both forges send it)."""
        separator = "&" if "?" in url else "?"
        next_url: str | None = f"{url}{separator}per_page={PER_PAGE}"
        for _ in range(MAX_PAGES):
            if next_url is None:
                return
            response = self.request("GET", next_url)
            items = _json(response, next_url, self.name)
            if not isinstance(items, list):
                raise RunFailedError(
                    f"{self.name}: GET {next_url} answered {type(items).__name__}, not a list"
                )
            yield from (item for item in items if isinstance(item, dict))
            next_url = response.links.get("next", {}).get("url")
        raise RunFailedError(f"{self.name}: more than {MAX_PAGES} pages of comments at {url}")


def _json(response: requests.Response, url: str, name: str) -> Any:
    try:
        return response.json()
    except ValueError:
        raise RunFailedError(f"{name}: {url} answered {response.status_code} without JSON") from None


def _said(response: requests.Response) -> str:
    """The forge's own one-line reason (GitHub's and GitLab's `message`), else the start of the body."""
    try:
        data = response.json()
    except ValueError:
        data = None
    said = data.get("message") or data.get("error") if isinstance(data, dict) else None
    text = str(said) if said else response.text
    return " ".join(text.split())[:200] or "no message"


def post(target: Target, tag: str, body: str, session: requests.Session | None = None) -> Posted:
    """Edit the comment that starts with `tag`, or create one; returns what was done and where."""
    forge = _Forge(target, session)
    earlier = next(
        (
            item
            for item in forge.pages(target.comments_url)
            if str(item.get("body", "")).startswith(tag) and not item.get("system", False)
        ),
        None,
    )
    if earlier is not None:
        url = target.item_url.format(id=earlier["id"])
        done = forge.request("PATCH" if target.forge == "github" else "PUT", url, {"body": body})
        action = "updated"
    else:
        url = target.comments_url
        done = forge.request("POST", url, {"body": body})
        action = "created"
    answer = _json(done, url, forge.name)
    comment_id = int(answer.get("id", 0)) if isinstance(answer, dict) else 0
    where = answer.get("html_url") if isinstance(answer, dict) else None
    return Posted(action, comment_id, str(where or f"{target.description} comment {comment_id}"))
