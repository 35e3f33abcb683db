"""What each pipeline task does, one function per component, over the task's artifact paths.

A component body (components.py) only imports one of these and passes its paths on; this module is the
launcher half of the task: it reads the input artifacts, calls one core stage, writes the output
artifacts and the figures the KFP UI shows. Imports of heavy stages happen inside the functions so the
light tasks (compare, gate) start without importing torch.

Each body runs inside `task_harness`: a BenchgateError ends the task with its exit code and `error.json`.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

from benchgate.config import RunConfig
from benchgate.errors import EXIT_REGRESSION, EXIT_UNKNOWN, ConfigError
from benchgate.kfp.params import task_stores
from benchgate.kfp.pod_stores import hand_over_baseline, publish_and_keep
from benchgate.kfp.suite_entry import apply_entry, entry_run_key, read_entry
from benchgate.kfp.task_harness import (
    MetricsSink,
    fetch_code_under_test,
    load_setup,
    reporting_errors,
    skipped,
    stage,
    start_task,
)
from benchgate.kfp.trusted import check_setup_config, copy_untrusted
from benchgate.kit.files import read_json, write_json

# Set by `benchgate run` to its --out directory: the gate task then reports the verdict and succeeds,
# and `benchgate run` exits with the verdict's code (see gate_task).
LOCAL_OUT_VARIABLE = "BENCHGATE_LOCAL_OUT"


def run_record(kfp_run_id: str, kfp_run_name: str, suite_entry: str = "") -> dict[str, Any]:
    """run.json: the key this run is logged under in MLflow, the KFP run id (unique per pipeline run),
    with a suite entry's name after it: the entries of a suite share the id (`entry_run_key`)."""
    # Outside KFP (a component function called directly) the placeholders arrive unresolved.
    run_id = "" if kfp_run_id.startswith("{{") else kfp_run_id
    key = run_id or uuid.uuid4().hex
    return {
        "run_key": entry_run_key(key, suite_entry) if suite_entry else key,
        "kfp_run_id": run_id,
        "kfp_run_name": "" if kfp_run_name.startswith("{{") else kfp_run_name,
        "started_unix": time.time(),
        **({"suite_entry": suite_entry} if suite_entry else {}),
    }


def env_task(
    parameters: dict[str, Any],
    repository: str,
    commit: str,
    branch: str,
    base_commit: str,
    kfp_run_id: str,
    kfp_run_name: str,
    setup_dir: str,
    *,
    multi_node: bool = False,
    gpus_per_node: int = 0,
    suite_entry: str = "",
) -> None:
    """Validate the run's parameters into config.json and capture env.json (with the code under test).

    Everything that can fail fast fails here, before any GPU is busy for minutes: the parameters, the
    commits, each world size against this machine's devices, and the workload's contract (its import,
    factory and members, and one real training step: `measure/stage.stage_check_workload`). With
    `multi_node` the largest world size runs across nodes of `gpus_per_node` GPUs, one of which this
    pod holds: that node size is what is checked against this machine. `suite_entry` (one entry of a
    suite, JSON) goes over the parameters (`suite_entry.apply_entry`).
    """
    from benchgate.kfp.baseline_task import WORKLOAD_NAME_FILE
    from benchgate.kfp.params import check_across_nodes, config_from_parameters
    from benchgate.measure.launch import check_world_size
    from benchgate.measure.source import use_source, validate_branch, validate_commit, validate_repository
    from benchgate.measure.stage import stage_check_workload, stage_env
    from benchgate.results.bundle import RUN_FILE

    with reporting_errors("env", setup_dir), stage("env"):
        entry = read_entry(suite_entry) if suite_entry else None
        config = config_from_parameters(**(apply_entry(parameters, entry) if entry else parameters))
        out = Path(setup_dir)
        out.mkdir(parents=True, exist_ok=True)
        source: dict[str, str] = {}
        if repository:
            source["repository"] = validate_repository(repository)
        if commit:
            source["commit"] = validate_commit(commit)
            if not repository:
                raise ConfigError(
                    f"repository: got '' (commit {commit!r} needs the repository it belongs to)"
                )
        base: dict[str, str] = {}
        if base_commit:
            if not repository:
                raise ConfigError(f"repository: got '' (base_commit {base_commit!r} needs its repository)")
            base = {"repository": source["repository"], "commit": validate_commit(base_commit, "base_commit")}
        workspace = out.parent / "workspace"
        root = use_source(source.get("repository", ""), source.get("commit", ""), workspace)
        # With the config, env.json records what A/B holds fixed on both sides (benchgate, packages,
        # bench settings): with every run, and so with every baseline, so the gate can tell when a
        # change is invisible to A/B.
        env = stage_env(
            out,
            cwd=root,
            branch=validate_branch(branch) if branch else None,
            config=config,
            gpus_per_node=gpus_per_node if multi_node else None,
        )
        env["source"] = source
        env["base"] = base
        write_json(out / "env.json", env)
        write_json(out / "config.json", config.model_dump(mode="json"))
        write_json(out / RUN_FILE, run_record(kfp_run_id, kfp_run_name, entry["name"] if entry else ""))
        world_sizes = list(config.bench.world_sizes or [])
        if multi_node:
            check_across_nodes(max(world_sizes), gpus_per_node)
            # The ws=N bench's ranks are on other nodes, gpus_per_node to each, like this one.
            world_sizes = [ws if ws < max(world_sizes) else gpus_per_node for ws in world_sizes]
        for ws in world_sizes:
            check_world_size(ws, config.bench.device, env["gpu"]["count"])
        checked = stage_check_workload(config)
        # For the baseline task, which must not import the workload to learn its stored name.
        write_json(out / WORKLOAD_NAME_FILE, {"workload": checked["workload"]})
        print(
            f"benchgate env: workload {checked['workload']}: contract checked, one training step "
            f"(loss {checked['loss']:.4g}) in {checked['seconds']:.1f} s",
            flush=True,
        )
        # The checkout only served to read its git state and import the workload; every other task
        # fetches its own copy.
        shutil.rmtree(workspace, ignore_errors=True)


