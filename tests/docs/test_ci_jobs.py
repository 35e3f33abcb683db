"""docs/ci.md's GitHub Actions and GitLab CI jobs: parsed as the forges read them, and run as they run them.

The structure tests check what each forge needs of the YAML (a full-history checkout, the results kept
`if: always()`, the JUnit report). The slow tests run the jobs' script steps in what a runner leaves
behind: a bare `origin` with two commits on main and a feature branch whose change makes the README's
workload slower, a detached checkout (GitHub: the pull request's merge commit with every branch fetched;
GitLab: only the pipeline's branch, so the job's own `git fetch` of the target is exercised), the
variables each forge sets, `$GITHUB_STEP_SUMMARY` pointing to a file, and
tests/support/fake_forge_server.py in place of the forge's comment API (the only fake: GitHub and GitLab
cannot run here).

One step is replaced: the install step. This checkout's .venv already has benchgate, first on PATH, so
the test checks that the step pins torch and uses constraints.txt, and does not run it (it needs the
network). The repository's bench.toml is docs/ci.md's, plus settings that make a run take seconds
(one world size, short rounds); the job's command lines are run as printed.
"""

from __future__ import annotations

import json
import re
import subprocess
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from doc_blocks import (
    CI_DOC,
    Block,
    code_blocks,
    commit_files,
    deeper_model,
    git,
    init_repo,
    run_shell,
    user_env,
    workload_example,
)
from fake_forge_server import FakeForge, serve

from benchgate.results.comparison import TIMING

# What makes the jobs' runs cheap here: one world size, few steps, no eval or trace, short A/B rounds
# (as tests/conftest.py's `repo` fixture). A slower change of ~2x still FAILs at the first look.
FAST: dict[str, dict[str, Any]] = {
    "bench": {"steps": 20, "warmup": 3, "world_sizes": [1]},
    "eval": {"enabled": False},
    "trace": {"enabled": False},
    "gate": {"ab": {"steps": 12, "min_measured_s": 0.2, "warmup": 2, "min_rounds": 2, "max_rounds": 5}},
}
PULL, MERGE_REQUEST, PROJECT_ID = 7, 5, "42"
OWNER_REPO = "octo/app"
BENCHGATE_SETTINGS = {"BENCHGATE_SOURCE": "https://git.example/benchgate.git", "BENCHGATE_VERSION": "v0.1.0"}


def _yaml_blocks() -> list[Block]:
    return [b for b in code_blocks(CI_DOC) if b.lang in ("yaml", "yml")]


def github_workflow() -> dict[Any, Any]:
    found = [y for y in (yaml.safe_load(b.text) for b in _yaml_blocks()) if "jobs" in y]
    assert len(found) == 1, "docs/ci.md must hold one GitHub workflow (a YAML block with `jobs`)"
    return dict(found[0])


def gitlab_job() -> dict[str, Any]:
    found = [y for y in (yaml.safe_load(b.text) for b in _yaml_blocks()) if "jobs" not in y]
    assert len(found) == 1, "docs/ci.md must hold one GitLab CI job"
    (job,) = found[0].values()
    return dict(job)


def documented_bench_toml() -> dict[str, Any]:
    blocks = [b for b in code_blocks(CI_DOC) if b.lang == "toml"]
    assert len(blocks) == 1, "docs/ci.md shows the repository's bench.toml once"
    return tomllib.loads(blocks[0].text)


