from __future__ import annotations

import math
import re
import sys
import types
from pathlib import Path

import pytest
import torch

from benchgate.config import parse_config
from benchgate.errors import ConfigError, WorkloadError
from benchgate.measure.stage import stage_check_workload
from benchgate.workloads.base import load_workload
from benchgate.workloads.contract import check_members, supports_eval
from benchgate.workloads.gpt import GPT, SIZES, non_embedding_params
from benchgate.workloads.training import build_trainer, check_training_step

README = Path(__file__).resolve().parents[3] / "README.md"


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


# The workload contract, checked up front: members by load_workload, then one real step on CPU
# (measure/stage.stage_check_workload, which the pipeline's env task runs). Each bad workload is a real one in
# tests/support/bg_test_workloads.py.
CONTRACT_BREACHES = [
    pytest.param(
        "bg_test_workloads:loss_shape_one",
        {},
        "workload member `loss` has shape [1]; expected a scalar (shape [])",
        id="loss-shape-1",
    ),
    pytest.param(
        "bg_test_workloads:flops_as_text",
        {},
        "workload member `flops_per_token()` returned '6N' (str); expected a FlopsPerToken",
        id="flops-str",
    ),
    pytest.param(
        "bg_test_workloads:flops_as_number",
        {},
        "workload member `flops_per_token` is 6.0 (float); expected a method",
        id="flops-not-a-method",
    ),
    pytest.param(
        "bg_test_workloads:tokens_per_step_bool",
        {},
        "workload member `tokens_per_step` is True (bool); expected an int > 0",
        id="tokens-per-step-bool",
    ),
    pytest.param(
        "bg_test_workloads:named", {"name": "it's"}, 'workload member `name` is "it\'s"', id="quote"
    ),
    pytest.param("bg_test_workloads:named", {"name": "a/b"}, "workload member `name` is 'a/b'", id="slash"),
    pytest.param(
        "bg_test_workloads:integer_loss",
        {},
        "workload member `loss` has dtype torch.int64; expected a floating-point tensor",
        id="integer-loss",
    ),
    pytest.param(
        "bg_test_workloads:nan_loss",
        {"at_step": 1},
        "workload member `loss` is nan after one training step on CPU; expected a finite number",
        id="nan-loss",
    ),
    pytest.param(
        "bg_test_workloads:failing",
        {"rank": 0, "at_step": 1},
        "one training step on CPU: make_batch/forward/loss raised RuntimeError: injected failure at step 1",
        id="step-raises",
    ),
    pytest.param(
        "bg_test_workloads:wrong_logits",
        {},
        "workload member `logits` returned shape [1, 64, 16] of torch.float32 for tokens of shape [1, 64]; "
        "expected floating-point logits of shape [1, 64, 256]",
        id="eval-logits-shape",
    ),
]


@pytest.mark.parametrize(("spec", "args", "expected"), CONTRACT_BREACHES)
def test_contract_check_refuses_a_breach_naming_member_and_value(
    spec: str, args: dict[str, object], expected: str
) -> None:
    config = parse_config({"bench": {"workload": spec, "workload_args": args}})
    with pytest.raises(WorkloadError) as info:
        stage_check_workload(config)
    message = str(info.value)
    assert message.startswith(f"bench.workload: {spec}: ")
    assert expected in message
    assert info.value.exit_code == 2


@pytest.mark.parametrize(
    ("spec", "args", "member"),
    [
        ("bg_test_workloads:named", {"name": "a/b"}, "`name`"),
        ("bg_test_workloads:tokens_per_step_bool", {}, "`tokens_per_step`"),
        ("bg_test_workloads:flops_as_text", {}, "`flops_per_token()`"),
    ],
)
def test_every_stage_that_loads_the_workload_checks_its_members(
    spec: str, args: dict[str, object], member: str
) -> None:
    # bench, eval and trace load through load_workload too: the same check, without a step.
    with pytest.raises(WorkloadError, match=re.escape(member)):
        load_workload(spec, args)


