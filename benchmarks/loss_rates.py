"""Error rates of the loss rows (benchgate/checks/loss.py) on simulated autocorrelated losses.

    python benchmarks/loss_rates.py [--trials 2000] [--steps 60]

Consecutive training losses are autocorrelated; this script draws AR(1) noise (phi 0, 0.5, 0.8, the
stationary spread SIGMA, about what the test workload `sleepy` shows step to step) and counts how often
each rule calls it a change, with the trial count and a Wilson 95% interval:

    slope, flat loss       the no-baseline rule (FAIL where the slope's interval lies above
                           gate.tolerances.loss_slope_max = 0) on a loss with no trend: every FAIL is false.
                           before: the i.i.d. interval (stats.linear_slope) the row used;
                           Newey-West: the Bartlett-kernel HAC interval with Andrews' AR(1) bandwidth, for
                           comparison; after: the shipped row (loss_slope_check, hac.hac_slope)
    slope vs baseline      both runs learn at TREND per step; the shipped row against a baseline, paired
                           (the same batches: shared noise plus a small noise of its own) and unpaired
                           (different warmups: independent noise); false FAIL at the same speed, and the
                           rate it catches a run whose gradient is scaled by 0.3 (its loss falls 30% as fast)
    A/B paired loss        the step-by-step difference B - A of one A/B's sides (hac.hac_mean): how often
                           its interval lies above 0 where the difference has mean 0 (its level; nominal
                           2.5%), and the shipped rule's FAIL (gate.tolerances.loss_increase_pct) at +0%
                           and at +2% of the loss

Results go to benchmarks/results/loss-rates.json.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchgate.checks.loss import loss_slope_check
from benchgate.config import Tolerances
from benchgate.kit import hac, stats
from benchgate.kit.files import write_json

sys.path.insert(0, str(Path(__file__).parent))
from _common import wilson  # beside this script

RESULTS = Path(__file__).resolve().parent / "results"
PHIS = (0.0, 0.5, 0.8)
SIGMA = 0.17  # the stationary spread of a step's loss around its trend (sleepy: ~0.17 nats)
TREND = -0.0105  # nats per step: sleepy's measured slope over its first 60 measured steps
LEVEL = 1.1  # sleepy's loss around its measured window
OWN = 0.05  # the noise a paired run has of its own, beyond the batches it shares


def ar1(rng: np.random.Generator, n: int, phi: float, sigma: float) -> np.ndarray:
    """n steps of stationary AR(1) noise with spread `sigma`."""
    innovations = rng.standard_normal(n) * sigma * math.sqrt(1 - phi * phi)
    out = np.empty(n)
    out[0] = rng.standard_normal() * sigma
    for i in range(1, n):
        out[i] = phi * out[i - 1] + innovations[i]
    return out


def newey_west_rises(y: np.ndarray, confidence: float) -> bool:
    """The Bartlett-kernel (Newey-West) HAC interval of the OLS slope with Andrews' AR(1) plug-in bandwidth
    lies above 0: the textbook HAC interval, shown beside the shipped one."""
    n = y.size
    dx = np.arange(n) - (n - 1) / 2
    sxx = float(dx @ dx)
    slope = float(dx @ (y - y.mean())) / sxx
    resid = y - y.mean() - slope * dx
    rho = min(max(float(resid[1:] @ resid[:-1]) / float(resid @ resid), -0.97), 0.97)
    alpha = 4 * rho**2 / ((1 - rho) ** 2 * (1 + rho) ** 2)
    bandwidth = min(1.1447 * (alpha * n) ** (1 / 3), n - 1)
    scores = dx * resid
    long_run = float(scores @ scores)
    for lag in range(1, int(bandwidth) + 1):
        long_run += 2 * (1 - lag / (bandwidth + 1)) * float(scores[lag:] @ scores[:-lag])
    stderr = math.sqrt(max(long_run, 0.0) * n / (n - 2)) / sxx
    return slope - stats.t_quantile((1 + confidence) / 2, n - 2) * stderr > 0


def _metrics(losses: np.ndarray, warmup: int = 10) -> dict[str, Any]:
    return {"warmup": warmup, "samples": {"loss": [float(v) for v in losses]}}


def _count(trials: int, draw: Callable[[], bool]) -> dict[str, Any]:
    hits = sum(draw() for _ in range(trials))
    low, high = wilson(hits, trials)
    return {"rate": hits / trials, "hits": hits, "trials": trials, "wilson_95": [low, high]}


def _line(label: str, result: dict[str, Any]) -> str:
    low, high = result["wilson_95"]
    return (
        f"  {label:<40} {result['hits']:>5}/{result['trials']} = {100 * result['rate']:5.1f}% "
        f"[{100 * low:.1f}, {100 * high:.1f}]"
    )


def measure(trials: int, steps: int, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    tol = Tolerances()
    t = np.arange(steps)
    rows: dict[str, Any] = {}

    def flat() -> np.ndarray:
        return LEVEL + ar1(rng, steps, phi, SIGMA)

    def learning(scale: float, shared: np.ndarray | None) -> np.ndarray:
        noise = shared + ar1(rng, steps, phi, OWN) if shared is not None else ar1(rng, steps, phi, SIGMA)
        return LEVEL + scale * TREND * t + noise

    def slower(scale: float, paired: bool) -> bool:
        shared = ar1(rng, steps, phi, SIGMA) if paired else None
        base = learning(1.0, shared)
        cur = learning(scale, shared)
        row = loss_slope_check(1, _metrics(cur), _metrics(base, 10 if paired else 5), tol)
        return row.status == "FAIL"

    def ab_pair(increase: float) -> tuple[bool, bool]:
        base = LEVEL + TREND * t + ar1(rng, steps, phi, SIGMA)
        diff = increase * LEVEL + ar1(rng, steps, phi, 0.01 * LEVEL)  # a 1% step-to-step numerics change
        paired = hac.hac_mean(diff)
        fail = 100 * paired.ci_low / abs(float(base.mean())) > tol.loss_increase_pct
        return paired.ci_low > 0, fail

    for phi in PHIS:
        key = f"phi={phi:g}"
        print(f"phi {phi:g}, {steps} steps, {trials} trials", flush=True)
        rows[key] = {
            "flat_iid_before": _count(trials, lambda: stats.linear_slope(flat()).ci_low > 0),
            "flat_newey_west": _count(trials, lambda: newey_west_rises(flat(), tol.confidence)),
            "flat_hac_after": _count(
                trials, lambda: loss_slope_check(1, _metrics(flat()), None, tol).status == "FAIL"
            ),
            "same_speed_paired": _count(trials, lambda: slower(1.0, True)),
            "same_speed_unpaired": _count(trials, lambda: slower(1.0, False)),
            "gradient_0.3_paired": _count(trials, lambda: slower(0.3, True)),
            "gradient_0.3_unpaired": _count(trials, lambda: slower(0.3, False)),
            "ab_mean_above_0_at_0": _count(trials, lambda: ab_pair(0.0)[0]),
            "ab_fail_at_+0%": _count(trials, lambda: ab_pair(0.0)[1]),
            "ab_fail_at_+2%": _count(trials, lambda: ab_pair(0.02)[1]),
        }
        for label, result in rows[key].items():
            print(_line(label, result), flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=60, help="measured steps per run (bench.steps)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS / "loss-rates.json")
    args = parser.parse_args(argv)
    started = time.monotonic()
    rows = measure(args.trials, args.steps, args.seed)
    write_json(
        args.out,
        {
            "command": " ".join(["python benchmarks/loss_rates.py", *sys.argv[1:]]),
            "steps": args.steps,
            "sigma": SIGMA,
            "trend": TREND,
            "own_noise": OWN,
            "confidence": Tolerances().confidence,
            "loss_slope_slower_pct": Tolerances().loss_slope_slower_pct,
            "loss_increase_pct": Tolerances().loss_increase_pct,
            "seconds": time.monotonic() - started,
            "rates": rows,
        },
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
