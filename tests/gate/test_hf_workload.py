"""Hugging Face causal LMs as workloads (benchgate.workloads.hf): built from a configuration with random
weights, from keys or a local config.json, never from the hub; every bad input a WorkloadError naming
the argument; and a real `benchgate run` of a 2-layer GPT-2 on two ranks, eval included."""

from __future__ import annotations

import importlib
import math
import socket
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import GPT2Config

from benchgate.config import EvalConfig, parse_config
from benchgate.errors import WorkloadError
from benchgate.kfp.params import parameters_from_config
from benchgate.kfp.task_harness import ERROR_FILE
from benchgate.kfp.tasks import env_task
from benchgate.kit.files import read_json
from benchgate.measure.evaluate import deterministic_torch, train_on_shard
from benchgate.workloads.base import load_workload
from benchgate.workloads.contract import MAX_NAME_LENGTH, NAME_PATTERN, check_logits
from benchgate.workloads.hf import make_workload, parse_spec, workload_name
from benchgate.workloads.shard import load_shard
from benchgate.workloads.training import check_training_step

HF = "benchgate.workloads.hf:make_workload"
GPT2_TINY = {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4}


def test_gpt2_from_keys_has_a_byte_vocabulary_and_a_context_of_seq_len() -> None:
    workload = make_workload(**GPT2_TINY, seq_len=32)
    config = workload.spec.build_config()
    assert type(config).__name__ == "GPT2Config"
    assert (config.n_layer, config.n_embd, config.n_head) == (2, 64, 4)
    assert (config.vocab_size, config.n_positions) == (256, 32)
    # GPT-2's default special ids (50256) lie outside a byte vocabulary: dropped, not left dangling.
    assert config.bos_token_id is None and config.eos_token_id is None
    assert workload.tokens_per_step == 8 * 32
    assert workload.eval_seq_len == 32
    assert workload.name == "hf-gpt2-n_embd64-n_head4-n_layer2-seq_len32"


def test_the_name_is_stable_and_follows_what_changes_the_work() -> None:
    forward = make_workload(model_type="gpt2", n_layer=2, n_embd=64, n_head=4).name
    backward = make_workload(n_head=4, n_embd=64, n_layer=2, model_type="gpt2").name
    assert forward == backward == "hf-gpt2-n_embd64-n_head4-n_layer2"
    others = {
        make_workload(**GPT2_TINY, batch_size=4).name,
        make_workload(**GPT2_TINY, attn_implementation="eager").name,
        make_workload(**{**GPT2_TINY, "n_layer": 3}).name,
    }
    assert len(others) == 3 and forward not in others
    assert make_workload(**GPT2_TINY, attn_implementation="eager").name.endswith("-attn_eager")


def test_a_name_with_characters_a_directory_may_not_hold_gets_a_digest() -> None:
    odd = workload_name(parse_spec({**GPT2_TINY, "activation_function": "gelu/new"}))
    long = workload_name(parse_spec({**GPT2_TINY, "activation_function": "x" * 150}))
    for name in (odd, long):
        assert NAME_PATTERN.fullmatch(name) and len(name) <= MAX_NAME_LENGTH, name
    assert odd != workload_name(parse_spec({**GPT2_TINY, "activation_function": "gelu_new"}))


def test_an_alias_key_sets_the_field_it_names() -> None:
    config = make_workload(model_type="gpt2", n_layer=1, hidden_size=32, n_head=2).spec.build_config()
    assert config.n_embd == 32