def _merge(into: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(into)
    for key, value in extra.items():
        out[key] = _merge(out.get(key, {}), value) if isinstance(value, Mapping) else value
    return out


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML for {value!r}")


def to_toml(data: Mapping[str, Any], prefix: str = "") -> str:
    """Tables of scalars, lists and inline tables: all a bench.toml holds."""
    scalars = {k: v for k, v in data.items() if not isinstance(v, Mapping) or k == "workload_args"}
    tables = {k: v for k, v in data.items() if k not in scalars}
    text = f"[{prefix}]\n" if prefix and scalars else ""
    text += "".join(f"{k} = {_toml_value(v)}\n" for k, v in scalars.items())
    for key, table in tables.items():
        text += to_toml(table, f"{prefix}.{key}" if prefix else key)
    return text


# --- what the forges need of the YAML --------------------------------------------------------------


def _steps() -> list[dict[str, Any]]:
    (job,) = github_workflow()["jobs"].values()
    return list(job["steps"])


def _uses(step: Mapping[str, Any], action: str) -> bool:
    return str(step.get("uses", "")).split("@")[0] == action


def test_github_workflow_has_what_actions_needs() -> None:
    workflow = github_workflow()
    triggers = workflow["on"] if "on" in workflow else workflow[True]  # YAML 1.1 reads a bare `on` as true
    assert "pull_request" in triggers and triggers["push"]["branches"] == ["main"]
    (job,) = workflow["jobs"].values()
    assert job["runs-on"] and job["permissions"]["pull-requests"] == "write"
    steps = job["steps"]
    checkout = next(s for s in steps if _uses(s, "actions/checkout"))
    assert checkout["with"]["fetch-depth"] == 0, "--base origin/main needs the full history"
    assert steps.index(checkout) == 0
    assert any(_uses(s, "actions/cache") and "pip" in s["with"]["path"] for s in steps)
    upload = next(s for s in steps if _uses(s, "actions/upload-artifact"))
    assert upload["if"] == "always()" and upload["with"]["path"].rstrip("/") == "benchgate-out"
    run = next(s for s in steps if "benchgate run" in s.get("run", ""))
    assert "BENCHGATE_BRANCH" in run["run"] and "--base" in run["run"]
    comment = next(s for s in steps if "benchgate comment" in s.get("run", ""))
    assert "always()" in comment["if"] and comment["env"]["GITHUB_TOKEN"] == "${{ secrets.GITHUB_TOKEN }}"


def test_gitlab_job_has_what_gitlab_needs() -> None:
    job = gitlab_job()
    assert isinstance(job["script"], list) and any("benchgate run" in line for line in job["script"])
    assert job["variables"]["GIT_DEPTH"] == "0"
    assert job["artifacts"]["when"] == "always"
    assert job["artifacts"]["reports"]["junit"] == "benchgate-out/junit.xml"
    assert [p.rstrip("/") for p in job["artifacts"]["paths"]] == ["benchgate-out"]
    assert 4 in job["allow_failure"]["exit_codes"]
    assert job["cache"]["paths"] and "PIP_CACHE_DIR" in job["variables"]
    assert any("benchgate comment" in line for line in job["after_script"])


def _install_lines() -> list[str]:
    github = next(s["run"] for s in _steps() if s.get("name", "").startswith("Install"))
    return [github, "\n".join(gitlab_job()["before_script"])]


@pytest.mark.parametrize("script", _install_lines(), ids=["github", "gitlab"])
def test_install_steps_pin_torch_first_and_use_the_constraints(script: str) -> None:
    torch = script.index("torch==2.13.0")
    benchgate = script.index("constraints.txt")
    assert torch < benchgate and "download.pytorch.org/whl/cpu" in script


def test_every_script_is_valid_bash() -> None:
    scripts = [s["run"] for s in _steps() if "run" in s]
    job = gitlab_job()
    scripts += ["\n".join(job[k]) for k in ("before_script", "script", "after_script")]
    assert len(scripts) >= 5
    for script in scripts:
        check = subprocess.run(["bash", "-n", "-c", script], capture_output=True, text=True, check=False)
        assert check.returncode == 0, f"{script}\n{check.stderr}"


# --- the jobs, run -----------------------------------------------------------------------------------


@dataclass
class Origin:
    path: Path
    main: str
    feature: str
    merge: str  # GitHub's refs/pull/N/merge: the feature merged into main


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory) -> Origin:
    """A bare origin: main with the workload and bench.toml, then a second commit; `my-change` makes
    the model deeper (slower); refs/pull/7/merge as GitHub makes it for the pull request."""
    root = tmp_path_factory.mktemp("forge")
    bare = root / "origin.git"
    git(root, "init", "-q", "--bare", "-b", "main", str(bare))
    work = init_repo(root / "work")
    bench_toml = to_toml(_merge(documented_bench_toml(), FAST))
    commit_files(
        work,
        "a training step to gate",
        {
            "my_bench.py": workload_example(),
            "bench.toml": bench_toml,
            ".gitignore": "benchgate-out/\n.benchgate/\n",
        },
    )
    main = commit_files(work, "notes", {"NOTES.md": "How we train.\n"})
    git(work, "switch", "-q", "-c", "my-change")
    feature = commit_files(work, "a deeper model", {"my_bench.py": deeper_model(workload_example())})
    git(work, "switch", "-q", "main")
    git(work, "merge", "-q", "--no-ff", "-m", f"Merge {feature} into {main}", "my-change")
    merge = git(work, "rev-parse", "HEAD")
    git(
        work,
        "push",
        "-q",
        str(bare),
        f"{main}:refs/heads/main",
        "my-change",
        f"{merge}:refs/pull/{PULL}/merge",
    )
    return Origin(bare, main, feature, merge)


