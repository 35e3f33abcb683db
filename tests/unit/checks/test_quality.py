"""The eval's rows (checks/quality.py): perplexity by seeds, probes by the exact paired flip test, and
the eval stage's choice of seeds (measure/seeds.py), on eval.json records shaped as stage_eval writes them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchgate.checks.quality import eval_checks, judge_perplexity
from benchgate.config import Tolerances, load_config
from benchgate.errors import BaselineError
from benchgate.kit.stats import sign_test_p
from benchgate.measure.seeds import StoredEval, plan_more_seeds
from benchgate.results.bundle import Bundle
from benchgate.results.eval_seeds import first_seed_out_of_band, flip_test, pair_seeds, seed_records

SETTINGS = {"enabled": True, "train_steps": 400, "seq_len": 64, "batch_size": 16, "threads": 1, "seed": 1234}
ITEMS = 16


def hits(correct: list[int]) -> list[bool]:
    """16 items, those numbered in `correct` right."""
    return [i in correct for i in range(ITEMS)]


def probe(items: list[bool]) -> dict[str, Any]:
    return {"accuracy_pct": 100.0 * sum(items) / len(items), "items": items}


def evaluation(*seeds: tuple[float, dict[str, list[bool]]], more: str = "") -> dict[str, Any]:
    """An eval.json as stage_eval writes it: the first seed's figures at the top, every seed in `seeds`."""
    entries = [
        {
            "seed": 1234 + k,
            "perplexity": ppl,
            "final_train_loss": 0.6,
            "wall_s": 30.0,
            "probes": {name: probe(items) for name, items in probes.items()},
        }
        for k, (ppl, probes) in enumerate(seeds)
    ]
    first_probes = {
        name: {**probe(items), "correct": sum(items), "total": ITEMS, "outputs": ["x"] * ITEMS}
        for name, items in seeds[0][1].items()
    }
    return {
        "schema_version": 1,
        "stage": "eval",
        "workload": "gpt-tiny",
        "settings": SETTINGS,
        "device": "cpu",
        "final_train_loss": 0.6,
        "perplexity": seeds[0][0],
        "heldout_tokens": 12000,
        "probes": first_probes,
        "seeds": entries,
        "more_seeds": more or "one seed: seed 1234 is within tolerance of the stored baseline's",
        "wall_s": 30.0 * len(seeds),
    }


def rows(base: dict[str, Any], current: dict[str, Any], tol: Tolerances | None = None) -> dict[str, Any]:
    checks = eval_checks(
        Bundle(Path("/runs/base"), {"machine_profile": "p"}, eval=base),
        Bundle(Path("/runs/cur"), {"machine_profile": "p"}, eval=current),
        tol or Tolerances(),
        [],
    )
    return {c.name: c for c in checks}


def test_sign_test_is_the_exact_binomial_tail() -> None:
    assert sign_test_p(4, 0) == 1 / 16
    assert sign_test_p(5, 0) == 1 / 32
    assert sign_test_p(3, 3) == 42 / 64  # P(X >= 3), X ~ Bin(6, 1/2)
    assert sign_test_p(0, 0) == 1.0
    with pytest.raises(ValueError, match="worse=-1"):
        sign_test_p(-1, 2)


def test_the_gpt2_extra_draw_case_passes() -> None:
    """A candidate that drew the random stream once more: count 25% -> 0% (4 items correct->wrong, none
    back), facts 31.2% -> 25% (2 lost, 1 gained), perplexity -0.22%. The deterministic thresholds FAILed
    it (exit 1); four one-way flips of 16 items are p = 1/16, no evidence at 95%."""
    base = evaluation((20.0, {"count": hits([0, 1, 2, 3]), "facts": hits([0, 1, 2, 3, 4])}))
    cur = evaluation((20.0 * (1 - 0.0022), {"count": hits([]), "facts": hits([0, 1, 2, 9])}))
    got = rows(base, cur)
    assert {name: c.status for name, c in got.items()} == {
        "perplexity (held-out)": "PASS",
        "probe count accuracy": "PASS",
        "probe facts accuracy": "PASS",
    }
    count = got["probe count accuracy"]
    assert (count.baseline, count.current, count.change) == (25.0, 0.0, -25.0)
    assert "4 items correct->wrong, 0 wrong->correct of 16 on one seed" in count.note
    assert "p=0.0625" in count.note


def test_a_probe_fails_on_significant_flips_beyond_tolerance() -> None:
    base = evaluation((20.0, {"facts": hits([0, 1, 2, 3, 4, 5, 6, 7])}))
    cur = evaluation((20.0, {"facts": hits([0, 1])}))  # 6 lost, none gained: p = 1/64
    row = rows(base, cur)["probe facts accuracy"]
    assert row.status == "FAIL"
    assert row.change == pytest.approx(-37.5)
    # Significant, but within a tolerance of 40 pts: both are needed.
    assert rows(base, cur, Tolerances(probe_accuracy_drop_points=40))["probe facts accuracy"].status == "PASS"


