"""A coverage suite of Hugging Face families as a user runs one: `benchgate suite plan --hf` writes the
suite file, `benchgate suite run` gates each entry through the local pipeline (kfp.local, real torchrun),
and a second run of the incremental suite skips every entry measured under the same key.

One model of each family but causal-lm (tests/gate/test_suite.py gates a GPT-2 with its eval) goes
through a whole gate run here: masked-lm, seq2seq-lm, sequence-classification, image-classification
and audio-classification, each at size=tiny, with the eval skipped for its stated reason.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from benchgate.kit.files import read_json
from benchgate.suite.hf_plan import hf_entries, suite_toml
from benchgate.workloads.hf.tasks import TASKS

BENCH_TOML = """\
[bench]
steps = 6
warmup = 2
world_sizes = [1]
[eval]
enabled = true
[trace]
enabled = false
[gate]
baseline_dir = "{tmp}/baselines"
[gate.tolerances]
throughput_drop_pct = 50.0
"""
ONE_PER_FAMILY = {
    "masked-lm": "bert",
    "seq2seq-lm": "t5",
    "sequence-classification": "gpt2",
    "image-classification": "vit",
    "audio-classification": "wav2vec2",
}

UNITS = {"image-classification": "images", "audio-classification": "clips"}  # the others count tokens


def benchgate(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchgate", *args], cwd=cwd, capture_output=True, text=True, timeout=900
    )


def test_plan_writes_one_entry_per_model_type_of_the_family(tmp_path: Path) -> None:
    done = benchgate("suite", "plan", "--hf", "task=masked-lm", "size=tiny", "batch_size=4", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    suite = tomllib.loads((tmp_path / "suite.toml").read_text())
    types = sorted(TASKS["masked-lm"].types)
    assert suite["suite"] == {"name": "hf-masked-lm-tiny-batch_size4", "incremental": True}
    assert [e["args"]["model_type"] for e in suite["entries"]] == types
    bert = next(e for e in suite["entries"] if e["args"]["model_type"] == "bert")
    assert bert == {
        "name": "hf-bert-masked-lm-tiny-batch_size4",
        "workload": "benchgate.workloads.hf:make_workload",
        "args": {"task": "masked-lm", "size": "tiny", "batch_size": 4, "model_type": "bert"},
    }
    assert f"{len(types)} entries" in done.stdout
    # The file is the user's once written: replaced only when asked.
    again = benchgate("suite", "plan", "--hf", "task=masked-lm", cwd=tmp_path)
    assert again.returncode == 2 and "suite.toml exists; pass --force" in again.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--hf", "task=vision"], "--hf task: got 'vision'"),
        (["--hf", "size=huge"], "--hf size: got 'huge'"),
        (["--hf", "model_type=bert"], "--hf: model_type and config are the entries' own"),
        (["--hf", "--types", "vit"], "--types: 'vit' is not a causal-lm model type"),
        (["task=masked-lm"], "suite plan: say what to plan: --hf"),
    ],
)
def test_a_bad_plan_is_refused_naming_the_argument(tmp_path: Path, args: list[str], message: str) -> None:
    done = benchgate("suite", "plan", *args, cwd=tmp_path)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert not (tmp_path / "suite.toml").exists()


@pytest.mark.slow
@pytest.mark.timeout(1500)  # five gate runs, then a run that skips them
def test_one_model_per_family_gates_and_a_second_run_skips_every_entry(tmp_path: Path) -> None:
    (tmp_path / "bench.toml").write_text(BENCH_TOML.format(tmp=tmp_path))
    entries = []
    for task, model_type in ONE_PER_FAMILY.items():
        entries += hf_entries({"task": task, "size": "tiny", "batch_size": 2, "seq_len": 32}, [model_type])[1]
    (tmp_path / "suite.toml").write_text(suite_toml("families", entries, "test", "bench.toml"))

    first = benchgate("suite", "run", "suite.toml", "--no-tracking", cwd=tmp_path)
    out = tmp_path / "benchgate-suite-out"
    record = read_json(out / "suite.json")
    rows = {e["name"]: e for e in record["entries"]}
    assert all(e["state"] == "done" for e in rows.values()), first.stdout + first.stderr
    assert first.returncode == record["exit_code"], first.stdout + first.stderr
    for task, model_type in ONE_PER_FAMILY.items():
        name = f"hf-{model_type}-{task}-tiny-seq_len32-batch_size2"
        metrics = read_json(out / name / "metrics-ws1.json")
        assert metrics["tokens_per_s"]["p50"] > 0, name
        # What a step counts, named in the metrics and in the verdict's timing row.
        unit = UNITS.get(task, "tokens")
        assert metrics["unit"] == unit, name
        timing = next(
            c for c in read_json(out / name / "compare.json")["checks"] if c["metric"] == "tokens_per_s"
        )
        assert (timing["name"], timing["unit"]) == (
            f"{unit}/s (ws=1)",
            "tok/s" if unit == "tokens" else f"{unit}/s",
        )
        # Counted FLOPs for every family: the MFU's counted estimator followed each model's step.
        assert metrics["mfu"]["counting"]["per_token"] > 0, name
        eval_json = read_json(out / name / "eval.json")
        assert eval_json["skipped"].startswith(f"the workload has no eval hook: task={task}: "), eval_json
    assert "Coverage: 5 of 5 entries ran to a verdict (100%)." in (out / "suite.md").read_text()
    # One axis, one unit: the three token families are plotted, the images and the clips named apart.
    pareto = (out / "pareto.md").read_text()
    assert "| tokens/s at world size 1 |" in pareto, pareto
    for task, unit in UNITS.items():
        name = f"hf-{ONE_PER_FAMILY[task]}-{task}-tiny-seq_len32-batch_size2"
        assert f"{name} is not plotted: it counts {unit} per step, the plotted entries tokens" in pareto

    second = benchgate("suite", "run", "suite.toml", "--no-tracking", cwd=tmp_path)
    again = read_json(out / "suite.json")
    assert [e["state"] for e in again["entries"]] == ["skipped"] * 5, second.stdout + second.stderr
    assert second.returncode == again["exit_code"] == record["exit_code"]
    for before in rows.values():  # each row kept as measured, its results too
        now = next(e for e in again["entries"] if e["name"] == before["name"])
        assert now["verdict"] == before["verdict"] and now["measured_with"] == before["measured_with"]
        assert (out / now["out"] / "compare.json").is_file()
    assert "5 of them measured before" in second.stdout
    assert (out / "suite.html").is_file()  # the Pareto view drawn again over the entries kept
