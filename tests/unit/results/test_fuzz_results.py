"""Fuzzing the result-bundle loader (benchgate.results.bundle) and the readers behind `benchgate compare`.

Each result file of a real run (env.json, metrics-ws<N>.json, eval.json and history.json, written once
by benchgate's own code: the env stage, the bench worker on gpt-tiny, the eval, two promotions into a
baseline store) is replaced by arbitrary JSON, by arbitrary bytes, or by itself with one field
deleted, retyped or set to an extreme value. Loading must then give either a bundle that compare, the
report, the figures and the baseline store all handle, or a BadInputError (exit 2) whose message names
the file and the field. Any other exception is a defect.

Hypothesis runs derandomized: the examples are a fixed function of each test, so CI checks the same
inputs on every run, a failure reproduces on any machine, and a change that does not touch the loader
never fails by chance. To explore further locally, raise max_examples or drop derandomize.
"""

from __future__ import annotations

import copy
import io
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from harness import make_config
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

from benchgate.checks.compare import compare
from benchgate.checks.stage import write_comparison
from benchgate.checks.tables import markdown, print_verdict
from benchgate.config import RunConfig, Tolerances
from benchgate.errors import EXIT_BAD_INPUT, BadInputError
from benchgate.kit.files import read_json, write_json
from benchgate.measure.bench import run_worker
from benchgate.measure.evaluate import stage_eval
from benchgate.measure.stage import stage_env
from benchgate.publish.policy import should_update_baseline
from benchgate.results.bundle import Bundle, load_bundle
from benchgate.results.comparison import Comparison
from benchgate.results.figures import run_figures
from benchgate.store.baseline import baseline_location, find_baseline, save_baseline

FILES = ("env.json", "metrics-ws1.json", "metrics-ws2.json", "eval.json", "history.json")
FUZZ = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
FieldPath = tuple[str | int, ...]  # a field of a JSON document: its keys and list indexes


# ---------------------------------------------------------------- a real bundle, made once


@dataclass(frozen=True)
class Real:
    """The real baseline directory, its files parsed, and it loaded (short repr: hypothesis prints it)."""

    directory: Path
    documents: dict[str, Any]
    bundle: Bundle
    config: RunConfig
    variants: Path  # where the damaged copies go: on the same file system, so they can link

    def __repr__(self) -> str:
        return f"Real({self.directory})"


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Real:
    """A real baseline version directory: env.json (the env stage), metrics-ws1.json (the bench worker
    torchrun runs on each rank, run here as the single rank of ws=1 to keep this test fast), metrics-ws2.json
    (ws1's file as a ws=2 run records itself), eval.json (the eval stage), and the baseline.json and
    history.json of two promotions into a baseline store."""
    root = tmp_path_factory.mktemp("fuzz-real")
    out = root / "run"
    config = make_config(
        root,
        bench={
            "workload": "benchgate.workloads.gpt:make_workload",
            "workload_args": {"size": "tiny"},
            "steps": 4,
            "warmup": 1,
            "device": "cpu",  # a GPU host makes the same files, with GPU fields; this test needs none
        },
        # One eval thread: two would fight the other work on a busy 2-core host and take 10x longer.
        eval={"enabled": True, "train_steps": 2, "threads": 1},
    )
    stage_env(out)
    threads = torch.get_num_threads()
    try:
        ws1 = run_worker(config, out / "metrics-ws1.json")
    finally:
        torch.set_num_threads(threads)  # the worker sets its rank's thread count process-wide
    assert ws1 is not None
    stage_eval(config, out / "eval.json")
    write_json(
        out / "metrics-ws2.json",
        ws1 | {"world_size": 2, "tokens_per_step_global": 2 * ws1["tokens_per_step_per_rank"]},
    )
    save_baseline(load_bundle(out), root / "store", "fuzz: first")
    directory = save_baseline(load_bundle(out), root / "store", "fuzz: second").resolve()
    documents = {name: read_json(directory / name) for name in FILES}
    return Real(directory, documents, load_bundle(directory), config, root / "variants")


def test_the_real_bundle_has_every_file_and_every_reader_handles_it(real: Real) -> None:
    assert sorted(p.name for p in real.directory.iterdir()) == sorted([*FILES, "baseline.json"])
    assert sorted(real.bundle.metrics) == [1, 2]
    assert real.bundle.workload == "gpt-tiny"
    assert real.bundle.eval is not None and set(real.bundle.eval["probes"]) == {"count", "echo", "facts"}
    assert len(real.bundle.history) == 2
    exercise_readers(real.bundle, real)


