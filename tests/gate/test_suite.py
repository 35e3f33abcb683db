"""`benchgate suite run` as a user runs it: a real subprocess, each entry through the local pipeline
(kfp.local, real torchrun), logged to a real `mlflow server`.

Runs happen outside any git checkout (a temporary directory), so a second run compares with the stored
baselines without an A/B against a baseline commit: these tests check the suite's plumbing (per-entry
names, baselines, suite.json, MLflow nesting, exit codes), not the timing decision (tests/gate/test_ab.py).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchgate.kit.files import read_json
from benchgate.suite.runner import suite_exit_code

# What every entry starts from: one world size, few steps, no trace; the sleepy workload needs 12 steps
# for a loss slope that is reliably negative (tests/conftest.py's make_config uses as many).
BENCH_TOML = """\
[bench]
steps = 6
warmup = 2
world_sizes = [1]
[eval]
enabled = false
[trace]
enabled = false
[gate]
baseline_dir = "{baselines}"
update_baseline = "{update}"
[gate.tolerances]
throughput_drop_pct = 50.0
[tracking]
experiment = "{experiment}"
local_dir = "{tmp}/mlflow"
spool_dir = "{tmp}/spool"
"""

SUITE_HEADER = """\
[suite]
name = "models"
config = "bench.toml"
"""
# docs/suites.md's suite example, with a 20-step eval (its 100 steps take minutes here): the reference model
# at two batch sizes, each with its eval, so both panels of the Pareto view have both entries.
GPT_ENTRIES = """
[[entries]]
name = "gpt-tiny-b4"
workload = "benchgate.workloads.gpt:make_workload"
args = { size = "tiny" }
variant = { precision = "fp32", batch_size = 4 }
config = { eval = { enabled = true, train_steps = 20 } }

[[entries]]
name = "gpt-tiny-b8"
workload = "benchgate.workloads.gpt:make_workload"
args = { size = "tiny" }
variant = { precision = "fp32", batch_size = 8 }
config = { eval = { enabled = true, train_steps = 20 } }
"""
# The README's own workload (my_bench.py, written into the test's directory) and a Hugging Face GPT-2
# built from configuration keys: neither declares its FLOPs for the HF model, so it has the counted
# estimator only. The HF entry runs on two ranks with the eval, as any user workload would.
MLP_ENTRY = """
[[entries]]
name = "mlp"
workload = "my_bench:make_workload"
args = { hidden = 48 }
"""
HF_ENTRY = """
[[entries]]
name = "hf-gpt2"
workload = "benchgate.workloads.hf:make_workload"
args = { model_type = "gpt2", n_layer = 2, n_embd = 64, n_head = 4, seq_len = 64 }
variant = { batch_size = 4 }
config = { bench = { world_sizes = [1, 2] }, eval = { enabled = true, train_steps = 20 } }
"""
SLEEPY_ENTRY = """
[[entries]]
name = "sleepy"
workload = "bg_test_workloads:sleepy"
args = { step_ms = 5.0 }
config = { bench = { steps = 12 } }
"""
BAD_ENTRIES = """
[[entries]]
name = "broken"
workload = "no_such_module:make_workload"

[[entries]]
name = "odd"
workload = "bg_test_workloads:sleepy"
variant = { precision = "fp32", flash_attention = true }
"""


def benchgate(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchgate", *args], cwd=cwd, capture_output=True, text=True, timeout=900
    )


def write_suite(tmp: Path, experiment: str, entries: str, update: str = "always") -> Path:
    (tmp / "bench.toml").write_text(
        BENCH_TOML.format(baselines=tmp / "baselines", update=update, experiment=experiment, tmp=tmp)
    )
    path = tmp / "suite.toml"
    path.write_text(SUITE_HEADER + entries)
    return path


def entries_by_name(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in record["entries"]}


def matmul_flops_per_token(metrics: dict[str, Any]) -> tuple[float, float]:
    """(the counted FLOPs per token outside attention, the attention's) from a metrics file."""
    counting = metrics["mfu"]["counting"]
    return counting["per_token"] - counting["attention_per_token"], counting["attention_per_token"]


def hf_dense_6n() -> float:
    """6N of the suite's HF GPT-2, N its matmuls' weights: every block's, and the head, which is the
    token embedding's matrix (tied) and, for this tiny model, a third of the work. The position
    embedding is a lookup, not a matmul. Built here from the same keys."""
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=256, n_positions=64)
    config.bos_token_id = config.eos_token_id = None  # as the workload sets them (outside the vocabulary)
    model = GPT2LMHeadModel(config)
    weights = [p for name, p in model.named_parameters() if p.dim() == 2 and "wpe" not in name]
    return 6.0 * sum(p.numel() for p in weights)


