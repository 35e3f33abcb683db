"""One node of a bench whose world spans nodes: the command of a Kubeflow Trainer TrainJob's pods.

    python -m benchgate.measure.node --world-size 16 --out-dir /tmp/benchgate [--repository URL --commit SHA]

with the run's config (config.json's JSON) in BENCHGATE_RUN_CONFIG. The Trainer's torch runtime tells
each pod where it sits (PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT);
every node fetches the commit under test and starts its ranks under torchrun, as the single-node bench task
does (`launch.stage_bench`). Rank 0 runs on node 0 and writes the metrics file there; node 0 then prints it
into its log between markers (kit/log_payload.py), where the launcher (kfp/trainjob/job.py) reads it
back, byte for byte, because the nodes share no volume.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from benchgate.config import parse_config
from benchgate.errors import BenchgateError, ConfigError
from benchgate.kit import log_payload
from benchgate.measure.launch import NodeLayout, metrics_path, stage_bench
from benchgate.measure.source import use_source

CONFIG_VARIABLE = "BENCHGATE_RUN_CONFIG"
NODES, PROCS, NODE_RANK, MASTER_ADDR, MASTER_PORT = (
    "PET_NNODES",
    "PET_NPROC_PER_NODE",
    "PET_NODE_RANK",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
)


def layout_from_env(env: Mapping[str, str]) -> NodeLayout:
    """This node's layout from the Trainer's PET_* variables; a ConfigError names a missing or bad one."""

    def number(name: str, least: int) -> int:
        value = env.get(name)
        if value is None:
            raise ConfigError(f"{name}: not set (the Trainer's torch runtime sets it on every node)")
        try:
            parsed = int(value)
        except ValueError:
            # "auto" is the Trainer's default for PET_NPROC_PER_NODE: the launcher always sets a number,
            # because the world size is nodes x processes and must be known before the run.
            raise ConfigError(f"{name}: got {value!r}, expected an integer >= {least}") from None
        if parsed < least:
            raise ConfigError(f"{name}: got {value!r}, expected an integer >= {least}")
        return parsed

    layout = NodeLayout(
        nodes=number(NODES, 1),
        procs_per_node=number(PROCS, 1),
        node_rank=number(NODE_RANK, 0),
        master_addr=env.get(MASTER_ADDR, "").strip(),
        master_port=number(MASTER_PORT, 1),
    )
    if not layout.master_addr:
        raise ConfigError(f"{MASTER_ADDR}: got {env.get(MASTER_ADDR)!r}, expected rank 0's host name")
    if layout.master_port > 65535:
        raise ConfigError(f"{MASTER_PORT}: got {env[MASTER_PORT]!r}, expected a port (1-65535)")
    if layout.node_rank >= layout.nodes:
        raise ConfigError(
            f"{NODE_RANK}: got {env[NODE_RANK]!r}, but {NODES} is {layout.nodes} (ranks 0-{layout.nodes - 1})"
        )
    return layout


def run_node(
    config_json: str, world_size: int, out_dir: Path, env: Mapping[str, str], repository: str, commit: str
) -> Path | None:
    """Run this node's ranks; on node 0 (rank 0's), print the metrics file's block and return its path."""
    layout = layout_from_env(env)
    try:
        data = json.loads(config_json)
    except ValueError as e:
        raise ConfigError(f"{CONFIG_VARIABLE}: not JSON ({e})") from None
    config = parse_config(data)
    use_source(repository, commit, out_dir / "workspace")
    print(
        f"benchgate node {layout.node_rank}/{layout.nodes}: ranks {layout.ranks.start}-"
        f"{layout.ranks.stop - 1} of {world_size}, rank 0 at {layout.master_addr}:{layout.master_port}",
        flush=True,
    )
    # The profile names a node's GPUs, as env.json does for a world size across nodes.
    out = stage_bench(config, world_size, out_dir, node=layout, per_launch=layout.procs_per_node)
    if 0 not in layout.ranks:
        return None
    sys.stdout.write(log_payload.encode(out.name, out.read_bytes()))
    sys.stdout.flush()
    return out


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="benchgate.measure.node", description=__doc__)
    parser.add_argument("--world-size", type=int, required=True, help="ranks over all nodes")
    parser.add_argument("--out-dir", type=Path, required=True, help="this node's working directory")
    parser.add_argument("--repository", default="", help="the repository of the commit under test")
    parser.add_argument("--commit", default="", help="the commit under test (none: the installed code)")
    args = parser.parse_args(argv)
    env = os.environ if env is None else env
    try:
        if CONFIG_VARIABLE not in env:
            raise ConfigError(f"{CONFIG_VARIABLE}: not set (the launcher puts the run's config.json there)")
        out = run_node(env[CONFIG_VARIABLE], args.world_size, args.out_dir, env, args.repository, args.commit)
    except BenchgateError as e:
        print(f"benchgate node: error: {e}", file=sys.stderr, flush=True)
        return e.exit_code
    if out is not None:
        print(f"benchgate node: {metrics_path(args.out_dir, args.world_size).name} printed above", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