# ---------------------------------------------------------------- the property


def variant(real: Real, name: str, content: bytes) -> tuple[Path, Path]:
    """A copy of the real bundle with `name` replaced by `content`; returns (directory, that file)."""
    real.variants.mkdir(exist_ok=True)
    directory = Path(tempfile.mkdtemp(dir=real.variants))
    # Links, not copies (faster); the fuzzed file is a new file, so the real one is never written.
    shutil.copytree(real.directory, directory, dirs_exist_ok=True, copy_function=os.link)
    (directory / name).unlink()
    (directory / name).write_bytes(content)
    return directory, directory / name


def load_or_refuse(directory: Path, file: Path, field: str | None) -> Bundle | None:
    """load_bundle(directory): a bundle, or None after checking that the refusal is a BadInputError
    (exit 2) naming `file` and, where one field was damaged, `field` (its top-level key)."""
    try:
        return load_bundle(directory)
    except BadInputError as e:
        message = str(e)
        assert e.exit_code == EXIT_BAD_INPUT
        assert message.startswith(f"{file}: "), f"the message does not start with {file}: {message}"
        if field is not None:
            assert field in message, f"the message does not name the field {field!r}: {message}"
        assert "\n" not in message and len(message) < 1000, f"not a one-line message: {message!r}"
        return None


def exercise_readers(bundle: Bundle, real: Real) -> None:
    """What `benchgate compare`, the report, the figures and the baseline store do with a loaded bundle,
    as the current run and as the baseline: each works, or refuses with a BadInputError naming a run
    (a baseline of another profile or precision)."""
    comparisons = []
    for base, current in ((bundle, bundle), (None, bundle), (real.bundle, bundle), (bundle, real.bundle)):
        try:
            comparison = compare(base, current, Tolerances())
        except BadInputError as e:
            assert any(str(run.path) in str(e) for run in (base, current) if run is not None), str(e)
            continue
        markdown(comparison).encode("utf-8")  # compare.md
        json.dumps(comparison.to_dict())  # compare.json
        figures = run_figures(current, comparison)
        assert all(isinstance(v, float) and math.isfinite(v) for v in figures.values()), figures
        should_update_baseline(real.config, current.env, comparison)
        comparisons.append(comparison)
    with tempfile.TemporaryDirectory(prefix="bg-readers-") as tmp:
        scratch = Path(tmp)
        if comparisons:  # the files and the terminal once per bundle: rich and fsync are the slow readers
            print_verdict(comparisons[0], Console(file=io.StringIO(), width=200))
            write_comparison(scratch, comparisons[0])
            assert Comparison.from_dict(read_json(scratch / "compare.json")) == comparisons[0]
        store = scratch / "store"
        location = save_baseline(bundle, store, "fuzz")
        assert location == baseline_location(store, bundle.machine_profile, str(bundle.workload))
        assert location.resolve().is_relative_to(store.resolve())
        found = find_baseline(store, bundle.machine_profile, str(bundle.workload))
        assert found is not None
        assert (found.env, found.metrics, found.eval) == (bundle.env, bundle.metrics, bundle.eval)


def check(real: Real, name: str, content: bytes, field: str | None = None) -> None:
    directory, file = variant(real, name, content)
    try:
        bundle = load_or_refuse(directory, file, field)
        if bundle is not None:
            exercise_readers(bundle, real)
    finally:
        shutil.rmtree(directory)


# ---------------------------------------------------------------- strategies

