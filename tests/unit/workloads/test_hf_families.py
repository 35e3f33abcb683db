"""Hugging Face model families (benchgate/workloads/hf/tasks.py), size presets (sizes.py) and the default
attention: each family's model trains a real step from `task=`, `model_type=` and `size=tiny` alone."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from benchgate.errors import WorkloadError
from benchgate.workloads.base import load_workload
from benchgate.workloads.contract import missing_eval_hook, supports_eval
from benchgate.workloads.hf import make_workload
from benchgate.workloads.hf.tasks import TASKS
from benchgate.workloads.training import check_training_step

HF = "benchgate.workloads.hf:make_workload"
ONE_PER_FAMILY = {
    "causal-lm": "llama",
    "masked-lm": "bert",
    "seq2seq-lm": "t5",
    "sequence-classification": "gpt2",  # a decoder's classifier: it needs a padding id, set for it
    "image-classification": "vit",
    "audio-classification": "wav2vec2",
}


@pytest.mark.parametrize("task", list(ONE_PER_FAMILY))
def test_one_model_of_each_family_trains_a_step_at_size_tiny(task: str) -> None:
    workload = load_workload(
        HF, {"task": task, "model_type": ONE_PER_FAMILY[task], "size": "tiny", "batch_size": 2, "seq_len": 32}
    )
    loss = check_training_step(workload, "test", eval_seq_len=32 if task == "causal-lm" else None)
    assert math.isfinite(loss) and loss > 0
    family = TASKS[task]
    assert workload.unit == family.unit  # type: ignore[attr-defined]
    if family.inputs == "bytes":
        assert workload.tokens_per_step == 2 * 32 * (2 if task == "seq2seq-lm" else 1)
    else:
        assert workload.tokens_per_step == 2  # images or clips per step
    # Only a causal LM predicts the next byte: the others' eval stage is skipped with their reason.
    assert supports_eval(workload) == (task == "causal-lm")
    if task != "causal-lm":
        reason = missing_eval_hook(workload)
        assert reason is not None and reason.startswith(f"the workload has no eval hook: task={task}: ")


def test_the_names_say_the_family_and_the_size() -> None:
    assert make_workload(model_type="gpt2", size="tiny").name == "hf-gpt2-tiny"
    assert make_workload(task="masked-lm", model_type="bert", size="small").name == "hf-bert-masked-lm-small"
    # The default attention, asked by name, is the same work: the same name.
    assert make_workload(model_type="gpt2", size="tiny", attn_implementation="sdpa").name == "hf-gpt2-tiny"
    assert make_workload(model_type="gpt2", size="tiny", attn_implementation="eager").name.endswith(
        "-attn_eager"
    )


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"model_type": "gpt2"}, {"n_layer": 2, "n_embd": 64, "n_head": 4, "n_inner": 128}),
        (
            {"model_type": "llama"},
            {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128},
        ),
        (
            {"task": "seq2seq-lm", "model_type": "t5"},
            {"num_layers": 2, "d_model": 64, "d_ff": 128, "d_kv": 16},
        ),
        (
            {"task": "seq2seq-lm", "model_type": "bart"},
            {"encoder_layers": 2, "decoder_layers": 2, "d_model": 64, "encoder_ffn_dim": 128},
        ),
        ({"task": "masked-lm", "model_type": "distilbert"}, {"n_layers": 2, "dim": 64, "hidden_dim": 128}),
        ({"task": "image-classification", "model_type": "vit"}, {"image_size": 32, "patch_size": 8}),
    ],
    ids=["gpt2", "llama", "t5", "bart", "distilbert", "vit"],
)
def test_size_tiny_sets_each_configuration_s_own_keys(args: dict[str, Any], expected: dict[str, int]) -> None:
    config = make_workload(**args, size="tiny").spec.build_config()
    assert {key: getattr(config, key) for key in expected} == expected


def test_keys_given_by_hand_win_over_the_preset() -> None:
    config = make_workload(model_type="gpt2", size="tiny", n_layer=3).spec.build_config()
    assert (config.n_layer, config.n_embd) == (3, 64)


def test_a_model_without_sdpa_runs_by_default_and_says_which_attention_ran() -> None:
    """BLOOM's attention has no SDPA path: asking for SDPA fails, the default runs its own (eager)."""
    workload = make_workload(model_type="bloom", size="tiny", batch_size=2, seq_len=16)
    loss = check_training_step(workload, "test")
    assert math.isfinite(loss)
    workload.build_model(torch.device("cpu"))
    assert workload.attention == "eager"  # type: ignore[attr-defined]
    with pytest.raises(WorkloadError, match="attn_implementation='sdpa'"):
        make_workload(model_type="bloom", size="tiny", attn_implementation="sdpa").build_model(
            torch.device("cpu")
        )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"task": "masked-llm", "model_type": "bert"}, "task: got 'masked-llm'; did you mean masked-lm?"),
        ({"model_type": "gpt2", "size": "huge"}, "size: got 'huge'; expected one of tiny, small, base"),
        (
            {"model_type": "t5"},
            "model_type: got 't5', a model type with no causal-lm model in transformers; "
            "it has: task=seq2seq-lm",
        ),
        ({"task": "image-classification", "model_type": "bert"}, "task=masked-lm"),
    ],
)
def test_a_family_or_size_that_does_not_fit_is_named(args: dict[str, Any], message: str) -> None:
    with pytest.raises(WorkloadError) as raised:
        make_workload(**args)
    assert message in str(raised.value)