def bench_task(
    setup_dir: str, world_size: int, skip_if_one: bool, results_dir: str, figures: MetricsSink
) -> None:
    """Run the benchmark at one world size under torchrun."""
    from benchgate.measure.launch import stage_bench

    with reporting_errors(f"bench ws={world_size}", results_dir):
        config, env, out = start_task(setup_dir, results_dir)
        if skip_if_one and world_size == 1:
            print("benchgate bench: N is 1, so the ws=1 task already ran this world size; skipped")
            return
        fetch_code_under_test(env, out.parent / "workspace")
        with stage(f"bench ws={world_size}", config.bench.steps) as reporter:
            metrics_path = stage_bench(
                config,
                world_size,
                out,
                reporter.advance,
                gpus=env["gpu"]["count"],
                per_launch=env["gpu"].get("per_launch"),
            )
        log_bench_figures(read_json(metrics_path), figures)


def log_bench_figures(metrics: dict[str, Any], figures: MetricsSink) -> None:
    from benchgate.results.figures import bench_figures

    for name, value in bench_figures(metrics).items():
        figures.log_metric(name, value)


def eval_task(
    setup_dir: str, results_dir: str, figures: MetricsSink, baseline_dir: str | None = None
) -> None:
    """Deterministic eval on the bundled shard: eval.json (nothing when eval is disabled).

    `baseline_dir`: the baseline task's artifact, whose store holds the profile's baseline; this task
    runs the code under test and holds no tracking credential, so it reads that store, never MLflow.
    None (a caller without the baseline task): MLflow's baseline is cached first, as before."""
    with reporting_errors("eval", results_dir):
        config, env, out = start_task(setup_dir, results_dir)
        refresh = None
        if baseline_dir is not None:
            from benchgate.kfp.baseline_task import STORE_DIR

            store = Path(baseline_dir) / STORE_DIR
            config = config.model_copy(
                update={"gate": config.gate.model_copy(update={"baseline_dir": store})}
            )
        if skipped("eval", config.eval.enabled):
            return
        # Imported only now: they load torch (over a second), which a skipped task never needs.
        from benchgate.measure.evaluate import stage_eval
        from benchgate.results.figures import eval_figures

        fetch_code_under_test(env, out.parent / "workspace")
        with stage("eval"):
            # The profile finds the stored baseline's eval: more seeds run only when the first is out of
            # its band (measure/seeds.py). A fresh runner's or pod's store is empty: MLflow's baseline
            # is cached first, as compare will (it finds the store current then).
            from benchgate.tracking.refresh import cache_newest_baseline

            if baseline_dir is None:
                refresh = functools.partial(cache_newest_baseline, config)
            result = stage_eval(
                config, out / "eval.json", machine_profile=env.get("machine_profile"), refresh_store=refresh
            )
        if "skipped" in result:
            print(f"benchgate eval: eval skipped: {result['skipped']}", flush=True)
            return
        print(f"benchgate eval: {result['more_seeds']}", flush=True)
        for name, value in eval_figures(result).items():
            figures.log_metric(name.removeprefix("eval/"), value)