@pytest.mark.slow
@pytest.mark.timeout(1500)  # six gate runs: about 2 min on an idle 2-core host, 11 on a busy one
def test_a_suite_of_models_and_variants_gates_each_entry_against_its_own_baseline_under_one_parent(
    mlflow_server: str, tmp_path: Path
) -> None:
    from mlflow import MlflowClient

    from docs.doc_blocks import workload_example

    (tmp_path / "my_bench.py").write_text(workload_example(), encoding="utf-8")
    experiment = f"suite-{tmp_path.name}"
    suite = write_suite(tmp_path, experiment, GPT_ENTRIES + MLP_ENTRY + HF_ENTRY)
    first = benchgate(
        "suite", "run", str(suite), "--out", "first", "--tracking-uri", mlflow_server, cwd=tmp_path
    )
    assert first.returncode == 0, first.stdout + first.stderr
    record = read_json(tmp_path / "first" / "suite.json")
    assert record["suite"] == "models" and record["suite_file"] == str(suite)
    assert record["exit_code"] == 0
    entries = entries_by_name(record)
    assert list(entries) == ["gpt-tiny-b4", "gpt-tiny-b8", "mlp", "hf-gpt2"]
    for name, entry in entries.items():
        assert entry["state"] == "done" and entry["verdict"] == "PASS" and entry["exit_code"] == 0, entry
        assert entry["out"] == name and entry["error"] is None and entry["seconds"] > 0
        metrics = read_json(tmp_path / "first" / name / "metrics-ws1.json")
        # Stored and compared under the entry's name, whatever the workload calls itself.
        assert metrics["workload"] == name
    assert entries["gpt-tiny-b4"]["variant"] == {"precision": "fp32", "batch_size": 4}
    b4 = read_json(tmp_path / "first" / "gpt-tiny-b4" / "metrics-ws1.json")
    b8 = read_json(tmp_path / "first" / "gpt-tiny-b8" / "metrics-ws1.json")
    assert (b4["tokens_per_step_global"], b8["tokens_per_step_global"]) == (4 * 128, 8 * 128)
    evals = {n: read_json(tmp_path / "first" / n / "eval.json") for n in ("gpt-tiny-b4", "gpt-tiny-b8")}
    assert evals["gpt-tiny-b8"]["workload"] == "gpt-tiny-b8"
    # Each variant's eval trained on its own batch size (suite/spec.py sets eval.batch_size from it), at
    # its precision (fp32: unsaid), so the two have their own perplexities.
    assert [evals[n]["settings"]["batch_size"] for n in evals] == [4, 8]
    assert "precision" not in evals["gpt-tiny-b4"]["settings"]
    assert evals["gpt-tiny-b4"]["perplexity"] != evals["gpt-tiny-b8"]["perplexity"]

    # Counted FLOPs: the reference model's matmuls within a few percent of 6N, its sdpa attention
    # counted on this CPU (torch alone counts 0 for it there); the HF model declares nothing and has
    # only the count: 6N of its matmuls plus its attention.
    for name in ("gpt-tiny-b4", "gpt-tiny-b8"):
        metrics = read_json(tmp_path / "first" / name / "metrics-ws1.json")
        matmuls, attention = matmul_flops_per_token(metrics)
        assert matmuls / metrics["mfu"]["flops_per_token"]["dense_6n"] == pytest.approx(1.0, abs=0.05)
        assert attention > 0
    for ws in (1, 2):
        hf = read_json(tmp_path / "first" / "hf-gpt2" / f"metrics-ws{ws}.json")
        per_token = hf["mfu"]["flops_per_token"]
        assert per_token["dense_6n"] is None and per_token["attention_aware"] is None
        # GPT-2's attention dropout sends its sdpa to the math path on CPU: the scores and values are
        # batched matmuls there, counted in full (12·L·d·T per token: 2 layers, d=64, T=64).
        counted = hf["mfu"]["counting"]["per_token"]
        assert counted == pytest.approx(hf_dense_6n() + 12 * 2 * 64 * 64, rel=0.01)
    hf_eval = read_json(tmp_path / "first" / "hf-gpt2" / "eval.json")
    # 20 steps from random weights: better than uniform over the bytes (256), far from learnt.
    assert 1.0 < hf_eval["perplexity"] < 256.0 and hf_eval["workload"] == "hf-gpt2"
    assert set(hf_eval["probes"]) == {"facts", "count", "echo"}
    assert all(p["total"] > 0 for p in hf_eval["probes"].values())
    hf_checks = {c["name"] for c in read_json(tmp_path / "first" / "hf-gpt2" / "compare.json")["checks"]}
    assert {"perplexity (held-out)", "probe facts accuracy"} <= hf_checks

    # One baseline per entry, even for the two of one workload.
    stored = sorted(p.parent.name for p in (tmp_path / "baselines").glob("*/*/baseline.json"))
    assert stored == sorted(entries)
    # The terminal's table is grouped by entry and says the suite's exit code; suite.md is the same.
    assert "entry 4/4 hf-gpt2: PASS" in first.stdout
    markdown = (tmp_path / "first" / "suite.md").read_text()
    for name in entries:
        assert f"**{name} (PASS)**" in markdown
    # The family-wise false FAIL (suite/family.py): every entry gated at its share of the 5% budget,
    # and the bound stated under the table.
    family = record["family"]
    assert family["method"] == "bonferroni" and family["alpha"] == pytest.approx(0.05)
    assert family["decisions"] >= len(entries) and family["sentence"] in markdown
    for entry in entries.values():
        assert entry["confidence"] == pytest.approx(1 - 0.05 / family["decisions"])
    # The Pareto view (suite/report.py) is drawn at the end: three entries had the eval, every entry has
    # a peak memory; the frontier of each panel is marked, the rest named as dominated.
    assert (tmp_path / "first" / "pareto.png").read_bytes().startswith(b"\x89PNG")
    pareto = (tmp_path / "first" / "pareto.md").read_text()
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in pareto.splitlines()]
    on_perplexity = {cells[0]: cells[5] for cells in rows if cells[0] in evals}  # its panel's standing
    assert all(s == "frontier" or s.startswith("dominated by ") for s in on_perplexity.values()), pareto
    assert len(on_perplexity) == 2
    assert "gpt-tiny-b4 is left out" not in pareto and "mlp is left out of the perplexity panel" in pareto
    assert "frontier" in pareto and pareto.count("dominated by") + pareto.count("frontier") >= 6

    # Second run, never the baseline, of the reference model's two variants and two entries that cannot
    # run: each variant compares with its own baseline of the first run, the bad entries fail alone
    # naming themselves, and the suite exits 2.
    write_suite(tmp_path, experiment, GPT_ENTRIES + BAD_ENTRIES, update="never")
    second = benchgate(
        "suite", "run", str(suite), "--out", "second", "--tracking-uri", mlflow_server, cwd=tmp_path
    )
    record2 = read_json(tmp_path / "second" / "suite.json")
    assert second.returncode == record2["exit_code"] == suite_exit_code(record2["entries"]) == 2
    second_entries = entries_by_name(record2)
    assert list(second_entries) == ["gpt-tiny-b4", "gpt-tiny-b8", "broken", "odd"]
    for name in ("gpt-tiny-b4", "gpt-tiny-b8"):
        entry = second_entries[name]
        assert entry["state"] == "done", entry
        for file in ("metrics-ws1.json", "compare.json", "compare.md", "report.html", "env.json"):
            assert (tmp_path / "second" / name / file).is_file(), file
        compare = read_json(tmp_path / "second" / name / "compare.json")
        assert compare["workload"] == name
        # The baseline it was compared with is the first run of this entry, not of its workload.
        baseline_metrics = read_json(Path(compare["baseline_path"]) / "metrics-ws1.json")
        assert baseline_metrics["workload"] == name
        timing = [c for c in compare["checks"] if c["metric"] == "tokens_per_s"]
        assert timing and all(c["status"] != "NEW" and c["baseline"] is not None for c in timing)
        assert entry["verdict"] == compare["verdict"] and entry["exit_code"] == compare["exit_code"]
    broken, odd = second_entries["broken"], second_entries["odd"]
    assert broken["state"] == odd["state"] == "error"
    assert broken["exit_code"] == odd["exit_code"] == 2
    assert broken["error"].startswith("entries[2] 'broken': bench.workload: ")
    assert "no_such_module" in broken["error"]
    assert odd["error"].startswith("entries[3] 'odd': variant.flash_attention: got True (unknown key")
    assert not (tmp_path / "second" / "odd").exists()  # refused before it ran: no directory
    assert "entries[2] 'broken'" in second.stdout and "entries[3] 'odd'" in second.stdout
    assert second.stdout.rstrip().endswith("suite exit 2")

    # MLflow: one suite parent per run, each entry's gate run nested under its suite's parent.
    client = MlflowClient(tracking_uri=mlflow_server)
    experiment_id = client.get_experiment_by_name(experiment).experiment_id
    for data, ran in ((record, list(entries)), (record2, ["gpt-tiny-b4", "gpt-tiny-b8"])):
        parent_id = data["mlflow"]["suite_run_id"]
        parent = client.get_run(parent_id)
        assert parent.data.tags["benchgate.kind"] == "suite"
        assert parent.data.tags["benchgate.suite"] == "models"
        assert parent.info.run_name.startswith("suite models: ")
        assert parent.info.experiment_id == experiment_id
        artifacts = {a.path for a in client.list_artifacts(parent_id)}
        assert {"suite.md", "suite.json", "pareto.png", "pareto.md"} <= artifacts
        children = client.search_runs([experiment_id], f"tags.`mlflow.parentRunId` = '{parent_id}'")
        assert sorted(c.data.tags["benchgate.workload"] for c in children) == sorted(ran)
        out = "first" if data is record else "second"
        for child in children:
            published = read_json(tmp_path / out / child.data.tags["benchgate.workload"] / "published.json")
            assert child.info.run_id == published["mlflow_run_id"]
            assert child.data.tags["benchgate.kind"] == "gate"  # still read as a gate run
    assert record["mlflow"]["suite_run_id"] != record2["mlflow"]["suite_run_id"]
    # The HF model's counted FLOPs reach MLflow with its gate run, at both world sizes.
    (hf_run,) = client.search_runs(
        [experiment_id], "tags.`benchgate.workload` = 'hf-gpt2' and tags.`benchgate.kind` = 'gate'"
    )
    assert {"ws1/counted_flops_per_token", "ws2/counted_flops_per_token"} <= set(hf_run.data.metrics)


