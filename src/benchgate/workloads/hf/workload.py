"""The Workload protocol (benchgate.workloads.base) for a transformers model of any family (tasks.py).

`make_workload` checks the arguments (spec.py) and returns an HFWorkload, or an HFCausalLM where the
family is causal-lm: only a causal LM has the eval hook (logits of the next byte). The attention
implementation defaults to "auto": transformers' SDPA where the model supports it and its own default
(eager) where it does not; which one ran is `attention` after build_model, and is logged.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import nn

from benchgate.errors import WorkloadError
from benchgate.workloads.hf import tasks
from benchgate.workloads.hf.sizes import PRESETS
from benchgate.workloads.hf.spec import DEFAULT_IMAGE_SIZE, HFSpec, parse_spec, workload_name
from benchgate.workloads.shard import VOCAB_SIZE, load_shard

LOG = logging.getLogger("benchgate.workloads.hf")


class HFWorkload:
    """A transformers model of `spec.task`'s family, built from its configuration with random weights."""

    def __init__(self, spec: HFSpec) -> None:
        self.spec = spec
        self.task = spec.task
        self.name = workload_name(spec)
        config = spec.build_config()
        cls = tasks.model_class(self.task, spec.model_type)
        self.model_class_name = getattr(cls, "__name__", "")
        self.input_name = str(getattr(cls, "main_input_name", "input_ids"))
        self.shapes = tasks.Shapes(
            batch_size=spec.batch_size,
            seq_len=spec.seq_len,
            start_id=_valid_id(getattr(config, "decoder_start_token_id", None), config, 0),
            labels=max(2, int(getattr(config, "num_labels", 2) or 2)),
            pixels=tasks.pixel_shape(config, _image_size(config, spec)),
            audio=tasks.audio_shape(config, self.input_name),
            image_tokens=_image_tokens(self.task, config, self.input_name, spec.seq_len),
        )
        self.tokens_per_step = tasks.units_per_step(self.task, self.shapes)
        self.unit = self.task.unit  # what tokens_per_step counts
        self.attention: str | None = None  # the attention implementation that ran (after build_model)
        if self.task.eval_skipped is not None:
            self.eval_skipped = f"task={self.task.name}: {self.task.eval_skipped}"
        self._train = load_shard().train if self.task.inputs == "bytes" else torch.empty(0)

    def build_model(self, device: torch.device) -> nn.Module:
        attn = self.spec.attn_implementation
        config = self.spec.build_config()
        if not getattr(config, "architectures", None):  # where a type maps to several classes (DeiT's
            config.architectures = [self.model_class_name]  # with a teacher or not): the first
        try:
            model = self.task.auto_class.from_config(
                config, attn_implementation=None if attn == "auto" else attn
            )
        except WorkloadError:
            raise
        except (
            ValueError,
            KeyError,
            ImportError,
            TypeError,
        ) as e:  # e.g. an attention kernel this host lacks
            what = f"the configuration of {self.name}"  # the attention named where it was asked for
            what = what if attn == "auto" else f"attn_implementation={attn!r} or {what}"
            raise WorkloadError(f"{what} is refused by transformers: {e}") from None
        self.attention = str(getattr(model.config, "_attn_implementation", None) or "the model's own")
        LOG.info("%s: attention %s (attn_implementation=%s)", self.name, self.attention, attn)
        if hasattr(model.config, "use_cache"):  # a training step, not generation: no key/value cache
            model.config.use_cache = False
        return model.to(device).train()  # type: ignore[no-any-return]

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.AdamW(model.parameters(), lr=self.spec.lr, weight_decay=0.0)

    def make_batch(self, generator: torch.Generator, device: torch.device) -> Any:
        batch = tasks.make_batch(self.task, self.shapes, self._train, generator)
        if isinstance(batch, tuple):
            return tuple(t.to(device, non_blocking=True) for t in batch)
        return batch.to(device, non_blocking=True)

    def forward(self, model: nn.Module, batch: Any) -> torch.Tensor:
        return tasks.forward(self.task, self.shapes, model, batch, self.input_name)

    def loss(self, output: torch.Tensor, batch: Any) -> torch.Tensor:
        return tasks.loss(self.task, output, batch)


class HFCausalLM(HFWorkload):
    """A causal LM: the eval hook too, scoring next-byte predictions on the bundled shard."""

    def __init__(self, spec: HFSpec) -> None:
        super().__init__(spec)
        self.eval_seq_len = spec.seq_len

    def logits(self, model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
        # The eval scores next-byte predictions: a vocabulary beyond the bytes is never a target.
        return model(input_ids=tokens).logits[..., :VOCAB_SIZE]  # type: ignore[no-any-return]


def _valid_id(value: Any, config: Any, fallback: int) -> int:
    vocab = getattr(config, "vocab_size", None)
    if isinstance(value, int) and value >= 0 and (not isinstance(vocab, int) or value < vocab):
        return value
    return fallback


def _image_tokens(task: tasks.Task, config: Any, input_name: str, seq_len: int) -> tuple[int, int] | None:
    """An image classifier that reads ids (ImageGPT's colour clusters, its last id the start token):
    their vocabulary and seq_len of them, within its positions."""
    if task.inputs != "pixels" or input_name != "input_ids":
        return None
    vocab = int(getattr(config, "vocab_size", VOCAB_SIZE))
    positions = (
        getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None) or seq_len
    )
    return max(1, vocab - 1), min(seq_len, int(positions))


def _image_size(config: Any, spec: HFSpec) -> int:
    """The pixels' side: the configuration's image_size (a ViT's position embeddings are made for it),
    else the size preset's, else DEFAULT_IMAGE_SIZE."""
    size = getattr(config, "image_size", None)
    if isinstance(size, list | tuple) and size and isinstance(size[0], int):
        size = size[0]
    if isinstance(size, int) and size > 0:
        return size
    return PRESETS[spec.size].image if spec.size else DEFAULT_IMAGE_SIZE


def make_workload(**args: Any) -> HFWorkload:
    """Factory for `--workload benchgate.workloads.hf:make_workload --workload-arg model_type=gpt2 ...`."""
    spec = parse_spec(args)
    spec.build_config()  # a bad vocab_size or a seq_len past the context is refused before any launch
    return HFCausalLM(spec) if spec.task.name == tasks.DEFAULT_TASK else HFWorkload(spec)
