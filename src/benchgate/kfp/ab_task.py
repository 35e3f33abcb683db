"""The A/B task: the base commit against the candidate, interleaved on one node, for the world sizes
compare could not decide (the screen's timing rows). It runs the code under test, so it holds no
tracking credential and mounts no volume; the trusted `publish` task (kfp/trusted.py) publishes what it
decided. A module of its own: it checks out two commits and runs rounds of both, where each body in
tasks.py is one read, one stage and one write.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from benchgate.kfp.pod_stores import SCREENED_BASELINE, restore_baseline
from benchgate.kfp.task_harness import MetricsSink, load_setup, reporting_errors, stage
from benchgate.kfp.tasks import ab_stores, link_trace_or_copy, publish_verdict


def ab_task(
    setup_dir: str,
    compared_dir: str,
    world_sizes: str,
    base_commit: str,
    gpus: int,
    accelerator_type: str,
    cpu_request: str,
    memory_request: str,
    results_dir: str,
    verdict_markdown: str,
    figures: MetricsSink,
) -> str:
    """Decide `world_sizes` by interleaved A/B of the base commit and the candidate, into `results_dir`.

    Both sides run in this one task, on one node: their steps alternate, so the node's drift hits both.
    `gpus`, `accelerator_type`, `cpu_request` and `memory_request` are what the task asked the cluster
    for (its pod spec). The task runs user code, so it holds no tracking credential and mounts no
    volume: its stores are pod-local (`ab_stores`), the baseline is compare's hand-over, and the
    `publish` task (kfp/trusted.py) publishes what it decided.
    """
    from benchgate.ab.decision import ABDecision
    from benchgate.ab.power import OpeningFigure
    from benchgate.ab.runner import Side
    from benchgate.ab.stage import stage_ab
    from benchgate.measure.source import checkout, confine_workloads, import_paths, validate_commit

    with reporting_errors("A/B", results_dir):
        out = Path(results_dir)
        shutil.copytree(
            compared_dir,
            out,
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns(SCREENED_BASELINE),
            copy_function=link_trace_or_copy,
        )
        configured, env = load_setup(setup_dir)
        config = ab_stores(configured)
        if config.gate.baseline_dir != configured.gate.baseline_dir:
            restore_baseline(Path(compared_dir), config.gate.baseline_dir)
        source = env.get("source") or {}
        repository = (env.get("base") or {}).get("repository") or source.get("repository", "")
        commit = validate_commit(base_commit, "base_commit")
        base_root = checkout(repository, commit, out.parent / "workspace-base")
        base = Side(f"base {commit[:12]}", commit, tuple(import_paths(base_root)))
        if source.get("commit"):
            root = checkout(repository, source["commit"], out.parent / "workspace-candidate")
            sha = source["commit"]
            candidate = Side(f"candidate {sha[:12]}", sha, tuple(import_paths(root)))
            # Checked-out code, as in every other task: each side's bench loads the workload only from
            # its own checkout (measure/bench.py), never from outside the repository.
            confine_workloads(root)
        else:
            candidate = Side("candidate (the working tree)")
        worlds = [int(ws) for ws in world_sizes.split(",") if ws]
        print(
            f"benchgate A/B: {base.description} vs {candidate.description} at ws={world_sizes}, "
            f"with up to {gpus} x {accelerator_type}, {cpu_request} CPUs and {memory_request} of memory "
            "requested"
        )
        ab = config.gate.ab
        for ws in worlds:
            name, opening = f"A/B ws={ws} (rounds)", OpeningFigure.for_gate(config.gate, ws)
            with stage(name, ab.max_rounds) as reporter:

                def on_round(i: int, decision: ABDecision) -> None:
                    if line := opening.line(decision):  # noqa: B023 - called within this iteration only
                        # The planner's figure at the first look (ab/power.py): in this task's log, and as a
                        # stage marker that `benchgate run` prints above its bars (cli/run_output.py); then
                        # the rounds' stage again, for reporters that show one stage at a time.
                        print(line, flush=True)
                        reporter.stage_started(line)
                        reporter.stage_started(name, ab.max_rounds)  # noqa: B023
                    reporter.advance(i, ab.max_rounds)

                comparison = stage_ab(config, out, [ws], base, candidate, on_round)
        publish_verdict(out, verdict_markdown, figures)
        return comparison.verdict