def test_flips_are_pooled_over_one_to_one_seed_pairs() -> None:
    """3 lost of 16 on one pair is p = 1/8; the same on each of three pairs is 9 of 9 flips, p = 1/512.
    Against a baseline of one seed only the first seeds pair: the others would share its luck."""
    three_base = seed_records(evaluation(*[(20.0, {"facts": hits([0, 1, 2, 3])})] * 3))
    three = seed_records(evaluation(*[(20.0, {"facts": hits([3])})] * 3))
    pooled = flip_test(pair_seeds(three_base, three), "facts", Tolerances())
    single = flip_test(pair_seeds(three_base[:1], three), "facts", Tolerances())
    assert single is not None and pooled is not None
    assert (single.worse, single.better, single.pairs, single.p_value, single.fails) == (
        3,
        0,
        1,
        1 / 8,
        False,
    )
    assert (pooled.worse, pooled.pairs, pooled.p_value, pooled.fails) == (9, 3, 1 / 512, True)


def test_the_probes_share_one_false_alarm_rate() -> None:
    """5 of 16 lost, none gained (p = 1/32) FAILs one probe at 95%, not one of three (Bonferroni:
    each at 5%/3); 6 lost (p = 1/64) FAILs either way."""
    base = evaluation((20.0, {p: hits([0, 1, 2, 3, 4, 5]) for p in ("count", "echo", "facts")}))
    cur = evaluation((20.0, {"count": hits([5]), "echo": hits([0, 1, 2, 3, 4, 5]), "facts": hits([])}))
    got = rows(base, cur)
    assert (got["probe count accuracy"].status, got["probe facts accuracy"].status) == ("PASS", "FAIL")
    assert "(significant below 0.0167)" in got["probe count accuracy"].note
    alone = flip_test(pair_seeds(seed_records(base), seed_records(cur)), "count", Tolerances())
    assert alone is not None and alone.fails


def test_seeds_pair_one_to_one_by_seed_else_in_order() -> None:
    base = seed_records(evaluation((20.0, {}), (21.0, {})))
    cur = seed_records(evaluation((20.0, {}), (21.0, {}), (22.0, {})))
    assert [(b.seed, c.seed) for b, c in pair_seeds(base, cur)] == [(1234, 1234), (1235, 1235)]
    assert [(b.seed, c.seed) for b, c in pair_seeds(base, cur[2:])] == [(1234, 1236)]


def test_a_baseline_without_item_records_leaves_probes_info() -> None:
    base = evaluation((20.0, {"facts": hits([0, 1, 2, 3, 4])}))
    del base["seeds"]  # an eval.json from before seeds and per-item records
    for entry in base["probes"].values():
        del entry["items"]
    row = rows(base, evaluation((20.0, {"facts": hits([])})))["probe facts accuracy"]
    assert row.status == "INFO"
    assert "no per-item record" in row.note


def test_perplexity_first_seed_in_band_passes_alone() -> None:
    row = rows(evaluation((20.0, {})), evaluation((20.2, {})))["perplexity (held-out)"]
    assert (row.status, row.change) == ("PASS", pytest.approx(1.0))
    assert row.note == "seed 1234 within tolerance"


def test_perplexity_one_seed_each_out_of_band_is_unknown_and_says_why() -> None:
    why = "one seed: no stored baseline for p/gpt-tiny in .benchgate/baselines"
    row = rows(evaluation((20.0, {})), evaluation((20.5, {}), more=why))["perplexity (held-out)"]
    assert row.status == "UNKNOWN"
    assert "no seed-to-seed spread" in row.note and why in row.note


def test_perplexity_by_seeds_passes_seed_noise_and_fails_a_real_regression() -> None:
    """The 5 seeds measured for gpt-tiny (docs/benchmarks.md) spread ~2%: a neutral candidate whose
    first seed came out +2.5% passes on its three seeds; one 8% worse on every seed fails."""
    base = seed_records(evaluation((1.7050, {})))
    neutral = seed_records(evaluation((1.7476, {}), (1.7338, {}), (1.6727, {})))
    worse = seed_records(evaluation(*[(1.08 * p, {}) for p in (1.7338, 1.7050, 1.6727)]))
    judged = judge_perplexity(base, neutral, Tolerances())
    assert judged.status == "PASS"
    assert judged.ci_low_pct is not None and judged.ci_low_pct < 0 < judged.change_pct < 1.5
    assert judge_perplexity(base, worse, Tolerances()).status == "FAIL"