def _checkout(path: Path, origin: Origin, refspecs: list[str], commit: str) -> Path:
    """As the runners do it: init, fetch the refspecs, check the commit out on a detached HEAD."""
    path.mkdir()
    git(path, "init", "-q")
    git(path, "remote", "add", "origin", str(origin.path))
    git(path, "fetch", "-q", "origin", *refspecs)
    git(path, "checkout", "-q", "--detach", commit)
    git(path, "config", "user.email", "runner@example.com")
    git(path, "config", "user.name", "Runner")
    return path


_EXPRESSION = re.compile(r"\$\{\{\s*([^}]+?)\s*\}\}")


def _resolve(text: str, contexts: Mapping[str, Mapping[str, str]]) -> str:
    """GitHub's `${{ context.name }}` in env values; anything else is not something this test knows."""

    def one(match: re.Match[str]) -> str:
        context, _, name = match[1].partition(".")
        assert context in contexts and name in contexts[context], f"cannot evaluate {match[0]}"
        return contexts[context][name]

    return _EXPRESSION.sub(one, text)


def _condition(expression: str | None, failed: bool, github: Mapping[str, str]) -> bool:
    """A step's `if:`, for the terms the documented job uses; anything else fails the test."""
    if expression is None:
        return not failed
    result = True
    always = False
    for term in (t.strip() for t in expression.split("&&")):
        if term == "always()":
            always = True
        elif term == "success()":
            result &= not failed
        elif term == "failure()":
            result &= failed
        elif m := re.fullmatch(r"github\.(\w+)\s*==\s*'([^']*)'", term):
            result &= github[m[1]] == m[2]
        else:
            raise AssertionError(f"the test cannot evaluate `if: {expression}`")
    return result and (always or not failed)


@dataclass
class StepResult:
    name: str
    returncode: int | None  # None: skipped
    output: str = ""


@dataclass
class JobRun:
    steps: list[StepResult] = field(default_factory=list)

    def step(self, text: str) -> StepResult:
        return next(s for s in self.steps if text in s.name)


