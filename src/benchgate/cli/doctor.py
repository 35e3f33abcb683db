"""`benchgate doctor`: on this machine, the smallest change the gate can decide at its tolerance within its
budget, in about five minutes.

It measures what the A/B will meet, with the A/B's own code: the device (torch's and NVML's view and a
matmul ceiling on CUDA; the CPU budget, the load and a matmul figure on CPU: `measure/probe.py`), then a
few A/A rounds of the config's workload (the reference GPT by default: tiny on CPU, small on GPU) at
ws=1 through the A/B runner (`ab/runner.run_ab`, both sides the same code, in the layout gate.ab.layout
asks for), and gives their round-to-round spread and round time to the planner (`ab/power.py`) with
the configured tolerance and [gate.ab] budget. The same planner prints the opening line of every gate
run's A/B, so the two figures agree.

The A/A rounds are taken whatever they show (gate.ab.min_rounds = max_rounds = --rounds: no look stops
them early), within DOCTOR_AB_SECONDS. Exit 0 when the tolerance is reachable, 5 (EXIT_TOO_NOISY) when it
is not: a finding about the machine, not an error.
"""

from __future__ import annotations

import math
import statistics
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer

from benchgate._version import __version__
from benchgate.ab import power
from benchgate.ab.decision import ABDecision
from benchgate.ab.round_plan import round_steps
from benchgate.ab.runner import AB_FILE, Side, round_config, run_ab
from benchgate.cli.terminal import BAD_INPUT, config_option, console, exit_codes, option
from benchgate.cli.terminal import fail as _fail
from benchgate.config import RunConfig, load_config
from benchgate.errors import EXIT_PASS, EXIT_RUN_FAILED, EXIT_TOO_NOISY, BenchgateError, RunFailedError
from benchgate.kit.files import read_json, write_json
from benchgate.measure.launch import metrics_path, stage_bench, uses_cuda, visible_gpus
from benchgate.measure.stage import stage_env
from benchgate.results.figures import mean_step_time

# The A/A rounds' wall-time cap: with the probes, env and one bench launch the doctor ends within ~5 min.
DOCTOR_AB_SECONDS = 210.0
DEFAULT_ROUNDS = 6
# The range given for the measured round sd: a spread from six rounds is known to within about 2x.
SD_RANGE_LEVEL = 0.9
DOCTOR_CODES = exit_codes(
    (EXIT_PASS, "the tolerance is reachable: an unchanged commit PASSes within gate.ab.max_seconds"),
    BAD_INPUT,
    (EXIT_RUN_FAILED, "a device probe or an A/A round failed"),
    (EXIT_TOO_NOISY, "too noisy: the tolerance is out of reach within gate.ab.max_seconds"),
)


def doctor(
    config: Annotated[
        Path | None,
        option(
            metavar="FILE",
            text="TOML config file, as `benchgate run` takes: its [gate.tolerances], [gate.ab] and workload.",
            default="none",
        ),
    ] = None,
    device: Annotated[
        str | None, config_option(metavar="DEVICE", text="auto, cpu or cuda.", key="bench.device")
    ] = None,
    rounds: Annotated[
        int, typer.Option(min=3, metavar="N", help="A/A rounds whose spread the figure is computed from.")
    ] = DEFAULT_ROUNDS,
    json_path: Annotated[
        Path | None,
        option("--json", metavar="PATH", text="Write everything measured as JSON.", default="none"),
    ] = None,
    out: Annotated[
        Path | None,
        option(metavar="DIR", text="Keep the A/A rounds' files here.", default="a temporary directory"),
    ] = None,
) -> None:
    """Measure the smallest change the gate can decide on this machine, and how long it takes."""
    try:
        cfg = load_config(config, {"bench.device": device})
        if out is not None:
            report = diagnose(cfg, rounds, out)
        else:
            with tempfile.TemporaryDirectory(prefix="benchgate-doctor-") as scratch:
                report = diagnose(cfg, rounds, Path(scratch))
        if json_path is not None:
            write_json(json_path, report)
    except BenchgateError as exc:
        _fail(exc)
    raise typer.Exit(report["exit_code"])