def test_a_suite_file_that_is_not_one_runs_nothing(tmp_path: Path) -> None:
    (tmp_path / "suite.toml").write_text('[suite]\nname = "a/b"\n[[entries]]\nname = "x"\nworkload = "m:f"\n')
    done = benchgate("suite", "run", "suite.toml", "--no-tracking", cwd=tmp_path)
    assert done.returncode == 2
    assert "error: suite.toml: suite.name: got 'a/b'" in done.stderr
    assert not (tmp_path / "benchgate-suite-out").exists()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_tracking_server_that_is_down_costs_a_warning_not_the_results_or_the_exit_code(
    tmp_path: Path,
) -> None:
    from harness import free_port

    suite = write_suite(tmp_path, "down", SLEEPY_ENTRY)
    # Give up on the dead server within a second, in the entry's gate run and for the suite run.
    (tmp_path / "bench.toml").write_text((tmp_path / "bench.toml").read_text() + "max_wait_s = 1.0\n")
    dead = f"http://127.0.0.1:{free_port()}"
    done = benchgate("suite", "run", str(suite), "--tracking-uri", dead, cwd=tmp_path)
    record = read_json(tmp_path / "benchgate-suite-out" / "suite.json")
    entry = record["entries"][0]
    # The entry's own verdict decides the exit code (without a reachable server and with no cached
    # baseline its timing is UNKNOWN, as for any gate run); the missing suite run changes nothing.
    assert entry["state"] == "done" and entry["verdict"] == "UNKNOWN", entry
    assert done.returncode == record["exit_code"] == entry["exit_code"] == 4, done.stdout + done.stderr
    assert record["mlflow"]["suite_run_id"] is None and dead in record["mlflow"]["error"]
    assert "warning: the suite was not logged to MLflow" in done.stdout
    # The entry's gate run waits in the spool for `benchgate sync`, as any gate run does.
    assert read_json(tmp_path / "benchgate-suite-out" / "sleepy" / "published.json")["spooled"]