# What a hand edit or a broken writer leaves in a field: each is outside some field's type or range.
EXTREMES = [
    *(None, True, False, 0, -1, 2**31, 2**63, -(2**63) - 1, 10**400),
    *(0.0, -0.0, 5e-324, 1e-300, 1e308, -1e308, math.nan, math.inf, -math.inf),
    *("", "1.5", "NaN", "../..", "a/b", "[/x] markup", "\x00", "\ud800", " main", "x" * 5000),
    *([], [1], [0.1, "x"], {}, {"": None}),
]
# Keys the readers look for, so that generated objects sometimes have the right shape with bad values.
KEYS = [
    *("machine_profile", "workload", "world_size", "precision", "tokens_per_step_global", "samples"),
    *("memory", "peak_bytes", "step_time_s", "tokens_per_s", "loss", "reference_s", "mfu", "dense_6n"),
    *("attention_aware", "loss_slope", "slope", "system", "t_s", "series", "schema_version", "git"),
    *("counted", "flops_per_token"),
    *("commit", "branch", "dirty", "gpu", "count", "skipped", "perplexity", "probes", "accuracy_pct"),
    *("runs", "p50", "created_unix", "1", "2", "device", "threads_per_rank", "steps", "warmup"),
]
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(10**300), max_value=10**300)
    | st.floats()  # NaN and +-inf included: json writes them as NaN/Infinity, which json reads back
    | st.text(max_size=20)
    | st.sampled_from(EXTREMES)
)
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=6)
        | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=8), children, max_size=6)
    ),
    max_leaves=30,
)
RAW = [
    b"",
    b"\xff\xfe{}",  # not UTF-8
    b"[" * 100_000,  # deeper than the JSON parser recurses
    b"1" * 5000,  # an integer past Python's 4300-digit conversion limit
    b'{"machine_profile": "\\ud800"}',  # half of a UTF-16 surrogate pair
    b"NaN",
    b"null",
]


def dumps(value: Any) -> bytes:
    return json.dumps(value).encode()


def fields_of(value: Any, prefix: FieldPath = ()) -> Iterator[FieldPath]:
    """Every field of a parsed JSON document (the document itself first)."""
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from fields_of(item, (*prefix, key))
    elif isinstance(value, list):
        for i, item in enumerate(value[:3]):  # the first few samples stand for all
            yield from fields_of(item, (*prefix, i))


def mutated(document: Any, field: FieldPath, value: Any, *, delete: bool = False) -> Any:
    """A copy of `document` with `field` set to `value`, or deleted."""
    if not field:
        return value
    document = copy.deepcopy(document)
    parent = document
    for step in field[:-1]:
        parent = parent[step]
    if delete:
        del parent[field[-1]]
    else:
        parent[field[-1]] = value
    return document


def dotted(document: Any, text: str) -> FieldPath:
    """'samples.loss.0' as a field of `document` (a number indexes a list, a key otherwise)."""
    field: list[str | int] = []
    node = document
    for key in text.split("."):
        step: str | int = int(key) if isinstance(node, list) else key
        field.append(step)
        node = node[step]
    return tuple(field)


# ---------------------------------------------------------------- the fuzz tests


@FUZZ
@given(name=st.sampled_from(FILES), value=json_values)
def test_any_json_in_any_result_file_loads_or_is_a_named_exit_2(real: Real, name: str, value: Any) -> None:
    check(real, name, dumps(value))


@FUZZ
@given(name=st.sampled_from(FILES), how=st.sampled_from(["delete", "retype", "extreme"]), data=st.data())
def test_a_real_file_with_a_field_deleted_retyped_or_extreme_loads_or_names_the_field(
    real: Real, name: str, how: str, data: Any
) -> None:
    document = real.documents[name]
    field = data.draw(st.sampled_from(list(fields_of(document))), label="field")
    if how == "delete" and field:
        changed = mutated(document, field, None, delete=True)
    else:
        value = data.draw(st.sampled_from(EXTREMES) if how == "extreme" else json_values, label="value")
        changed = mutated(document, field, value)
    check(real, name, dumps(changed), str(field[0]) if field else None)


@FUZZ
@given(name=st.sampled_from(FILES), data=st.data())
def test_any_bytes_in_a_result_file_load_or_are_a_named_exit_2(real: Real, name: str, data: Any) -> None:
    text = (real.directory / name).read_bytes()
    content = data.draw(
        st.binary(max_size=200)
        | st.integers(0, len(text)).map(lambda n: text[:n])  # cut off mid-write
        | st.tuples(st.integers(0, len(text) - 1), st.integers(0, 255)).map(
            lambda at: text[: at[0]] + bytes([at[1]]) + text[at[0] + 1 :]  # one byte changed
        )
        | st.sampled_from(RAW),
        label="content",
    )
    check(real, name, content)


# ---------------------------------------------------------------- what fuzzing found, one example each