def test_perplexity_mean_beyond_tolerance_within_noise_warns() -> None:
    base = seed_records(evaluation((1.70, {})))
    noisy = seed_records(evaluation((1.76, {}), (1.70, {}), (1.74, {})))  # mean +2.4%, sd ~1.8%
    result = judge_perplexity(base, noisy, Tolerances())
    assert result.status == "WARN"
    assert "within the seeds' noise" in result.note


def test_first_seed_out_of_band_names_each_reason() -> None:
    base = evaluation((20.0, {"count": hits([0, 1, 2, 3, 4, 5]), "facts": hits([0])}))
    first = seed_records(evaluation((20.5, {"count": hits([]), "facts": hits([])})))[0]
    said = first_seed_out_of_band(base, first, Tolerances()).split("; ")
    assert said[0] == "perplexity +2.50% (tolerance 1.5%)"
    assert said[1].startswith("probe count -37.5 pts (6 items correct->wrong, 0 wrong->correct of 16")
    assert len(said) == 3  # the flip test's own "; " inside the count reason: facts lost one item only
    assert first_seed_out_of_band(base, seed_records(base)[0], Tolerances()) == ""


def test_a_seed_that_learned_many_items_is_no_regression_of_the_others() -> None:
    """The measured A/A case: one of 5 gpt-tiny seeds learned 11 facts of 16, the others 4 to 6. With
    it as the baseline, a candidate's first seed loses 11 and gains 2 (the flip test alone FAILs it);
    over the candidate's three seeds the drop is within the seeds' noise. Every seed at 0 still FAILs."""
    same = {"count": hits([0, 1, 2, 3]), "echo": hits([])}  # the eval's three probes share 5%
    base = evaluation((20.0, {**same, "facts": hits(list(range(11)))}))
    lucky = [hits([11, 12]), hits([0, 1, 3, 4, 5, 12]), hits([2, 3, 4, 13, 14, 15])]
    cur = evaluation(*[(20.0, {**same, "facts": items}) for items in lucky])
    row = rows(base, cur)["probe facts accuracy"]
    assert row.status == "PASS"
    assert "11 items correct->wrong, 2 wrong->correct of 16 on one seed" in row.note
    assert "over 3 seeds against 1" in row.note and "within the seeds' noise" in row.note
    broken = evaluation(*[(20.0, {**same, "facts": hits([])})] * 3)
    assert rows(base, broken)["probe facts accuracy"].status == "FAIL"


def test_a_malformed_seed_record_names_the_field_and_value() -> None:
    bad = evaluation((20.0, {}), (20.0, {}))
    bad["seeds"][1]["perplexity"] = "high"
    with pytest.raises(BaselineError, match=r"seeds\[1\]\.perplexity: got 'high'"):
        seed_records(bad)
    bad["seeds"][1]["perplexity"] = 20.0
    bad["seeds"][1]["probes"] = {"facts": {"accuracy_pct": 0.0, "items": [1, 0]}}
    with pytest.raises(BaselineError, match=r"seeds\[1\]\.probes\.facts\.items: got \[1, 0\]"):
        seed_records(bad)


def _first(ppl: float, probes: dict[str, list[bool]]) -> dict[str, Any]:
    return {"perplexity": ppl, "probes": {name: probe(items) for name, items in probes.items()}}


def test_more_seeds_run_only_when_the_first_is_out_of_band() -> None:
    config = load_config(overrides={"eval.seeds": 3})
    stored = StoredEval(evaluation((20.0, {"facts": hits([0, 1])})), where="/store/p/gpt-tiny/v1")
    settings = {k: v for k, v in config.eval.model_dump(mode="json").items() if k != "seeds"}
    stored.evaluation["settings"] = settings  # type: ignore[index]
    in_band = plan_more_seeds(config, _first(20.1, {"facts": hits([0, 1])}), stored, settings, "cpu")
    assert (in_band.extra, in_band.why) == (
        [],
        "one seed: seed 1234 is within tolerance of the stored baseline's",
    )
    out = plan_more_seeds(config, _first(21.0, {"facts": hits([0, 1])}), stored, settings, "cpu")
    assert out.extra == [1235, 1236]
    assert out.why.startswith(
        "3 seeds: seed 1234 is out of band of the stored baseline's (1 seed): perplexity +5"
    )
    other = plan_more_seeds(config, _first(21.0, {}), stored, {**settings, "train_steps": 1}, "cpu")
    assert other.extra == [] and "other settings or device" in other.why
    missing = plan_more_seeds(
        config, _first(21.0, {}), StoredEval(None, "no stored baseline"), settings, "cpu"
    )
    assert (missing.extra, missing.why) == ([], "one seed: no stored baseline")
