"""The timing verdict as a user meets it, with real parts: git commits, `benchgate run` through the local
pipeline, torchrun worker groups taking turns, real compute (no sleeps).

- a slowdown of a minority of steps FAILs through A/B, on a fresh runner with an empty store (--base);
- a change both A/B sides share (the bench configuration) is measured in its own environment row;
- an A/B cut short by its budget resumes from its rounds and decides;
- unchanged code, run again and again, PASSes each time and grows the noise history (`make bench`).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from stack_repo import git
from test_ab import run, stored_baseline, timing_row

from benchgate.kit.files import read_json

# `layers` layers on every step; every `every`-th step also runs `extra` more (a periodic job's cost).
WORKLOAD = """
import torch
import torch.nn.functional as F
from torch import nn

from benchgate.workloads.base import FlopsPerToken


class Stack:
    name = "stack"
    tokens_per_step = 32

    def __init__(self, layers, extra, every):
        self.layers, self.extra, self.every, self.calls = layers, extra, every, 0

    def build_model(self, device):
        def stack(n):
            return nn.Sequential(*[nn.Sequential(nn.Linear(256, 256), nn.GELU()) for _ in range(n)])
        return nn.ModuleList([stack(self.layers), stack(max(self.extra, 1))]).to(device)

    def make_optimizer(self, model):
        return torch.optim.SGD(model.parameters(), lr=1e-3)

    def make_batch(self, generator, device):
        return torch.randn(32, 256, generator=generator).to(device)

    def forward(self, model, batch):
        self.calls += 1
        out = model[0](batch)
        if self.extra and self.calls % self.every == 0:
            out = model[1](out)
        return out

    def loss(self, output, batch):
        return F.mse_loss(output, batch)

    def flops_per_token(self):
        n = 6 * self.layers * 256 * 256
        return FlopsPerToken(dense_6n=n, attention_aware=n)


def make_workload(layers={layers}):
    return Stack(int(layers), {extra}, {every})  # int(): the pipeline passes numbers as floats