@pytest.mark.parametrize(
    ("name", "field", "value"),
    [
        pytest.param("metrics-ws1.json", "samples.step_time_s.1", "0.1", id="string-sample"),
        pytest.param("metrics-ws1.json", "memory.peak_bytes", 10**400, id="huge-int"),
        pytest.param("metrics-ws1.json", "samples.loss.0", math.nan, id="nan-loss"),
        pytest.param("metrics-ws1.json", "samples.step_time_s.0", 1e-300, id="tiny-step"),
        pytest.param("metrics-ws1.json", "world_size", True, id="bool-world-size"),
        pytest.param("metrics-ws1.json", "mfu", None, id="null-mfu"),
        pytest.param("metrics-ws1.json", "loss_slope", [1], id="list-slope"),
        pytest.param("metrics-ws1.json", "workload", "../../elsewhere", id="workload-leaves-the-store"),
        pytest.param("metrics-ws1.json", "samples.loss", [1.0], id="one-loss-for-four-steps"),
        pytest.param("env.json", "machine_profile", "a\x00b", id="nul-in-profile"),
        pytest.param("env.json", "git", "main", id="string-git"),
        pytest.param("eval.json", "perplexity", "low", id="string-perplexity"),
        pytest.param("eval.json", "probes.facts", 100, id="number-probe"),
        pytest.param("history.json", "runs.0.p50.1.step_time_s", -1.0, id="negative-history-figure"),
        pytest.param("history.json", "runs", {"a": 1}, id="object-runs"),
    ],
)
def test_a_damaged_field_is_an_exit_2_naming_file_field_and_value(
    real: Real, name: str, field: str, value: Any
) -> None:
    document = real.documents[name]
    directory, file = variant(real, name, dumps(mutated(document, dotted(document, field), value)))
    try:
        with pytest.raises(BadInputError) as info:
            load_bundle(directory)
        message = str(info.value)
        named = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in dotted(document, field))
        assert message.startswith(f"{file}: {named[1:]}"), message
        assert repr(value)[:15] in message or isinstance(value, list | dict), message
        assert info.value.exit_code == EXIT_BAD_INPUT
    finally:
        shutil.rmtree(directory)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        pytest.param(b"\xff\xfe{}", "not UTF-8 text (byte 0: invalid start byte)", id="not-utf8"),
        pytest.param(b"[" * 100_000, "not valid JSON (nested too deeply to read)", id="too-deep"),
        pytest.param(b"1" * 5000, "Exceeds the limit (4300 digits)", id="5000-digit-int"),
        pytest.param(
            b'{"machine_profile": "\\ud800"}', "machine_profile: holds a lone surrogate", id="surrogate"
        ),
        pytest.param(b"[1, 2]", "got [1, 2] (expected a JSON object)", id="not-an-object"),
    ],
)
def test_an_unreadable_file_is_an_exit_2_naming_it(real: Real, content: bytes, expected: str) -> None:
    directory, file = variant(real, "env.json", content)
    try:
        with pytest.raises(BadInputError) as info:
            load_bundle(directory)
        assert str(info.value).startswith(f"{file}: ") and expected in str(info.value), str(info.value)
    finally:
        shutil.rmtree(directory)


def test_metrics_files_of_two_workloads_are_refused_naming_both(real: Real) -> None:
    changed = real.documents["metrics-ws2.json"] | {"workload": "other"}
    directory, file = variant(real, "metrics-ws2.json", dumps(changed))
    try:
        with pytest.raises(BadInputError, match="one run benchmarks one workload") as info:
            load_bundle(directory)
        assert str(file) in str(info.value) and str(directory / "metrics-ws1.json") in str(info.value)
    finally:
        shutil.rmtree(directory)


# ---------------------------------------------------------------- the real CLI


@pytest.mark.parametrize(
    ("name", "field", "value"),
    [
        pytest.param("metrics-ws1.json", ("samples", "tokens_per_s"), "fast", id="string-samples"),
        # The message quotes the value, which the terminal must print as text, not as markup.
        pytest.param("env.json", ("machine_profile",), "[/bold] ../..", id="markup-and-a-path"),
    ],
)
def test_benchgate_compare_on_a_garbage_bundle_exits_2_without_a_traceback(
    real: Real, tmp_path: Path, name: str, field: FieldPath, value: str
) -> None:
    run = tmp_path / "run"
    shutil.copytree(real.directory, run)
    write_json(run / name, mutated(real.documents[name], field, value))
    done = subprocess.run(
        [sys.executable, "-m", "benchgate", "compare", str(run), "--baseline-dir", str(tmp_path / "store")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == EXIT_BAD_INPUT, done.stderr
    assert "Traceback" not in done.stderr
    named = ".".join(str(k) for k in field)
    assert f"error: {run / name}: {named}: got {value!r}" in " ".join(done.stderr.split()), done.stderr
    assert not (run / "compare.json").exists()  # nothing judged, nothing written
