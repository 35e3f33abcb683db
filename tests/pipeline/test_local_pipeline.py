"""The `benchgate` pipeline run end to end through kfp.local (real torchrun with 2 CPU ranks inside)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from harness import make_config

from benchgate.checks.stage import stage_compare
from benchgate.kfp.local_run import run_gate
from benchgate.kfp.tasks import LOCAL_OUT_VARIABLE, gate_task, run_record
from benchgate.kit.files import read_json, write_json
from benchgate.measure.evaluate import stage_eval
from benchgate.measure.launch import stage_bench
from benchgate.measure.stage import stage_env
from benchgate.results.bundle import load_bundle
from benchgate.results.comparison import Check, Comparison, Status
from benchgate.store.baseline import save_baseline

TASKS = {"capture-env", "baseline", "bench", "bench-2", "evaluate", "trace", "compare", "gate"}


def _statuses(comparison: Comparison) -> list[tuple[str, str]]:
    # Scaling efficiency is a plain threshold on two fresh measurements (WARN below 5 points): on a
    # shared 2-core host one run of the pair can cross it by noise alone, so only its presence is compared.
    return [(c.name, "measured" if c.name.startswith("scaling") else c.status) for c in comparison.checks]


def _metrics(task_dir: Path) -> dict[str, Any]:
    """The figures a task logged to Output[Metrics] (kfp.local keeps them in executor_output.json)."""
    output = read_json(task_dir / "executor_output.json")
    return dict(output["artifacts"]["figures"]["artifacts"][0]["metadata"])


@pytest.mark.slow
def test_local_pipeline_verdict_equals_the_stages_called_directly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Outside any git repository: no commit to call the baseline's own, and no base commit for A/B.
    monkeypatch.chdir(tmp_path)
    # sleepy's steps are sleeps: steady enough that two runs get the same verdict; no drift reference,
    # which assumes CPU-bound steps.
    bench = {"world_sizes": [1, 2], "drift_reference": False}
    config = make_config(tmp_path, bench=bench, out=str(tmp_path / "pipeline"))
    # The baseline: one earlier run of the same settings, measured by the stages (either path's input).
    base = tmp_path / "base"
    stage_env(base, config=config)
    for ws in (1, 2):
        stage_bench(config, ws, base)
    save_baseline(load_bundle(base), config.gate.baseline_dir, "an earlier run")
    outcome = run_gate(config)

    direct = tmp_path / "direct"
    stage_env(direct, config=config)
    for ws in (1, 2):
        stage_bench(config, ws, direct)
    direct_comparison, _, _ = stage_compare(config, direct)

    # One baseline run: the screen cannot know the run-to-run noise yet, and says so on both paths.
    assert outcome.comparison.verdict == direct_comparison.verdict == "UNKNOWN"
    assert _statuses(outcome.comparison) == _statuses(direct_comparison)
    assert {name for name, status in _statuses(outcome.comparison)} >= {"tokens/s (ws=2)"}
    assert {p.name for p in outcome.pipeline_dir.iterdir()} == TASKS
    figures = _metrics(outcome.pipeline_dir / "bench-2")
    assert (
        figures["tokens_per_s_p50"]
        == read_json(tmp_path / "pipeline" / "metrics-ws2.json")["tokens_per_s"]["p50"]
    )
    verdict = outcome.pipeline_dir / "compare" / "verdict"
    assert "| tokens/s (ws=2) [" in verdict.read_text(encoding="utf-8")
    # An UNKNOWN verdict is no crash: the log says it plainly, without kfp.local's failure trace.
    log = (tmp_path / "pipeline" / "logs" / "pipeline.log").read_text(encoding="utf-8")
    assert "benchgate gate: verdict UNKNOWN (exit 4)" in log
    assert "benchgate run: verdict UNKNOWN (exit 4)" in log.split("finished with status")[-1]
    assert not re.search(r" - ERROR - |Traceback|FAILURE", log), log[-3000:]


@pytest.mark.slow
def test_local_pipeline_eval_equals_run_eval_bit_for_bit(
    logged_gate_run: dict[str, Any], tmp_path: Path
) -> None:
    # The session's whole pipeline run (conftest.logged_gate_run: gpt-tiny, eval and trace on).
    config, outcome = logged_gate_run["config"], logged_gate_run["outcome"]
    piped = read_json(outcome.out_dir / "eval.json")
    direct = stage_eval(config, tmp_path / "direct-eval.json")
    assert piped["perplexity"] == direct["perplexity"]
    assert piped["probes"] == direct["probes"]
    assert list((outcome.out_dir / "trace").glob("*.pt.trace.json.gz"))
    assert _metrics(outcome.pipeline_dir / "evaluate")["perplexity"] == piped["perplexity"]


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True)
    return done.stdout.strip()


@pytest.mark.slow
def test_local_pipeline_benchmarks_the_commit_it_is_given(tmp_path: Path) -> None:
    # A repository whose workload module exists only in one commit: the tasks can import it only by
    # fetching exactly that commit, as they do on a cluster.
    repo = tmp_path / "trainer"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "trainer_at_commit.py").write_text(
        "from bg_test_workloads import sleepy\n\ndef make(**kw):\n    return sleepy(**kw)\n"
    )
    _git(repo, "init", "-q")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "trainer")
    sha = _git(repo, "rev-parse", "HEAD")
    _git(repo, "rm", "-q", "src/trainer_at_commit.py")  # the working tree no longer has it

    config = make_config(tmp_path, bench={"workload": "trainer_at_commit:make"})
    outcome = run_gate(config, commit=sha, repository=f"file://{repo}", branch="main")
    env = read_json(outcome.out_dir / "env.json")
    assert env["source"] == {"repository": f"file://{repo}", "commit": sha}
    assert env["git"]["commit"] == sha and env["git"]["branch"] == "main"
    assert read_json(outcome.out_dir / "metrics-ws1.json")["workload"] == "sleepy"
    assert outcome.comparison.verdict == "PASS"


@pytest.mark.parametrize(("status", "code"), [("FAIL", 1), ("UNKNOWN", 4), ("PASS", 0)])
def test_gate_task_fails_the_run_on_a_cluster_and_reports_the_verdict_locally(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    status: Status,
    code: int,
) -> None:
    results = tmp_path / "results"
    comparison = Comparison("cpu-x", "sleepy", None, [Check("tokens/s (ws=1)", "tok/s", 1.0, status=status)])
    write_json(results / "compare.json", comparison.to_dict())
    write_json(results / "published.json", {"mlflow_run_id": None, "spooled": None})
    write_json(
        results / "run.json", run_record("4f1c-uuid", "benchgate-abc")
    )  # the env task's, as compare copies it
    # On a cluster (the variable unset): FAIL and UNKNOWN end the task with their exit code, so the
    # KFP UI shows the run red.
    monkeypatch.delenv(LOCAL_OUT_VARIABLE, raising=False)
    if code:
        with pytest.raises(SystemExit) as exited:
            gate_task(str(results), str(tmp_path / "cluster-summary"))
        assert exited.value.code == code
    else:
        gate_task(str(results), str(tmp_path / "cluster-summary"))
    assert f"benchgate gate: verdict {status} (exit {code})" in capsys.readouterr().out
    # Under `benchgate run`: the task says the verdict and succeeds; the summary carries the exit code.
    monkeypatch.setenv(LOCAL_OUT_VARIABLE, str(tmp_path / "out"))
    gate_task(str(results), str(tmp_path / "local-summary"))
    assert f"benchgate gate: verdict {status} (exit {code})" in capsys.readouterr().out
    summary = read_json(tmp_path / "local-summary")
    assert (summary["verdict"], summary["exit_code"]) == (status, code)
    # A suite's entry on a cluster: the verdict is recorded and the task succeeds; the suite gate, after
    # the last entry, fails the suite's run (kfp/suite/pipeline.py).
    monkeypatch.delenv(LOCAL_OUT_VARIABLE)
    write_json(results / "run.json", run_record("4f1c-uuid", "benchgate-suite-abc", "sleepy-b8"))
    gate_task(str(results), str(tmp_path / "entry-summary"))
    assert "benchgate gate: suite entry sleepy-b8: the suite gate judges the suite" in capsys.readouterr().out
    assert read_json(tmp_path / "entry-summary")["exit_code"] == code