def _run_github_job(workspace: Path, env: dict[str, str], contexts: dict[str, dict[str, str]]) -> JobRun:
    (job,) = github_workflow()["jobs"].values()
    job_env = {k: _resolve(str(v), contexts) for k, v in job.get("env", {}).items()}
    run, failed = JobRun(), False
    for step in job["steps"]:
        name = step.get("name") or step.get("uses") or step["run"].splitlines()[0]
        if not _condition(step.get("if"), failed, contexts["github"]):
            run.steps.append(StepResult(name, None))
            continue
        if "run" not in step:
            action = str(step["uses"]).split("@")[0]
            if action == "actions/upload-artifact":
                path = workspace / step["with"]["path"]
                run.steps.append(StepResult(name, 0 if path.is_dir() and any(path.iterdir()) else 1))
            else:  # checkout: done by the fixture; setup-python and cache: the .venv stands in
                assert action in ("actions/checkout", "actions/setup-python", "actions/cache"), action
                run.steps.append(StepResult(name, 0))
            continue
        if name.startswith("Install"):  # the .venv has benchgate (see the module docstring)
            run.steps.append(StepResult(name, 0))
            continue
        step_env = {k: _resolve(str(v), contexts) for k, v in step.get("env", {}).items()}
        done = run_shell(step["run"], workspace, {**env, **job_env, **step_env})
        run.steps.append(StepResult(name, done.returncode, done.stdout[-6000:] + done.stderr[-6000:]))
        failed |= done.returncode != 0 and not step.get("continue-on-error", False)
    return run


def _expand(value: str, env: Mapping[str, str]) -> str:
    return re.sub(r"\$\{?(\w+)\}?", lambda m: env.get(m[1], ""), value)


def _assert_reports(workspace: Path) -> None:
    out = workspace / "benchgate-out"
    timing = [c for c in json.loads((out / "compare.json").read_text())["checks"] if c["metric"] == TIMING]
    assert timing and all(c["status"] == "FAIL" and c["decided_by"] == "ab" for c in timing), timing
    env = json.loads((out / "env.json").read_text())
    assert env["git"]["branch"] == "my-change", env["git"]  # BENCHGATE_BRANCH, on a detached HEAD
    summary = (out / "summary.md").read_text()
    assert "FAIL" in summary
    # Written for the pull request's reader, who has the job's artifact and not the runner's disk or
    # store; no "nothing to compare" note beside the A/B's rows.
    assert str(workspace) not in summary, summary
    assert "download the `benchgate-out` artifact of this job" in summary, summary
    assert "in the local store" not in summary and "nothing to compare against" not in summary, summary
    # With no stored baseline, the A/B's base is the baseline of memory and loss too (ab/sides.py).
    checks = json.loads((out / "compare.json").read_text())["checks"]
    memory = next(c for c in checks if c["name"] == "peak memory (ws=1)")
    assert memory["decided_by"] == "ab" and memory["ab_base"] is not None, memory
    assert any(c["name"] == "final loss (ws=1)" and c["status"] == "INFO" for c in checks), checks
    junit = (out / "junit.xml").read_text()
    assert "<failure" in junit and "tokens/s" in junit


