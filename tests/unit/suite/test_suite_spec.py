"""suite.toml read and checked (suite/spec.py), and the entries' order, records and exit code
(suite/runner.py) with a gate function that stands in for the pipeline: the pipeline itself is
tests/gate/test_suite.py's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchgate.config import RunConfig
from benchgate.errors import ConfigError, RunFailedError, WorkloadError
from benchgate.kit.files import read_json
from benchgate.kit.progress import Reporter
from benchgate.suite.runner import EntryOutcome, run_entries, suite_exit_code
from benchgate.suite.spec import entry_config, load_suite

GPT = "benchgate.workloads.gpt:make_workload"


def suite_file(tmp_path: Path, text: str, config: str | None = None) -> Path:
    if config is not None:
        (tmp_path / "bench.toml").write_text(config)
    path = tmp_path / "suite.toml"
    path.write_text(text)
    return path


def test_entry_config_layers_suite_config_entry_config_then_workload_variant_name_and_out(
    tmp_path: Path,
) -> None:
    path = suite_file(
        tmp_path,
        '[suite]\nname = "models"\nconfig = "bench.toml"\n'
        f'[[entries]]\nname = "gpt-b4"\nworkload = "{GPT}"\nargs = {{ size = "tiny", lr = 0.01 }}\n'
        'variant = { precision = "bf16", compile = true, batch_size = 4 }\n'
        'config = { bench = { steps = 9, precision = "fp32" }, eval = { enabled = false } }\n',
        config="out = 'ignored'\n[bench]\nsteps = 7\nwarmup = 3\nseed = 5\n[trace]\nenabled = false\n",
    )
    spec = load_suite(path)
    assert spec.name == "models" and spec.config_path == tmp_path / "bench.toml"
    config = entry_config(spec, spec.entries[0], tmp_path / "out", {"tracking.enabled": False})
    bench = config.bench
    assert (bench.steps, bench.warmup, bench.seed) == (9, 3, 5)  # entry over suite config over defaults
    assert bench.precision == "bf16" and bench.compile is True  # the variant over the entry's config
    assert bench.workload == GPT and bench.name == "gpt-b4"
    assert bench.workload_args == {"size": "tiny", "lr": 0.01, "batch_size": 4}
    # The eval trains the variant's model afresh: on the variant's batch size too (and at its precision,
    # bench.precision), or every batch size of a workload would get the one perplexity.
    assert config.eval.batch_size == 4
    assert config.eval.enabled is False and config.trace.enabled is False
    assert config.out == tmp_path / "out" / "gpt-b4" and config.tracking.enabled is False


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[entries]]\nname = 'x'\nworkload = 'm:f'\n", "suite.toml: suite: missing"),
        ("[suite]\nname = 'a b'\n[[entries]]\nname = 'x'\nworkload = 'm:f'\n", "suite.name: got 'a b'"),
        ("[suite]\nname = 's'\ncolour = 1\n", "suite.colour: got 1 (unknown key; expected one of: name, co"),
        ("[suite]\nname = 's'\n", "entries: none"),
        ("[suite]\nname = 's'\n[other]\n", "other: unknown table"),
        ("[suite\nname = 's'\n", "is not valid TOML"),
        ("[suite]\nname = 's'\nconfig = 'missing.toml'\n[[entries]]\nname = 'x'\nworkload = 'm:f'\n",
         "suite.config: file not found"),
    ],
)  # fmt: skip
def test_a_bad_file_or_suite_table_is_a_config_error_naming_file_and_field(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=r"suite\.toml") as caught:
        load_suite(suite_file(tmp_path, text))
    assert message in str(caught.value)


def test_a_suite_config_file_with_a_bad_value_is_refused_with_its_field(tmp_path: Path) -> None:
    path = suite_file(
        tmp_path,
        "[suite]\nname = 's'\nconfig = 'bench.toml'\n[[entries]]\nname = 'x'\nworkload = 'm:f'\n",
        config="[bench]\nsteps = 1\n",
    )
    with pytest.raises(ConfigError, match=r"suite.config .*bench.toml: bench.steps: got 1"):
        load_suite(path)


def test_each_bad_entry_is_that_entrys_error_naming_it_the_field_and_the_value(tmp_path: Path) -> None:
    path = suite_file(
        tmp_path,
        "[suite]\nname = 's'\n"
        f"[[entries]]\nname = 'ok'\nworkload = '{GPT}'\n"
        f"[[entries]]\nname = 'ok'\nworkload = '{GPT}'\n"
        f"[[entries]]\nname = '../up'\nworkload = '{GPT}'\n"
        f"[[entries]]\nname = 'v'\nworkload = '{GPT}'\nvariant = {{ flash = true }}\n"
        f"[[entries]]\nname = 'p'\nworkload = '{GPT}'\nvariant = {{ precision = 'fp16' }}\n"
        f"[[entries]]\nname = 'b'\nworkload = '{GPT}'\nvariant = {{ batch_size = 0 }}\n"
        f"[[entries]]\nname = 'r'\nworkload = '{GPT}'\nconfig = {{ bench = {{ name = 'other' }} }}\n"
        f"[[entries]]\nworkload = '{GPT}'\n"
        f"[[entries]]\nname = 'c'\nworkload = '{GPT}'\nconfig = {{ bench = {{ steps = 'ten' }} }}\n"
        f"[[entries]]\nname = 'suite.json'\nworkload = '{GPT}'\n",
    )
    spec = load_suite(path)
    errors = [e.error for e in spec.entries]
    # Every entry has a name unique in the suite (suite.json's key): its own where usable, else its place.
    names = [e.name for e in spec.entries]
    assert names == ["ok", "entries[1]", "entries[2]", "v", "p", "b", "r", "entries[7]", "c", "entries[9]"]
    assert errors[0] is None
    assert errors[1] == (
        "entries[1] 'ok': name: got 'ok', the name of entries[0] too (each entry's name keys its own "
        "baseline and results)"
    )
    assert errors[2] is not None and errors[2].startswith("entries[2] '../up': name: got '../up' (")
    assert errors[3] == (
        "entries[3] 'v': variant.flash: got True (unknown key; expected one of: precision, compile, "
        "batch_size)"
    )
    assert errors[4] is not None and errors[4].startswith("entries[4] 'p': variant.precision: got 'fp16' (")
    assert errors[5] is not None and errors[5].startswith("entries[5] 'b': variant.batch_size: got 0 (")
    assert errors[6] == "entries[6] 'r': config.bench.name: set by the entry's name, not in config"
    assert errors[7] == "entries[7]: name: missing"
    assert errors[9] == "entries[9] 'suite.json': name: got 'suite.json' (a file the suite writes)"
    # A per-entry config that does not validate is found when the entry's config is built, still named.
    assert errors[8] is None
    with pytest.raises(ConfigError, match=r"^entries\[8\] 'c': bench.steps: got 'ten'"):
        entry_config(spec, spec.entries[8], tmp_path)


class Recorder:
    """A gate that records what it was given and what suite.json said when it was called."""

    def __init__(self, out: Path, outcomes: dict[str, Any]) -> None:
        self.out, self.outcomes = out, outcomes
        self.seen: list[tuple[str, list[str]]] = []

    def __call__(self, config: RunConfig, reporter: Reporter) -> EntryOutcome:
        name = str(config.bench.name)
        states = [e["state"] for e in read_json(self.out / "suite.json")["entries"]]
        self.seen.append((name, states))
        result = self.outcomes[name]
        if isinstance(result, Exception):
            raise result
        return EntryOutcome(result[0], result[1], config.out)


def test_entries_run_in_order_one_error_does_not_stop_the_next_and_suite_json_follows(
    tmp_path: Path,
) -> None:
    path = suite_file(
        tmp_path,
        "[suite]\nname = 's'\n"
        + "".join(f"[[entries]]\nname = '{n}'\nworkload = '{GPT}'\n" for n in ("a", "b", "c"))
        + "[[entries]]\nname = 'd'\nworkload = 'm:f'\nvariant = { x = 1 }\n",
    )
    out = tmp_path / "out"
    gate = Recorder(
        out,
        {"a": ("FAIL", 1), "b": WorkloadError("bench.workload: cannot import module 'm'"), "c": ("PASS", 0)},
    )
    record = run_entries(load_suite(path), out, gate)
    # suite.json is on disk before each entry runs, with the earlier entries' outcomes in it.
    assert gate.seen == [
        ("a", ["running", "pending", "pending", "error"]),
        ("b", ["done", "running", "pending", "error"]),
        ("c", ["done", "error", "running", "error"]),
    ]
    saved = read_json(out / "suite.json")
    assert saved == record.data and saved["exit_code"] == 2
    a, b, c, d = saved["entries"]
    assert (a["verdict"], a["exit_code"], c["verdict"]) == ("FAIL", 1, "PASS")
    assert b["error"] == "entries[1] 'b': bench.workload: cannot import module 'm'" and b["exit_code"] == 2
    assert d["state"] == "error" and d["out"] == "d" and d["variant"] == {"x": 1}


@pytest.mark.parametrize(
    ("codes", "expected"),
    [([0, 0], 0), ([0, 4], 4), ([4, 1], 1), ([1, 3], 3), ([3, 2, 1], 2), ([None, 0], 0)],
)
def test_the_suite_exit_code_is_bad_input_then_run_failure_then_the_worst_verdict(
    codes: list[int | None], expected: int
) -> None:
    assert suite_exit_code([{"exit_code": c} for c in codes]) == expected


def test_a_run_failure_is_recorded_with_exit_3(tmp_path: Path) -> None:
    path = suite_file(tmp_path, f"[suite]\nname = 's'\n[[entries]]\nname = 'a'\nworkload = '{GPT}'\n")
    gate = Recorder(tmp_path / "out", {"a": RunFailedError("bench ws=1: rank 0 failed: boom")})
    record = run_entries(load_suite(path), tmp_path / "out", gate)
    assert record.data["exit_code"] == 3
    assert record.entries[0]["error"] == "entries[0] 'a': bench ws=1: rank 0 failed: boom"
