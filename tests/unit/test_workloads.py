from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest
import torch

from benchgate.errors import WorkloadError
from benchgate.training import build_trainer
from benchgate.workloads.base import load_workload, supports_eval
from benchgate.workloads.gpt import GPT, SIZES, non_embedding_params

README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.mark.parametrize(
    ("spec", "args", "expected"),
    [
        pytest.param("no_such_module_xyz:make", {}, "cannot import module 'no_such_module_xyz'", id="import"),
        pytest.param("bg_test_workloads:absent", {}, "has no callable 'absent'", id="missing-function"),
        pytest.param(
            "bg_test_workloads:raising_factory", {}, "raised ValueError: the factory is broken", id="raises"
        ),
        pytest.param("bg_test_workloads:incomplete", {}, "lacks build_model, make_optimizer", id="protocol"),
        pytest.param("bg_test_workloads:sleepy", {"stepms": 3}, "unexpected keyword argument", id="bad-arg"),
        pytest.param("benchgate.workloads.gpt:make_workload", {"size": "huge"}, "'huge'", id="bad-size"),
    ],
)
def test_load_workload_errors_name_the_spec_and_cause(
    spec: str, args: dict[str, object], expected: str
) -> None:
    with pytest.raises(WorkloadError) as info:
        load_workload(spec, args)
    assert expected in str(info.value)
    assert info.value.exit_code == 2


def test_gpt_non_embedding_params_match_the_module() -> None:
    for size in SIZES.values():
        model = GPT(size)
        embedding = model.tok.weight.numel() + model.pos.weight.numel()
        assert non_embedding_params(size) == sum(p.numel() for p in model.parameters()) - embedding


def test_gpt_small_is_gpt2_124m_like() -> None:
    workload = load_workload("benchgate.workloads.gpt:make_workload", {"size": "small"})
    assert workload.name == "gpt-small"
    assert 80e6 < non_embedding_params(SIZES["small"]) < 90e6
    flops = workload.flops_per_token()
    assert flops.attention_aware > flops.dense_6n == 6 * non_embedding_params(SIZES["small"])


def test_gpt_tiny_trains_and_supports_eval() -> None:
    workload = load_workload("benchgate.workloads.gpt:make_workload", {"size": "tiny"})
    assert supports_eval(workload)
    trainer = build_trainer(workload, torch.device("cpu"), "fp32", seed=0)
    losses = [trainer.step().item() for _ in range(8)]
    assert losses[-1] < losses[0]


def _readme_workload_example() -> str:
    text = README.read_text(encoding="utf-8")
    match = re.search(r"<!-- workload-example -->\s*```python\n(.*?)```", text, re.S)
    assert match, "README.md must carry the user workload example after <!-- workload-example -->"
    return match.group(1)


def test_readme_user_workload_example_runs_through_the_protocol(monkeypatch: pytest.MonkeyPatch) -> None:
    module = types.ModuleType("my_bench")
    exec(compile(_readme_workload_example(), "README.md", "exec"), module.__dict__)
    monkeypatch.setitem(sys.modules, "my_bench", module)
    workload = load_workload("my_bench:make_workload", {"hidden": 32})
    trainer = build_trainer(workload, torch.device("cpu"), "fp32", seed=0)
    losses = [trainer.step().item() for _ in range(5)]
    assert all(torch.isfinite(torch.tensor(losses)))
    assert workload.flops_per_token().dense_6n > 0