def diagnose(cfg: RunConfig, rounds: int, out: Path) -> dict[str, Any]:
    """Probe, A/A rounds, plan; prints as it goes and returns the report (`--json`)."""
    # A GPU that was asked for (or given) and that torch cannot see stops here, exit 2 (stage_env).
    env = stage_env(out, config=cfg)
    gpus = visible_gpus()
    on_cuda = uses_cuda(cfg.bench.device, gpus)
    console.print(f"machine profile: {env['machine_profile']}", markup=False, highlight=False)
    probe = _probe(on_cuda)
    for line in device_lines(probe):
        console.print(line, markup=False, highlight=False)
    aa = aa_rounds(cfg, rounds, out, gpus)
    ab, tol = cfg.gate.ab, cfg.gate.tolerances
    plan = power.plan(
        aa["sd_log"],
        aa["seconds_per_round"],
        tol.throughput_drop_pct,
        tol.confidence,
        ab.min_rounds,
        ab.max_rounds,
        ab.max_seconds,
    )
    low, high = aa["round_sd_pct_range"]
    sd_note = f" ({SD_RANGE_LEVEL:.0%} range {low:.2f}-{high:.2f}% from {aa['rounds']} rounds)"
    for line in plan_lines(plan, sd_note):
        console.print(line, markup=False, highlight=False)
    return {
        "benchgate": __version__,
        "machine_profile": env["machine_profile"],
        "device": probe,
        "aa": aa,
        "gate": {
            "throughput_drop_pct": tol.throughput_drop_pct,
            "confidence": tol.confidence,
            "ab": ab.model_dump(mode="json"),
        },
        "plan": plan.to_dict(),
        "finding": "reachable" if plan.reachable else "too noisy",
        "exit_code": EXIT_PASS if plan.reachable else EXIT_TOO_NOISY,
    }


def _probe(on_cuda: bool) -> dict[str, Any]:
    from benchgate.measure import probe

    try:
        return probe.cuda_probe() if on_cuda else probe.cpu_probe()
    except Exception as e:  # torch's own error (a CUDA fault, out of memory): a failed probe, exit 3
        kind = "CUDA" if on_cuda else "CPU"
        raise RunFailedError(f"{kind} probe failed: {type(e).__name__}: {e}") from e


def aa_rounds(cfg: RunConfig, rounds: int, out: Path, gpus: int) -> dict[str, Any]:
    """`rounds` A/A rounds at ws=1 through the A/B runner: their spread, round time and layout."""
    ab = cfg.gate.ab.model_copy(
        update={"min_rounds": rounds, "max_rounds": rounds, "max_seconds": DOCTOR_AB_SECONDS}
    )
    aa_cfg = cfg.model_copy(update={"gate": cfg.gate.model_copy(update={"ab": ab})})
    # One plain launch first, as a gate run's bench: its step time sets the steps per round (steps short
    # of gate.ab.min_measured_s get more), and on CUDA its peak memory decides layout = auto.
    console.print(f"bench ws=1: {cfg.bench.workload} ({ab.steps} steps) ...", markup=False, highlight=False)
    stage_bench(round_config(aa_cfg), 1, out, gpus=gpus)
    step_s = mean_step_time(read_json(metrics_path(out, 1))["samples"]["step_time_s"])
    steps = round_steps(aa_cfg, step_s)
    console.print(
        f"A/A ws=1: {rounds} rounds of {steps} steps per side (step {1000 * step_s:.1f} ms) ...",
        markup=False,
        highlight=False,
    )

    def on_round(index: int, decision: ABDecision) -> None:
        # The runner wrote the round into ab.json before calling back: its own figure, not the mean.
        latest = read_json(out / "ab" / "ws1" / AB_FILE)["rounds"][-1]
        console.print(
            f"  round {index}/{rounds}: {power.pct(latest['change_log']):+.2f}% ({latest['seconds']:.1f} s)",
            markup=False,
            highlight=False,
        )

    side = Side("A/A")
    outcome = run_ab(aa_cfg, 1, out, side, side, gpus, on_round, step_s)
    changes = [float(r["change_log"]) for r in outcome.rounds]
    if len(changes) < 2:
        raise RunFailedError(
            f"A/A: {len(changes)} round in the doctor's {DOCTOR_AB_SECONDS:g} s (it took "
            f"{outcome.seconds:.0f} s): a spread needs 2; shorten the rounds ([gate.ab] steps, "
            "min_measured_s)"
        )
    saved = read_json(out / "ab" / "ws1" / AB_FILE)
    if layout := saved.get("layout"):  # how the two sides shared the machine (gate.ab.layout)
        console.print(f"layout: {layout.get('name')} ({layout.get('why')})", markup=False, highlight=False)
    return {
        "workload": cfg.bench.workload,
        "workload_args": cfg.bench.workload_args,
        "world_size": 1,
        "requested_rounds": rounds,
        "rounds": len(changes),
        "steps_per_round": steps,
        "step_s": step_s,
        "seconds": outcome.seconds,
        "seconds_per_round": outcome.seconds / len(changes),
        "round_changes_pct": [100 * c for c in changes],
        "mean_change_pct": 100 * statistics.fmean(changes),
        "sd_log": statistics.stdev(changes),
        "round_sd_pct": 100 * statistics.stdev(changes),
        # How well so few rounds know the spread (chi-square, 90%): more --rounds narrow it.
        "round_sd_pct_range": [100 * v for v in sd_range(statistics.stdev(changes), len(changes))],
        "layout": saved.get("layout"),
    }