def test_another_architecture_trains_a_real_step_and_scores_bytes() -> None:
    """Llama (rotary positions, RMSNorm, SwiGLU) from its own keys: max_position_embeddings follows
    seq_len, and a vocabulary beyond the bytes is cut to the 256 logits the eval scores."""
    args = {"num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64}
    workload = make_workload(model_type="llama", **args, vocab_size=300, seq_len=16, batch_size=2)
    config = workload.spec.build_config()
    assert (config.max_position_embeddings, config.vocab_size) == (16, 300)
    loss = check_training_step(workload, "test", eval_seq_len=16)
    assert math.isfinite(loss) and loss > 0
    model = workload.build_model(torch.device("cpu"))
    tokens = torch.randint(0, 256, (2, 16))
    check_logits(workload.logits(model, tokens), tokens, "test")
    assert workload.forward(model, tokens).shape[-1] == 300  # training sees the whole vocabulary


def test_the_eval_training_repeats_bit_for_bit() -> None:
    """The eval's promise holds for a transformers model too: same seed, same losses and logits exactly."""
    workload = make_workload(**GPT2_TINY, seq_len=64)
    settings = EvalConfig(train_steps=4, batch_size=4)
    held_out = load_shard().heldout[:64].unsqueeze(0)
    runs = []
    for _ in range(2):
        with deterministic_torch(settings.threads):
            model, losses = train_on_shard(workload, load_shard(), settings, torch.device("cpu"))
            with torch.no_grad():
                runs.append((losses, workload.logits(model.eval(), held_out)))
    assert runs[0][0] == runs[1][0] and len(runs[0][0]) == 4
    assert torch.equal(runs[0][1], runs[1][1])


def test_a_local_config_json_file_or_directory(tmp_path: Path) -> None:
    """The config.json is what transformers itself writes (save_pretrained), not a hand-written copy."""
    GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=256, n_positions=64).save_pretrained(
        tmp_path / "tiny-gpt2"
    )
    from_dir = make_workload(config=str(tmp_path / "tiny-gpt2"), seq_len=64)
    from_file = make_workload(config=str(tmp_path / "tiny-gpt2" / "config.json"), seq_len=64)
    assert from_dir.name == from_file.name
    assert from_dir.name.startswith("hf-gpt2-tiny-gpt2-")
    config = from_dir.spec.build_config()
    assert (config.n_layer, config.n_embd, config.vocab_size, config.n_positions) == (2, 64, 256, 64)
    assert config.bos_token_id is None  # the file's 50256 lies outside its own vocabulary
    # Keys on top of the file override it, and name the workload apart.
    shallower = make_workload(config=str(tmp_path / "tiny-gpt2"), seq_len=64, n_layer=1)
    assert shallower.spec.build_config().n_layer == 1
    assert shallower.name != from_dir.name and "-n_layer1-" in shallower.name
    # An edited file is another model: another name, so its baseline is not the old one's.
    GPT2Config(n_layer=3, n_embd=64, n_head=4, vocab_size=256, n_positions=64).save_pretrained(
        tmp_path / "tiny-gpt2"
    )
    assert make_workload(config=str(tmp_path / "tiny-gpt2"), seq_len=64).name != from_dir.name


def _config_dir(tmp_path: Path, content: str | None) -> str:
    folder = tmp_path / "cfg"
    folder.mkdir()
    if content is not None:
        (folder / "config.json").write_text(content, encoding="utf-8")
    return str(folder)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({}, "model_type: missing; pass --workload-arg model_type=NAME"),
        (
            {"model_type": "gtp2"},
            "model_type: got 'gtp2', not a model type transformers knows; did you mean gpt2",
        ),
        ({"model_type": "t5"}, "model_type: got 't5', a model type with no causal-lm model"),
        (
            {"model_type": "gpt2", "n_layers": 2},
            "n_layers: not a key of GPT2Config (model_type 'gpt2'); did you mean n_layer",
        ),
        (
            {"model_type": "gpt2", "vocab_size": 255},
            "vocab_size: got 255; the workload's tokens are bytes, so it must be >= 256",
        ),
        ({"model_type": "llama", "vocab_size": 64}, "vocab_size: got 64"),
        (
            {"model_type": "gpt2", "n_positions": 64},
            "seq_len: got 128, longer than the model's n_positions=64",
        ),
        ({"model_type": "gpt2", "seq_len": 0}, "seq_len: got 0; expected an int > 0"),
        ({"model_type": "gpt2", "batch_size": "8"}, "batch_size: got '8'; expected an int > 0"),
        ({"model_type": "gpt2", "lr": -1}, "lr: got -1; expected a number > 0"),
        ({"model_type": "gpt2", "attn_implementation": ""}, "attn_implementation: got ''"),
        ({"config": "/nonexistent/tiny-gpt2"}, "config: '/nonexistent/tiny-gpt2' is not a local config.json"),
        ({"config": 3}, "config: got 3; expected the path of a local config.json"),
    ],
)
def test_bad_arguments_are_a_workload_error_naming_them(args: dict[str, Any], message: str) -> None:
    with pytest.raises(WorkloadError) as raised:
        make_workload(**args)
    assert message in str(raised.value)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "is not a local config.json or a directory holding one"),
        ("{not json", "cannot read"),
        ('{"n_layer": 2}', 'has no "model_type"'),
        ('{"model_type": "llama"}', "model_type: got 'gpt2', but config"),
    ],
    ids=["no-config-json", "not-json", "no-model-type", "model-type-disagrees"],
)
def test_bad_local_configs_are_refused(tmp_path: Path, content: str | None, message: str) -> None:
    with pytest.raises(WorkloadError) as raised:
        make_workload(config=_config_dir(tmp_path, content), model_type="gpt2")
    assert message in str(raised.value)


