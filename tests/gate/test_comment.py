"""`benchgate comment` against a fake GitHub and GitLab (tests/support/fake_forge_server.py), and one real run
whose step summary, JUnit report and PR comment are what a CI user reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bundles import bundle
from fake_forge_server import FakeForge, serve
from typer.testing import CliRunner

from benchgate.checks.compare import compare
from benchgate.checks.stage import write_comparison
from benchgate.cli.main import app
from benchgate.config import Tolerances

TOKEN = "forge-token"
REPOSITORY = "octo/widgets"
PROJECT = "group/widgets"
FORGE_VARIABLES = (
    "GITHUB_TOKEN", "GITHUB_REPOSITORY", "GITHUB_EVENT_PATH", "GITHUB_API_URL", "GITHUB_STEP_SUMMARY",
    "GITLAB_TOKEN", "GITLAB_CI", "CI_API_V4_URL", "CI_PROJECT_ID", "CI_MERGE_REQUEST_IID",
)  # fmt: skip


@pytest.fixture
def forge() -> Iterator[FakeForge]:
    # Two to a page: the earlier comments below span pages, so finding ours needs the Link header.
    with serve(FakeForge(token=TOKEN, max_per_page=2)) as fake:
        yield fake


def results(directory: Path, step_s: float = 0.12, published: dict[str, Any] | None = None) -> Path:
    """A results directory as a run leaves it: compare.json from a real comparison, and published.json."""
    write_comparison(directory, compare(bundle(1), bundle(2, step_s=step_s), Tolerances()))
    (directory / "published.json").write_text(json.dumps(published or {"baseline_written": None}))
    return directory


def comment(env: dict[str, str], *args: str) -> Any:
    cleared: dict[str, str | None] = dict.fromkeys(FORGE_VARIABLES)
    return CliRunner().invoke(app, ["comment", *args], env=cleared | env)


def github_env(forge: FakeForge, **more: str) -> dict[str, str]:
    return {"GITHUB_TOKEN": TOKEN, "GITHUB_REPOSITORY": REPOSITORY, "GITHUB_API_URL": forge.base_url} | more


def gitlab_env(forge: FakeForge, **more: str) -> dict[str, str]:
    api = f"{forge.base_url}/api/v4"
    return {"GITLAB_TOKEN": TOKEN, "CI_API_V4_URL": api, "CI_PROJECT_ID": PROJECT, "GITLAB_CI": "true"} | more


def test_github_comment_is_created_once_then_updated_in_place(tmp_path: Path, forge: FakeForge) -> None:
    out = results(tmp_path / "out")
    forge.open_pull(REPOSITORY, 7)
    for i in range(3):  # other people's comments, one quoting benchgate's table but not its marker
        forge.github_comment(REPOSITORY, 7, f"review {i}" if i else "| tokens/s (ws=1) | looks slow")
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"action": "synchronize", "number": 7, "pull_request": {"number": 7}}))
    first = comment(github_env(forge, GITHUB_EVENT_PATH=str(event)), "--out", str(out))
    assert first.exit_code == 0, first.output  # a FAIL verdict: the comment reports, it does not gate
    assert first.stdout.startswith("<!-- benchgate:w:cpu-Test-x2_torch2.13.0 -->\n### benchgate: FAIL")
    assert "comment created: https://github.example/octo/widgets/pull/7#issuecomment-" in first.stderr
    ours = [c for c in forge.pulls[(REPOSITORY, 7)] if c["body"].startswith("<!-- benchgate:")]
    assert len(ours) == 1 and ours[0]["body"] == first.stdout
    # The same pull request pushed again, now passing: the one comment changes, nothing is added.
    results(out, step_s=0.1)
    second = comment(github_env(forge), "--out", str(out), "--pr", "7")
    assert second.exit_code == 0, second.output
    assert "comment updated" in second.stderr
    assert len(forge.pulls[(REPOSITORY, 7)]) == 4
    assert ours[0]["body"] == second.stdout and "**Verdict: PASS** (exit 0)" in second.stdout
    assert ("PATCH", f"/repos/{REPOSITORY}/issues/comments/{ours[0]['id']}", "") in forge.requests
    pages = [q for m, p, q in forge.requests if m == "GET" and p.endswith("/issues/7/comments")]
    assert len(pages) >= 4  # four comments, two a page: both lists followed rel="next"


def test_gitlab_note_is_found_past_system_notes_and_updated(tmp_path: Path, forge: FakeForge) -> None:
    out = results(tmp_path / "out")
    forge.open_merge_request(PROJECT, 12)
    forge.gitlab_note(PROJECT, 12, "added 1 commit", system=True)
    forge.gitlab_note(PROJECT, 12, "nice")
    first = comment(gitlab_env(forge, CI_MERGE_REQUEST_IID="12"), "--out", str(out))
    assert first.exit_code == 0, first.output
    assert "comment created" in first.stderr
    forge.gitlab_note(PROJECT, 12, "added 1 commit", system=True)
    results(out, step_s=0.1)
    second = comment(gitlab_env(forge, CI_MERGE_REQUEST_IID="12"), "--out", str(out))
    assert second.exit_code == 0, second.output
    notes = forge.merge_requests[(PROJECT, 12)]
    ours = [n for n in notes if n["body"].startswith("<!-- benchgate:")]
    assert len(notes) == 4 and len(ours) == 1 and "**Verdict: PASS**" in ours[0]["body"]
    # The project path travels URL-encoded, as GitLab requires.
    assert any(m == "PUT" and p.startswith("/api/v4/projects/group%2Fwidgets/") for m, p, _ in forge.requests)


def test_without_a_token_the_comment_is_printed_and_nothing_is_sent(tmp_path: Path, forge: FakeForge) -> None:
    out = results(tmp_path / "out")
    printed = comment({"GITHUB_REPOSITORY": REPOSITORY, "GITHUB_API_URL": forge.base_url}, "--out", str(out))
    assert printed.exit_code == 0, printed.output
    assert "| tokens/s (ws=1) |" in printed.stdout
    assert "printed, not posted" in printed.stderr
    assert forge.requests == []


@pytest.mark.parametrize(
    ("env", "args", "message"),
    [
        pytest.param({"GITHUB_TOKEN": TOKEN}, [], "GITHUB_REPOSITORY is not set", id="no-repository"),
        pytest.param(
            {"GITHUB_TOKEN": TOKEN, "GITHUB_REPOSITORY": REPOSITORY},
            [],
            "no pull request number: pass --pr N",
            id="no-pr",
        ),
        pytest.param(
            {"GITHUB_TOKEN": TOKEN, "GITHUB_REPOSITORY": "widgets"},
            ["--pr", "7"],
            "GITHUB_REPOSITORY: got 'widgets', expected owner/name",
            id="bad-repository",
        ),
        pytest.param(
            {"GITLAB_TOKEN": TOKEN, "CI_API_V4_URL": "http://127.0.0.1:9/api/v4", "CI_PROJECT_ID": "1"},
            [],
            "CI_MERGE_REQUEST_IID is not set",
            id="no-iid",
        ),
        pytest.param({"GITLAB_TOKEN": TOKEN}, ["--pr", "3"], "CI_API_V4_URL is not set", id="no-gitlab-api"),
        pytest.param({}, ["--forge", "gitea"], "--forge: got 'gitea'", id="bad-forge"),
    ],
)
def test_missing_or_bad_input_is_exit_2_naming_the_variable(
    tmp_path: Path, env: dict[str, str], args: list[str], message: str
) -> None:
    out = results(tmp_path / "out")
    result = comment(env, "--out", str(out), *args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert result.stdout == ""  # nothing printed before the input is known to be good


def test_a_directory_without_a_run_is_exit_2(tmp_path: Path) -> None:
    result = comment({}, "--out", str(tmp_path))
    assert result.exit_code == 2
    assert f"--out: {tmp_path} holds no benchgate run (no compare.json)" in result.stderr


@pytest.mark.parametrize(
    ("token", "pull", "status", "hint"),
    [
        pytest.param("stale-secret-token", 7, "401 Unauthorized", "the token was refused", id="401"),
        pytest.param(TOKEN, 8, "404 Not Found", "no such repository", id="404"),
    ],
)
def test_a_forge_that_refuses_is_exit_3_with_the_status_and_never_the_token(
    tmp_path: Path, forge: FakeForge, token: str, pull: int, status: str, hint: str
) -> None:
    out = results(tmp_path / "out")
    forge.open_pull(REPOSITORY, 7)
    result = comment(github_env(forge, GITHUB_TOKEN=token), "--out", str(out), "--pr", str(pull))
    assert result.exit_code == 3, result.output
    assert f"GitHub answered {status} to GET {forge.base_url}/repos/{REPOSITORY}/issues/{pull}/comments" in (
        result.stderr
    )
    assert hint in result.stderr
    assert token not in result.output
    assert forge.pulls[(REPOSITORY, 7)] == []


def test_a_gitlab_token_refused_and_a_forge_down_are_exit_3(tmp_path: Path, forge: FakeForge) -> None:
    out = results(tmp_path / "out")
    forge.open_merge_request(PROJECT, 12)
    refused = comment(gitlab_env(forge, GITLAB_TOKEN="wrong-secret"), "--out", str(out), "--pr", "12")
    assert refused.exit_code == 3 and "GitLab answered 401 Unauthorized" in refused.stderr
    assert "401 Unauthorized" in refused.stderr and "wrong-secret" not in refused.output
    forge.fail_with = 503
    down = comment(gitlab_env(forge), "--out", str(out), "--pr", "12")
    assert down.exit_code == 3 and "GitLab answered 503" in down.stderr
    unreachable = comment(
        github_env(forge, GITHUB_API_URL="http://127.0.0.1:9"), "--out", str(out), "--pr", "7"
    )
    assert unreachable.exit_code == 3 and "GitHub unreachable: GET http://127.0.0.1:9/" in unreachable.stderr


def benchgate(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k not in FORGE_VARIABLES} | env
    return subprocess.run(
        [sys.executable, "-m", "benchgate", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env=environment,
    )


@pytest.mark.slow
def test_a_real_run_writes_the_step_summary_and_junit_then_comments_once(tmp_path: Path) -> None:
    step_summary = tmp_path / "step_summary.md"
    out = tmp_path / "out"
    ran = benchgate(
        "run", "--steps", "12", "--warmup", "2", "--world-sizes", "1", "--no-eval", "--no-trace",
        "--out", str(out), "--baseline-dir", str(tmp_path / "b"), "--no-tracking",
        cwd=tmp_path,
        env={"GITHUB_STEP_SUMMARY": str(step_summary)},
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr  # no baseline yet: NEW rows, PASS
    summary = step_summary.read_text()
    assert summary == (out / "summary.md").read_text() + "\n"
    assert "| metric | baseline | candidate | change (interval) | verdict |" in summary
    assert "| tokens/s (ws=1) | — |" in summary and "**Verdict: PASS** (exit 0)" in summary
    root = ET.parse(out / "junit.xml").getroot()
    suite = root.find("testsuite")
    assert root.tag == "testsuites" and suite is not None
    cases = suite.findall("testcase")
    assert int(suite.attrib["tests"]) == len(cases) == int(root.attrib["tests"])
    assert suite.attrib["failures"] == suite.attrib["errors"] == "0"
    with serve(FakeForge(token=TOKEN)) as forge:
        forge.open_pull(REPOSITORY, 3)
        env = {"GITHUB_TOKEN": TOKEN, "GITHUB_REPOSITORY": REPOSITORY, "GITHUB_API_URL": forge.base_url}
        posted = benchgate("comment", "--out", str(out), "--pr", "3", cwd=tmp_path, env=env)
        assert posted.returncode == 0, posted.stdout + posted.stderr
        assert "comment created" in posted.stderr
        (out / "published.json").write_text(json.dumps({"mlflow_run_id": "feed42", "mlflow_url": None}))
        again = benchgate("comment", "--out", str(out), "--pr", "3", cwd=tmp_path, env=env)
        assert again.returncode == 0, again.stdout + again.stderr
        assert "comment updated" in again.stderr
        stored = forge.pulls[(REPOSITORY, 3)]
        assert len(stored) == 1 and stored[0]["body"] == again.stdout != posted.stdout
        # A run of the runner's local store is no place for the pull request's reader: no link, no id.
        assert "MLflow: no link" in stored[0]["body"] and "feed42" not in stored[0]["body"]