def test_flops_per_token_is_optional_in_the_contract() -> None:
    # Without it the workload passes the member check and the real step; a bench counts its FLOPs.
    workload = load_workload("bg_test_workloads:without_flops")
    assert not hasattr(workload, "flops_per_token")
    checked = stage_check_workload(parse_config({"bench": {"workload": "bg_test_workloads:without_flops"}}))
    assert checked["workload"] == "without-flops" and math.isfinite(checked["loss"])


def test_eval_seq_len_beyond_the_workloads_context_is_refused_before_the_bench() -> None:
    config = parse_config({"bench": {"workload_args": {"size": "tiny"}}, "eval": {"seq_len": 200}})
    with pytest.raises(
        ConfigError, match=r"eval\.seq_len: got 200, but workload gpt-tiny accepts at most 128"
    ):
        stage_check_workload(config)
    # With the eval off, the same settings are not the eval's to refuse.
    off = parse_config(
        {"bench": {"workload_args": {"size": "tiny"}}, "eval": {"seq_len": 200, "enabled": False}}
    )
    assert stage_check_workload(off)["workload"] == "gpt-tiny"


@pytest.mark.parametrize(
    ("spec", "args"),
    [
        ("bg_test_workloads:sleepy", {}),
        ("benchgate.workloads.gpt:make_workload", {"size": "tiny"}),
        ("bg_test_workloads:named", {"name": "a" * 100}),
        ("bg_test_workloads:named", {"name": "v1.2_rc-3"}),
    ],
)
def test_contract_check_passes_good_workloads_with_one_finite_step(
    spec: str, args: dict[str, object]
) -> None:
    checked = stage_check_workload(parse_config({"bench": {"workload": spec, "workload_args": args}}))
    assert math.isfinite(checked["loss"]) and checked["loss"] > 0
    assert checked["seconds"] < 30


def test_readme_user_workload_example_passes_the_contract_check(monkeypatch: pytest.MonkeyPatch) -> None:
    module = types.ModuleType("my_bench")
    exec(compile(_readme_workload_example(), "README.md", "exec"), module.__dict__)
    monkeypatch.setitem(sys.modules, "my_bench", module)
    workload = load_workload("my_bench:make_workload", {"hidden": 32})
    assert math.isfinite(check_training_step(workload, "bench.workload: my_bench:make_workload"))


@pytest.mark.parametrize(
    "name", ["", "-lead", ".hidden", "a b", "a" * 101, 'say"hi', "a\\b", "ü", "a\nb", "..", 7]
)
def test_workload_names_that_are_not_safe_identifiers_are_refused(name: object) -> None:
    workload = load_workload("bg_test_workloads:sleepy")
    workload.name = name  # type: ignore[assignment]
    with pytest.raises(WorkloadError, match=r"workload member `name` is "):
        check_members(workload, "bench.workload: t")


@pytest.mark.parametrize("unit", ["Images", "images/s", "", "a" * 21, 3])
def test_a_unit_that_cannot_name_a_rate_is_refused(unit: object) -> None:
    workload = load_workload("bg_test_workloads:sleepy")
    workload.unit = unit  # type: ignore[attr-defined]
    with pytest.raises(
        WorkloadError, match=r"workload member `unit` is .*expected a plural noun in lowercase"
    ):
        check_members(workload, "bench.workload: t")
    workload.unit = "images"  # type: ignore[attr-defined]
    check_members(workload, "bench.workload: t")


def test_the_step_the_check_runs_is_the_step_the_bench_times() -> None:
    # compute_loss + update is Trainer.step: same seed, same losses.
    workload = load_workload("bg_test_workloads:sleepy")
    stepped = build_trainer(workload, torch.device("cpu"), "fp32", seed=0)
    halves = build_trainer(workload, torch.device("cpu"), "fp32", seed=0)
    for _ in range(3):
        loss = halves.compute_loss()
        halves.update(loss)
        assert torch.equal(stepped.step(), loss.detach())