@pytest.mark.parametrize("hub_id", ["gpt2", "openai-community/gpt2"])
def test_a_hub_id_is_refused_without_touching_the_network(
    hub_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    attempts: list[Any] = []

    def refuse(self: socket.socket, address: Any) -> None:
        attempts.append(address)
        raise OSError("no network in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.chdir(tmp_path)  # so "gpt2" is no local folder by chance
    with pytest.raises(WorkloadError) as raised:
        make_workload(config=hub_id)
    assert f"config: {hub_id!r} is not a local config.json" in str(raised.value)
    assert "never downloads from the Hugging Face Hub" in str(raised.value)
    assert attempts == []


def test_an_attention_kernel_transformers_refuses_is_a_workload_error() -> None:
    workload = make_workload(**GPT2_TINY, attn_implementation="flash_attention_9")
    with pytest.raises(WorkloadError, match="attn_implementation='flash_attention_9'"):
        workload.build_model(torch.device("cpu"))


def test_without_transformers_the_import_says_which_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    # The one branch that cannot run with the extra installed: transformers made unimportable.
    monkeypatch.setitem(sys.modules, "transformers", None)
    for name in [
        m for m in sys.modules if m == "benchgate.workloads.hf" or m.startswith("benchgate.workloads.hf.")
    ]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(WorkloadError, match=r"pip install 'benchgate\[hf\]'"):
        importlib.import_module("benchgate.workloads.hf")
    with pytest.raises(
        WorkloadError, match=r"cannot import module 'benchgate.workloads.hf'.*benchgate\[hf\]"
    ):
        load_workload(HF, dict(GPT2_TINY))


def test_a_local_config_json_loads_as_every_stage_loads_it_and_trains(tmp_path: Path) -> None:
    """The config-path variant through the stages' own entry points, in this process: the workload
    loaded by its spec string (import, factory, members), then one training step with the eval hook's
    logits, as the env task checks it. (The eval is the same code for either source; the suite test,
    tests/gate/test_suite.py, runs a GPT-2 from keys through the gate on two ranks and scores it.)"""
    GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=256, n_positions=64).save_pretrained(
        tmp_path / "tiny-gpt2"
    )
    workload = load_workload(HF, {"config": str(tmp_path / "tiny-gpt2"), "seq_len": 64, "batch_size": 2})
    assert workload.name.startswith("hf-gpt2-tiny-gpt2-")
    assert workload.tokens_per_step == 2 * 64
    loss = check_training_step(workload, "test", eval_seq_len=64)
    assert math.isfinite(loss) and 0 < loss < 10


def test_the_env_task_refuses_a_hub_id_with_exit_2(tmp_path: Path) -> None:
    config = parse_config(
        {
            "bench": {"workload": HF, "workload_args": {"config": "gpt2"}, "world_sizes": [1]},
            "eval": {"enabled": False},
            "gate": {"baseline_dir": str(tmp_path / "baselines")},
            "tracking": {
                "enabled": False,
                "local_dir": str(tmp_path / "m"),
                "spool_dir": str(tmp_path / "s"),
            },
        }
    )
    setup = tmp_path / "capture-env" / "setup"
    with pytest.raises(SystemExit) as exited:
        env_task(parameters_from_config(config, [1]), "", "", "", "", "{{id}}", "{{name}}", str(setup))
    assert exited.value.code == 2
    error = read_json(setup.parent / ERROR_FILE)
    assert error["type"] == "WorkloadError" and error["exit_code"] == 2
    assert "config: 'gpt2' is not a local config.json" in error["message"]