def _comment_bodies(threads: list[dict[str, Any]]) -> list[str]:
    return [str(c["body"]) for c in threads if "<!-- benchgate:" in str(c["body"])]


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.timeout(900)
def test_the_github_job_fails_a_slower_pull_request_and_reports_it(origin: Origin, tmp_path: Path) -> None:
    workspace = _checkout(
        tmp_path / "app",
        origin,
        ["+refs/heads/*:refs/remotes/origin/*", f"+refs/pull/{PULL}/merge:refs/remotes/pull/{PULL}/merge"],
        origin.merge,
    )
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": PULL}}))
    summary = tmp_path / "step_summary.md"
    summary.write_text("")
    (tmp_path / "runner-temp").mkdir()
    with serve(FakeForge()) as fake:
        fake.open_pull(OWNER_REPO, PULL)
        github = {
            "event_name": "pull_request",
            "ref": f"refs/pull/{PULL}/merge",
            "ref_name": f"{PULL}/merge",
            "head_ref": "my-change",
            "base_ref": "main",
            "repository": OWNER_REPO,
            "sha": origin.merge,
        }
        env = user_env(
            CI="true",
            GITHUB_ACTIONS="true",
            GITHUB_EVENT_NAME="pull_request",
            GITHUB_EVENT_PATH=str(event),
            GITHUB_REF=github["ref"],
            GITHUB_REF_NAME=github["ref_name"],
            GITHUB_HEAD_REF="my-change",
            GITHUB_BASE_REF="main",
            GITHUB_REPOSITORY=OWNER_REPO,
            GITHUB_SHA=origin.merge,
            GITHUB_WORKSPACE=str(workspace),
            GITHUB_SERVER_URL="https://github.com",
            GITHUB_API_URL=fake.base_url,
            GITHUB_STEP_SUMMARY=str(summary),
            RUNNER_OS="Linux",
            RUNNER_TEMP=str(tmp_path / "runner-temp"),
        )
        contexts = {
            "github": github,
            "runner": {"os": "Linux"},
            "vars": BENCHGATE_SETTINGS,
            # No MLflow secrets: the runner logs to a local store and the pull request is decided by A/B.
            "secrets": {"GITHUB_TOKEN": fake.token, "MLFLOW_TRACKING_URI": "", "MLFLOW_TRACKING_TOKEN": ""},
        }
        job = _run_github_job(workspace, env, contexts)
        comments = _comment_bodies(fake.pulls[(OWNER_REPO, PULL)])
    bench = job.step("benchgate run")
    assert bench.returncode == 1, bench.output  # FAIL
    assert job.step("Comment").returncode == 0, job.step("Comment").output
    assert job.step("upload-artifact").returncode == 0  # ran after the failure, and found the results
    _assert_reports(workspace)
    assert "FAIL" in summary.read_text(), "benchgate run appends its summary to $GITHUB_STEP_SUMMARY"
    assert len(comments) == 1 and "FAIL" in comments[0], comments


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.timeout(900)
def test_the_gitlab_job_fails_a_slower_merge_request_and_reports_it(origin: Origin, tmp_path: Path) -> None:
    # GitLab fetches only the pipeline's branch: origin/main comes from the job's own fetch.
    workspace = _checkout(
        tmp_path / "app", origin, ["+refs/heads/my-change:refs/remotes/origin/my-change"], origin.feature
    )
    job = gitlab_job()
    with serve(FakeForge()) as fake:
        fake.open_merge_request(PROJECT_ID, MERGE_REQUEST)
        env = user_env(
            CI="true",
            GITLAB_CI="true",
            CI_PIPELINE_SOURCE="merge_request_event",
            CI_MERGE_REQUEST_IID=str(MERGE_REQUEST),
            CI_MERGE_REQUEST_SOURCE_BRANCH_NAME="my-change",
            CI_MERGE_REQUEST_TARGET_BRANCH_NAME="main",
            CI_COMMIT_REF_NAME="my-change",
            CI_COMMIT_SHA=origin.feature,
            CI_DEFAULT_BRANCH="main",
            CI_PROJECT_DIR=str(workspace),
            CI_PROJECT_ID=PROJECT_ID,
            CI_PROJECT_PATH=OWNER_REPO,
            CI_API_V4_URL=f"{fake.base_url}/api/v4",
            GITLAB_TOKEN=fake.token,
            **BENCHGATE_SETTINGS,
        )
        env.update({k: _expand(str(v), env) for k, v in job["variables"].items()})
        script = run_shell("\n".join(job["script"]), workspace, env)
        after = run_shell("\n".join(job["after_script"]), workspace, env)
        notes = _comment_bodies(fake.merge_requests[(PROJECT_ID, MERGE_REQUEST)])
    assert script.returncode == 1, script.stdout[-6000:] + script.stderr[-6000:]  # FAIL
    assert script.returncode not in job["allow_failure"]["exit_codes"]  # a FAIL fails the pipeline
    assert after.returncode == 0, after.stdout + after.stderr
    _assert_reports(workspace)
    assert len(notes) == 1 and "FAIL" in notes[0], notes
