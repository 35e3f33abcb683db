"""The rank side of a bench across nodes: the Trainer's PET_* variables as torchrun's arguments
(measure/node.py, launch.NodeLayout) and the metrics file's trip through a log (kit/log_payload.py). The
two real torchrun "nodes" on this host that do what the TrainJob's pods do are
tests/distributed/test_nodes_on_one_host.py's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from harness import TESTS_DIR

from benchgate.errors import ConfigError, RunFailedError
from benchgate.kfp.trainjob.job import Phase, phase_of, trainjob_name
from benchgate.kit import log_payload
from benchgate.measure.launch import NodeLayout
from benchgate.measure.node import layout_from_env

REAL_METRICS = TESTS_DIR / "data" / "stack_run" / "metrics-ws2.json"
PET = {
    "PET_NNODES": "2",
    "PET_NPROC_PER_NODE": "8",
    "PET_NODE_RANK": "1",
    "PET_MASTER_ADDR": "benchgate-ws16-0a1b2c3d4e5f-node-0-0.benchgate-ws16-0a1b2c3d4e5f",
    "PET_MASTER_PORT": "29500",
}


def test_the_trainers_variables_become_torchruns_multi_node_arguments() -> None:
    layout = layout_from_env(PET)
    assert layout == NodeLayout(2, 8, 1, PET["PET_MASTER_ADDR"], 29500)
    assert layout.world_size == 16
    assert layout.ranks == range(8, 16)
    assert layout.torchrun_args() == [
        "--nnodes=2",
        "--nproc-per-node=8",
        "--node-rank=1",
        f"--master-addr={PET['PET_MASTER_ADDR']}",
        "--master-port=29500",
    ]


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("PET_NNODES", None, "PET_NNODES: not set"),
        ("PET_NPROC_PER_NODE", "auto", "PET_NPROC_PER_NODE: got 'auto', expected an integer >= 1"),
        ("PET_NNODES", "0", "PET_NNODES: got '0', expected an integer >= 1"),
        ("PET_NODE_RANK", "-1", "PET_NODE_RANK: got '-1', expected an integer >= 0"),
        ("PET_NODE_RANK", "2", r"PET_NODE_RANK: got '2', but PET_NNODES is 2 \(ranks 0-1\)"),
        ("PET_MASTER_ADDR", " ", "PET_MASTER_ADDR: got ' ', expected rank 0's host name"),
        ("PET_MASTER_PORT", "70000", r"PET_MASTER_PORT: got '70000', expected a port \(1-65535\)"),
    ],
)
def test_a_missing_or_bad_variable_is_named_with_its_value(
    variable: str, value: str | None, message: str
) -> None:
    env = {k: v for k, v in PET.items() if k != variable}
    if value is not None:
        env[variable] = value
    with pytest.raises(ConfigError, match=message):
        layout_from_env(env)


def test_the_metrics_file_comes_back_byte_for_byte_from_a_log_with_other_lines_around_it() -> None:
    data = REAL_METRICS.read_bytes()
    block = log_payload.encode("metrics-ws2.json", data).splitlines(keepends=True)
    assert len(block) > 4 and all(len(line) < 120 for line in block)  # short lines: runtimes split long ones
    # Another rank's lines land between the block's lines; `kubectl logs --timestamps` prefixes each.
    mixed = [*block[:3], "[rank1]: step 30/30\n", *block[3:]]
    stamped = "".join(f"2026-11-25T00:12:0{i % 10}.1Z {line}" for i, line in enumerate(mixed))
    log = "torchrun starting\nW1125 warning: OMP_NUM_THREADS\n" + stamped + "benchgate node: done\n"
    payload = log_payload.decode(log, "pod p")
    assert payload == log_payload.Payload("metrics-ws2.json", data)


def test_the_last_complete_block_wins_and_a_damaged_one_is_refused() -> None:
    first = log_payload.encode("metrics-ws2.json", b'{"attempt": 1}\n')
    second = log_payload.encode("metrics-ws2.json", b'{"attempt": 2}\n')
    assert log_payload.decode(first + second, "pod p").data == b'{"attempt": 2}\n'
    # A log cut inside the last block: the earlier block is not passed off as the metrics.
    with pytest.raises(RunFailedError, match=r"pod p: no BENCHGATE-METRICS-BEGIN .* cut short"):
        log_payload.decode(first.replace(log_payload.END, ""), "pod p")
    with pytest.raises(
        RunFailedError, match=r"pod p: no BENCHGATE-METRICS-BEGIN \.\.\. BENCHGATE-METRICS-END"
    ):
        log_payload.decode("nothing here\n", "pod p")
    # One character changed in transit: the checksum in the opening line refuses the bytes.
    lines = log_payload.encode("m.json", REAL_METRICS.read_bytes()).splitlines()
    other = log_payload.encode("m.json", REAL_METRICS.read_bytes().replace(b"gloo", b"nccl")).splitlines()
    forged = "\n".join([lines[0], *other[1:]])
    with pytest.raises(
        RunFailedError, match=r"not the \d+ bytes \(sha256 [0-9a-f]{12}\.\.\.\) its sender printed"
    ):
        log_payload.decode(forged, "pod p")
    broken = "\n".join([lines[0], lines[1][:-4] + "!!!!", *lines[2:]])
    with pytest.raises(RunFailedError, match="block in the log is corrupt"):
        log_payload.decode(broken, "pod p")
    with pytest.raises(ValueError, match="plain file name"):
        log_payload.encode("dir/metrics.json", b"{}")


def test_the_trainer_api_outside_its_adapter_fails_lint(tmp_path: Path) -> None:
    """The Trainer API is alpha: `make lint` refuses its models anywhere but kfp/trainjob/job.py."""
    from import_lint import copy_with, lint_imports

    src = copy_with(
        tmp_path, "kfp/trainjob/client.py", "import json", "from kubeflow_trainer_api import models"
    )
    result = lint_imports(src, tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    broken = result.stdout.split("Broken contracts", 1)[1]
    assert "The Kubeflow Trainer API (alpha) only in kfp/trainjob/job.py" in broken, broken
    assert "benchgate.kfp.trainjob.client -> kubeflow_trainer_api" in broken, broken


@pytest.mark.parametrize(
    ("conditions", "phase"),
    [
        (None, Phase("Running")),
        ([{"type": "Suspended", "status": "False", "reason": "Resumed"}], Phase("Running")),
        (
            [{"type": "Suspended", "status": "True", "reason": "Suspended", "message": "q"}],
            Phase("Suspended", "Suspended", "q"),
        ),
        (
            [
                {"type": "Suspended", "status": "False", "reason": "Resumed"},
                {"type": "Complete", "status": "True", "reason": "JobsCompleted", "message": "done"},
            ],
            Phase("Complete", "JobsCompleted", "done"),
        ),
        ([{"type": "Failed", "status": "False", "reason": "DeadlineExceeded"}], Phase("Running")),
        (
            [{"type": "Failed", "status": "True", "reason": "TrainingRuntimeNotSupported", "message": "m"}],
            Phase("Failed", "TrainingRuntimeNotSupported", "m"),
        ),
    ],
)
def test_a_trainjobs_phase_is_read_from_its_true_conditions(
    conditions: list[dict[str, str]] | None, phase: Phase
) -> None:
    trainjob = {"metadata": {"name": "t"}, "status": {"conditions": conditions} if conditions else {}}
    assert phase_of(trainjob) == phase


def test_the_trainjob_name_is_a_short_rfc_1035_label_fixed_per_run_and_world_size() -> None:
    name = trainjob_name("3f5e0b7a-1c2d-4e5f-8a9b-0c1d2e3f4a5b", 1024)
    assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name) and len(f"{name}-node-0-0") <= 63
    assert name == trainjob_name("3f5e0b7a-1c2d-4e5f-8a9b-0c1d2e3f4a5b", 1024)
    assert name != trainjob_name("3f5e0b7a-1c2d-4e5f-8a9b-0c1d2e3f4a5b", 512)
    assert name != trainjob_name("another-run", 1024)
    with pytest.raises(ConfigError, match="run key: got ''"):
        trainjob_name("", 16)