"""


def commit(repo: Path, message: str, layers: int = 12, extra: int = 0, every: int = 5) -> str:
    text = (
        WORKLOAD.replace("{layers}", str(layers))
        .replace("{extra}", str(extra))
        .replace("{every}", str(every))
    )
    (repo / "stackwork.py").write_text(text, encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.mark.slow
@pytest.mark.serial
def test_a_slowdown_of_one_step_in_ten_fails_by_ab_with_no_stored_baseline(repo: Path) -> None:
    # Rounds of 40 steps (4 slowed ones each, as many as the slowest 10% the note looks at) and looks up
    # to 9 rounds: enough for the share of the slowest steps to show, and for a decision on a loaded host.
    # (One step in five at 3x is ambiguous by construction: the slowest 10% then carry at most half of
    # the slowdown, close to the note's threshold, and the note flipped with the host's noise.)
    (repo / "bench.toml").write_text(
        "[gate.ab]\nsteps = 40\nmin_measured_s = 0.2\nwarmup = 2\nmin_rounds = 3\nmax_rounds = 9\n"
    )
    base = commit(repo, "base")
    # Every 10th step also runs 48 more layers (5x that step): tokens/s about -30%, the median step unchanged.
    commit(repo, "a periodic job", extra=48, every=10)
    result = run(repo, "out", "--base", base, "--no-update-baseline")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "verdict: FAIL" in result.stdout and "rule: A/B, rounds of alternating steps" in result.stdout
    row = timing_row(repo, "out")
    assert row["decided_by"] == "ab" and row["status"] == "FAIL", row
    assert float(str(row["change"])) < -15
    note = str(row["note"])
    assert "concentrated in few steps" in note, note
    assert "median step" in note, note  # the typical step's change, as a diagnostic beside the total
    ab = read_json(repo / "out" / "ab" / "ws1" / "ab.json")
    assert all(r["pairs"] == len(r["base_step_s"]) == len(r["candidate_step_s"]) for r in ab["rounds"])


@pytest.mark.slow
@pytest.mark.serial
def test_a_configuration_change_is_measured_in_its_own_environment_row(repo: Path) -> None:
    # Two A/B rounds: both sides run the same configuration and code, so whatever the A/B decides is
    # about the code; the environment row measures the configuration's change (ab/environment.py).
    (repo / "bench.toml").write_text(
        "[gate.ab]\nsteps = 12\nmin_measured_s = 0.2\nwarmup = 2\nmin_rounds = 2\nmax_rounds = 2\n"
    )
    commit(repo, "base")
    stored_baseline(repo, runs=1)
    # Same code, another workload argument: both A/B sides run the candidate's configuration.
    result = run(repo, "out", "--base", "HEAD", "--workload-arg", "layers=24", "--no-update-baseline")
    row = timing_row(repo, "out")
    assert row["decided_by"] == "ab", row
    assert str(row["note"]).startswith("the setup differs from the baseline run's"), row
    assert "another bench configuration" in str(row["note"]), row
    checks = read_json(repo / "out" / "compare.json")["checks"]
    environment = next(c for c in checks if c["name"] == "environment (ws=1)")
    # Twice the layers: the base code under the new configuration is far slower than the baseline,
    # and the row names what changed (the packages the bench loaded are the same on both runs).
    assert environment["status"] in ("INFO", "WARN") and float(environment["change"]) < -20, environment
    note = str(environment["note"])
    assert note.startswith("environment changed: ") and "the bench configuration" in note, note
    assert "packages" not in note.split(";")[0], note
    # Each bench recorded what it loaded: torch, never benchgate or the workload under test.
    loaded = read_json(repo / "out" / "metrics-ws1.json")["loaded"]["packages"]
    assert any(p.startswith("torch==") for p in loaded), loaded
    assert not any(p.startswith(("benchgate==", "stackwork")) for p in loaded), loaded
    assert result.returncode in (0, 4), result.stdout + result.stderr  # never a FAIL of the code


@pytest.mark.slow
@pytest.mark.serial
def test_an_ab_cut_short_by_its_budget_resumes_from_its_rounds_and_decides(repo: Path) -> None:
    base = commit(repo, "base")
    commit(repo, "twice the layers", layers=24)
    (repo / "short.toml").write_text(
        "[gate.ab]\nsteps = 12\nmin_measured_s = 0.2\nwarmup = 2\nmin_rounds = 3\nmax_seconds = 1\n"
    )
    first = run(repo, "out", "--base", base, "--no-update-baseline", "--config", "short.toml")
    assert first.returncode == 4, first.stdout + first.stderr
    assert "benchgate run --resume" in first.stdout
    saved = read_json(repo / "out" / "ab" / "ws1" / "ab.json")
    assert saved["decision"]["status"] == "UNKNOWN" and len(saved["rounds"]) == 1
    (repo / "more.toml").write_text(
        "[gate.ab]\nsteps = 12\nmin_measured_s = 0.2\nwarmup = 2\nmin_rounds = 2\nmax_rounds = 9\n"
    )
    resumed = subprocess.run(
        [sys.executable, "-m", "benchgate", "run", "--resume", "out", "--config", "more.toml"],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert resumed.returncode == 1, resumed.stdout + resumed.stderr
    ab = read_json(repo / "out" / "ab" / "ws1" / "ab.json")
    assert ab["decision"]["status"] == "FAIL" and len(ab["rounds"]) >= 2
    assert ab["rounds"][0] == saved["rounds"][0]  # the saved round was continued, not redone
    assert timing_row(repo, "out")["status"] == "FAIL"
    # Piped, the resumed rounds say themselves as they run, ending at the rounds that ran.
    rounds = len(ab["rounds"])
    assert "A/B (resumed rounds) started" in resumed.stdout, resumed.stdout
    assert f"A/B (resumed rounds) done {rounds}/{rounds}" in resumed.stdout, resumed.stdout
    # Nothing left to resume: a clear refusal, exit 2.
    again = subprocess.run(
        [sys.executable, "-m", "benchgate", "run", "--resume", "out"],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    assert again.returncode == 2 and "no undecided A/B" in again.stderr, again.stderr


@pytest.mark.slow
@pytest.mark.serial
def test_make_bench_on_a_fresh_clone_passes_every_time_and_grows_the_history(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(root), str(clone)], check=True)
    # Tests see the working tree; the clone gets its sources, so it is the code under test either way.
    for sub in ("src", "tests", "Makefile", "pyproject.toml"):
        if (root / sub).is_dir():
            shutil.copytree(
                root / sub, clone / sub, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__")
            )
        else:
            shutil.copy2(root / sub, clone / sub)
    git(clone, "add", "-A")
    git(
        clone,
        "-c",
        "user.email=ci@example.com",
        "-c",
        "user.name=CI",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "x",
    )
    venv = Path(sys.executable).parent.parent
    # Eval off keeps it short; such a run becomes the baseline only on request (policy.held_back).
    args = "--steps 10 --warmup 2 --world-sizes 1 --no-eval --no-trace --no-tracking --update-baseline"
    for attempt in range(2):
        # The real target, on this interpreter's environment (-o: already installed, not reinstalled).
        done = subprocess.run(
            ["make", "-o", f"{venv}/.installed-run", "bench", f"VENV={venv}", f"ARGS={args}"],
            cwd=clone,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert done.returncode == 0, f"run {attempt + 1}: {done.stdout}{done.stderr}"
        assert "verdict: PASS" in done.stdout or attempt == 0, done.stdout
    store = clone / ".benchgate" / "baselines"
    history = next(store.glob("*/.*.versions/*/history.json"), None)
    assert history is not None
    newest = max(store.glob("*/.*.versions/*/history.json"), key=lambda p: p.parent.name)
    assert len(read_json(newest)["runs"]) == 2