def sd_range(sd: float, n: int, level: float = SD_RANGE_LEVEL) -> tuple[float, float]:
    """The `level` interval of a normal spread estimated as `sd` from `n` values: sd·sqrt((n-1)/χ²)."""
    k = n - 1
    tail = (1 - level) / 2
    return sd * math.sqrt(k / _chi2_quantile(1 - tail, k)), sd * math.sqrt(k / _chi2_quantile(tail, k))


def _chi2_quantile(p: float, k: int) -> float:
    # Exact for 2 degrees of freedom (an exponential); Wilson and Hilferty's cube otherwise, within 4% of
    # the exact bound from 3 degrees of freedom (4 rounds) and within 1% from 6.
    if k == 2:
        return -2.0 * math.log1p(-p)
    z = statistics.NormalDist().inv_cdf(p)
    return float(k * (1 - 2 / (9 * k) + z * math.sqrt(2 / (9 * k))) ** 3)


def device_lines(probe: dict[str, Any]) -> list[str]:
    """The probe for the terminal, one figure a line."""
    if probe["type"] == "cpu":
        load, matmul = probe["load"], probe["matmul_fp32"]
        quota = "no quota" if probe["quota_cores"] is None else f"quota {probe['quota_cores']:g} CPUs"
        busy = " (busy: other processes compete with the rounds)" if load["busy"] else ""
        return [
            f"cpu: {probe['usable_cores']} usable cores (affinity {probe['affinity_cores']}, {quota})",
            f"load average: {load['load_1m']:.2f} {load['load_5m']:.2f} {load['load_15m']:.2f} over "
            f"{load['usable_cores']} usable cores{busy}",
            f"fp32 matmul {matmul['n']}³ on {matmul['threads']} threads: {1000 * matmul['best_tflops']:.0f} "
            f"GFLOP/s best, {1000 * matmul['median_tflops']:.0f} median",
        ]
    matmul, nvml = probe["matmul_bf16"], probe["nvml"]
    lines = [
        f"cuda: {probe['name']} (compute capability {probe['compute_capability']}, {probe['device_count']} "
        f"visible), torch CUDA {probe['torch_cuda']}, NCCL {probe['nccl'] or 'absent'}",
    ]
    if nvml.get("available"):
        gpu, state = nvml["gpu"], nvml["state"]
        lines.append(
            f"nvml: driver {nvml['driver']}, {gpu.get('name')} {gpu.get('uuid')}, compute mode "
            f"{gpu.get('compute_mode')}, power limit {gpu.get('power_limit_w')} W"
        )
        reasons = state.get("throttle_reasons")
        lines.append(
            f"now: SM {state.get('sm_clock_mhz')} of {gpu.get('max_sm_clock_mhz')} MHz, "
            f"{state.get('power_w')} W, {state.get('temperature_c')} °C, clock event reasons: "
            f"{', '.join(reasons) if reasons else 'none'}"
        )
    else:
        lines.append(f"NVML absent: {nvml.get('why')}")
    share = matmul["share_of_peak"]
    against = (
        f" = {share:.0%} of the datasheet's {matmul['peak_tflops']:.0f}"
        if share is not None
        else " (no datasheet peak known for this device)"
    )
    lines.append(
        f"bf16 matmul {matmul['n']}³: {matmul['best_tflops']:.0f} TFLOP/s best{against}, "
        f"{matmul['median_tflops']:.0f} median"
    )
    return lines


def plan_lines(plan: power.Plan, sd_note: str = "") -> list[str]:
    """The planner's sentence and its table of looks, as the terminal shows them."""
    header = f"{'look':>4}  {'rounds':>6}  {'time':>9}  {'δ':>6}  {'FAILs from':>10}  {'PASSes below':>12}"
    lines = [
        f"A/A: round sd {100 * plan.sd_log:.2f}%{sd_note}, {plan.seconds_per_round:.1f} s per round; "
        f"{plan.rounds_in_budget} rounds fit in gate.ab.max_seconds ({power.duration(plan.max_seconds)})",
        header,
    ]
    for i, look in enumerate(plan.looks, 1):
        where = "" if look.in_budget else "  past the budget"
        mark = "  <- first PASS of unchanged code" if look is plan.first_resolving else ""
        lines.append(
            f"{i:>4}  {look.rounds:>6}  {power.duration(look.seconds):>9}  {look.resolution_pct:>5.1f}%  "
            f"{look.fail_at_pct:>9.1f}%  {look.pass_below_pct:>11.1f}%{where}{mark}"
        )
    lines.append(plan.sentence())
    return lines