def trace_task(setup_dir: str, trace_dir: str) -> None:
    """A gzipped torch.profiler trace, for Perfetto (https://ui.perfetto.dev) or TensorBoard (nothing
    when tracing is disabled)."""
    with reporting_errors("trace", trace_dir):
        config, env, out = start_task(setup_dir, trace_dir)
        if skipped("trace", config.trace.enabled):
            return
        from benchgate.measure.trace import stage_trace  # loads torch: only when tracing

        fetch_code_under_test(env, out.parent / "workspace")
        with stage("trace"):
            summary = stage_trace(config, out / "trace")
        for name in summary["files"]:
            print(
                f"benchgate trace: trace/{name}: open it in https://ui.perfetto.dev, or run "
                "`tensorboard --logdir trace` (torch-tb-profiler)",
                flush=True,
            )


def link_trace_or_copy(source: str, dest: str) -> None:
    """Gather a file: a profiler trace (megabytes, never rewritten) is hard-linked, so the trace task's
    output, the bundle and `--out` share one copy; anything else, or across filesystems, is copied."""
    with contextlib.suppress(OSError):
        if source.endswith((".pt.trace.json.gz", ".pt.trace.json")):
            Path(dest).unlink(missing_ok=True)
            return os.link(source, dest)
    shutil.copy2(source, dest)


def compare_task(
    setup_dir: str,
    input_dirs: list[str],
    baseline_pvc: str,
    results_dir: str,
    verdict_markdown: str,
    figures: MetricsSink,
    *,
    multi_node: bool = False,
    parameters: dict[str, Any] | None = None,
    suite_entry: str = "",
) -> tuple[str, str, str]:
    """Assemble the run's bundle and screen it against the baseline.

    Returns (verdict, world sizes for A/B, base commit). The baseline is MLflow's newest for this profile
    (cached in the directory store, which is also the fallback). Where the screen did not PASS a world
    size's timing and the base code can be checked out (`base_commit`, else the baseline's commit), an
    A/B task decides it; otherwise the verdict is final and this task publishes it (report, baseline
    policy, MLflow), so the common path imports MLflow in one process only. `baseline_pvc`: the volume
    mounted for the stores, or "" for pod-local ones (see `params.task_stores`). With `multi_node` the
    largest world size ran across nodes: A/B runs both sides on one node, so it does not decide that
    one, whose screened verdict stands (the task's log says so). `parameters` and `suite_entry`: the
    run's, from which the setup's config.json must follow (`trusted.check_setup_config`; None: not
    checked, for a caller that wrote the setup itself).
    """
    from benchgate.ab.host_fit import host_ab_worlds, mark_not_measured
    from benchgate.ab.stage import ab_base_commit, worlds_for_ab
    from benchgate.checks.stage import stage_compare, write_comparison
    from benchgate.kfp.trainjob.task import ab_on_one_node
    from benchgate.tracking.refresh import refresh_baseline

    with reporting_errors("compare", results_dir):
        out = Path(results_dir)
        out.mkdir(parents=True, exist_ok=True)
        for directory in (setup_dir, *input_dirs):
            # Written by tasks that ran the code under test: regular files only (kfp/trusted.py).
            copy_untrusted(Path(directory), out, what=Path(directory).name, copy_function=link_trace_or_copy)
        if parameters is not None:
            check_setup_config(out, parameters, suite_entry)
        configured, env = load_setup(str(out))
        config = task_stores(configured, baseline_pvc)
        with stage("compare"):
            tracking_state = refresh_baseline(config, out)
            comparison, _, baseline = stage_compare(config, out, tracking_state)
        base_commit = ab_base_commit(env, baseline)
        explicit = bool((env.get("base") or {}).get("commit"))
        worlds = worlds_for_ab(comparison, baseline, bool(base_commit), explicit)
        worlds, note = ab_on_one_node(worlds, config.bench.world_sizes or [], multi_node)
        if note:
            print(f"benchgate compare: {note}", flush=True)
        worlds, unmeasurable = host_ab_worlds(worlds, env, config.gate.ab.cores_per_rank)
        if unmeasurable:
            comparison = mark_not_measured(comparison, unmeasurable)
            write_comparison(out, comparison)
            for why in unmeasurable.values():
                print(f"benchgate compare: {why}", flush=True)
        publish_verdict(out, verdict_markdown, figures)
        fresh_ab_store = ab_stores(configured).gate.baseline_dir != configured.gate.baseline_dir
        if worlds and baseline is not None and fresh_ab_store:
            # The A/B task mounts no volume (it runs user code): its pod starts with an empty store.
            hand_over_baseline(baseline.path, out)
        if not worlds:
            with stage("publish"):
                publish_and_keep(configured, config, out)
        return comparison.verdict, ",".join(str(ws) for ws in worlds), base_commit


def ab_stores(configured: RunConfig) -> RunConfig:
    """The stores of the A/B task: pod-local on a cluster whatever `baseline_pvc` says (no volume for
    user code); a local run's directories stay where they are (`params.task_stores`)."""
    return task_stores(configured, "")


def publish_verdict(results: Path, verdict_markdown: str, figures: MetricsSink) -> None:
    """The verdict table as the task's Markdown output, and its counts and ratios as metrics."""
    from benchgate.results.comparison import Comparison, load_comparison
    from benchgate.results.figures import gate_figures

    shutil.copy2(results / "compare.md", verdict_markdown)
    compared = load_comparison(results / "compare.json").to_dict()
    for name, value in gate_figures(Comparison.from_dict(compared)).items():
        figures.log_metric(name.removeprefix("gate/"), value)
    for check in compared["checks"]:
        if check["name"].startswith("scaling efficiency") and check["current"] is not None:
            figures.log_metric("scaling_efficiency_pct", float(check["current"]))


def gate_task(results_dir: str, summary_path: str) -> None:
    """Say the verdict, write summary.json, and on a cluster fail the task (so the KFP UI shows the run
    red) on FAIL, and on UNKNOWN unless gate.on_unknown is neutral. Under `benchgate run`
    (LOCAL_OUT_VARIABLE set) a verdict is no task failure: the task says it and succeeds, and `benchgate
    run` exits with its code, so pipeline.log shows no failure trace for a run that worked. Nor does a
    suite's entry (run.json names it): the suite gate fails the suite's run after its last entry.

    The verdict was published (report, baseline, MLflow) by the task that reached it; the summary says
    what became of it, for `benchgate run` and for people reading the run in the KFP UI.
    """
    from benchgate.checks.next_steps import verdict_lines
    from benchgate.results.bundle import PUBLISHED_FILE, RUN_FILE
    from benchgate.results.comparison import load_comparison

    with reporting_errors("gate", summary_path):
        results = Path(results_dir)
        comparison = load_comparison(results / "compare.json")
        published = read_json(results / PUBLISHED_FILE)
        suite_entry = read_json(results / RUN_FILE).get("suite_entry", "")
        with stage("gate"):
            write_json(
                Path(summary_path),
                {"verdict": comparison.verdict, "exit_code": comparison.exit_code, **published},
            )
        if published.get("baseline_written"):
            print(f"benchgate gate: baseline written: {published['baseline_written']}", flush=True)
        if published.get("mlflow_run_id"):
            print(f"benchgate gate: logged to MLflow as run {published['mlflow_run_id']}", flush=True)
        if published.get("spooled"):
            print(f"benchgate gate: not in MLflow yet, spooled in {published['spooled']}", flush=True)
        if published.get("kept"):
            print(
                f"benchgate gate: a copy is kept in the results artifact under {published['kept']}: "
                "`benchgate sync --from DIR` sends it from the downloaded artifact or the mounted "
                "pipeline root",
                flush=True,
            )
        local_out = os.environ.get(LOCAL_OUT_VARIABLE, "")
        for line in verdict_lines(comparison, Path(local_out) if local_out else results):
            print(f"benchgate gate: {line}", flush=True)
        if comparison.verdict == "UNKNOWN" and comparison.on_unknown == "neutral":
            print("benchgate gate: UNKNOWN treated as neutral (gate.on_unknown = neutral)", flush=True)
        # Not an error: the gate did its job. On a cluster a non-zero exit turns the run red in the KFP UI.
        if suite_entry:
            print(f"benchgate gate: suite entry {suite_entry}: the suite gate judges the suite", flush=True)
        elif comparison.exit_code and not local_out:
            raise SystemExit(EXIT_REGRESSION if comparison.verdict == "FAIL" else EXIT_UNKNOWN)
