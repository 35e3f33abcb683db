"""The model families a Hugging Face workload trains (`task=`): what builds the model, what a batch is,
the family's own loss, and what a step's `tokens_per_step` counts.

Each family is one of transformers' Auto classes, so every model type that class maps is reachable by
name. Inputs are made from the bench's seeded generator (the same batches on every run), never from a
dataset or a processor to download:

- causal-lm, masked-lm, seq2seq-lm, sequence-classification: the bundled shard's bytes as token ids (the
  reference model's data). masked-lm masks 15% of them; seq2seq-lm reads one window and writes the next;
  sequence-classification labels each sequence by its first byte, so the loss can fall.
- image-classification: pixel values N(0, 1), `num_channels` x image_size x image_size, labelled by
  the sign of their mean.
- audio-classification: the model's own main input (`main_input_name`): a raw waveform where that is
  what it reads (wav2vec2 and its kin), log-mel features of the shape its configuration sets where it
  reads those (Whisper's `input_features`, the Audio Spectrogram Transformer's frames x mel bins).

Only causal-lm predicts the next byte, so only it keeps the eval hook (byte perplexity and probes);
every other family's eval stage is skipped with the reason `eval_skipped` gives.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
import transformers
from transformers import (
    AutoModelForAudioClassification,
    AutoModelForCausalLM,
    AutoModelForImageClassification,
    AutoModelForMaskedLM,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
    PreTrainedConfig,
)
from transformers.models.auto import modeling_auto

from benchgate.workloads.shard import VOCAB_SIZE, sample_windows

MASKED_SHARE = 0.15  # BERT's masking rate
AUDIO_SAMPLES = 16_000  # one second at 16 kHz, where the model reads a raw waveform


@dataclass(frozen=True)
class Task:
    name: str
    auto_class: Any  # transformers' Auto class: from_config builds the family's model
    # model type -> its class name in this family (a few name several; the Auto class builds the first)
    types: Mapping[str, str | Sequence[str]]
    unit: str  # what tokens_per_step counts
    inputs: str  # "bytes", "pixels" or "audio"
    eval_skipped: str | None  # None: the byte eval applies; else why the eval stage is skipped


TASKS: dict[str, Task] = {
    t.name: t
    for t in (
        Task(
            "causal-lm",
            AutoModelForCausalLM,
            modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
            "tokens",
            "bytes",
            None,
        ),
        Task(
            "masked-lm",
            AutoModelForMaskedLM,
            modeling_auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES,
            "tokens",
            "bytes",
            "a masked LM predicts masked bytes, not the next one: byte perplexity does not apply",
        ),
        Task(
            "seq2seq-lm",
            AutoModelForSeq2SeqLM,
            modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES,
            "tokens",
            "bytes",
            "an encoder-decoder is scored on a source and a target: the byte eval scores a decoder alone",
        ),
        Task(
            "sequence-classification",
            AutoModelForSequenceClassification,
            modeling_auto.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES,
            "tokens",
            "bytes",
            "a classifier gives one label a sequence, not the next byte's logits",
        ),
        Task(
            "image-classification",
            AutoModelForImageClassification,
            modeling_auto.MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES,
            "images",
            "pixels",
            "an image classifier reads no bytes",
        ),
        Task(
            "audio-classification",
            AutoModelForAudioClassification,
            modeling_auto.MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES,
            "clips",
            "audio",
            "an audio classifier reads no bytes",
        ),
    )
}
DEFAULT_TASK = "causal-lm"


def model_class(task: Task, model_type: str) -> Any:
    """The class transformers builds for `model_type` in `task` (its attributes say what it reads)."""
    name = task.types[model_type]
    return getattr(transformers, name if isinstance(name, str) else name[0], None)


def tasks_of(model_type: str) -> list[str]:
    """The families `model_type` has a model in, by name."""
    return [t.name for t in TASKS.values() if model_type in t.types]


# --- batches: each family's make_batch, forward and loss (bytes, pixels, audio) -----------------------


@dataclass(frozen=True)
class Shapes:
    """What a batch is made of: sequences and their length, or images' and clips' shapes."""

    batch_size: int
    seq_len: int
    mask_id: int = VOCAB_SIZE - 2  # masked-lm: the id a masked byte becomes (254: no UTF-8 byte; 255 pads)
    start_id: int = 0  # seq2seq-lm: the decoder's first input
    labels: int = 2  # the classifiers' classes
    pixels: tuple[int, int, int] = (3, 32, 32)  # channels, height, width
    audio: tuple[int, ...] = (AUDIO_SAMPLES,)  # one clip's shape, without the batch
    image_tokens: tuple[int, int] | None = None  # an image model that reads ids: (vocabulary, length)


def make_batch(task: Task, shapes: Shapes, train: torch.Tensor, generator: torch.Generator) -> Any:
    """One step's batch for `task` (on the CPU: the workload moves it), drawn from `generator`."""
    b, t = shapes.batch_size, shapes.seq_len
    if task.name == "causal-lm":
        return sample_windows(train, b, t + 1, generator)
    if task.name == "masked-lm":
        tokens = sample_windows(train, b, t, generator)
        masked = torch.rand(tokens.shape, generator=generator) < MASKED_SHARE
        masked[:, 0] = True  # never a sequence without a target
        return torch.where(masked, shapes.mask_id, tokens), torch.where(masked, tokens, -100)
    if task.name == "seq2seq-lm":
        both = sample_windows(train, b, 2 * t, generator)
        return both[:, :t], both[:, t:]
    if task.name == "sequence-classification":
        tokens = sample_windows(train, b, t, generator)
        return tokens, tokens[:, 0] % shapes.labels
    if task.name == "image-classification" and shapes.image_tokens:  # ImageGPT: colour-cluster ids
        vocab, length = shapes.image_tokens
        tokens = torch.randint(0, vocab, (b, length), generator=generator)
        return tokens, (tokens[:, 0] % shapes.labels)
    if task.name == "image-classification":
        pixels = torch.randn((b, *shapes.pixels), generator=generator)
        return pixels, (pixels.mean(dim=(1, 2, 3)) > 0).long() % shapes.labels
    clips = torch.randn((b, *shapes.audio), generator=generator)
    return clips, (clips.flatten(1).mean(dim=1) > 0).long() % shapes.labels


def forward(task: Task, shapes: Shapes, model: torch.nn.Module, batch: Any, input_name: str) -> torch.Tensor:
    """The family's logits for `batch` (make_batch's, on the model's device)."""
    if task.name == "causal-lm":
        return model(input_ids=batch[:, :-1]).logits  # type: ignore[no-any-return]
    if task.name == "seq2seq-lm":
        source, target = batch
        start = torch.full_like(target[:, :1], shapes.start_id)
        decoder_input = torch.cat([start, target[:, :-1]], dim=1)  # the target shifted right
        return model(input_ids=source, decoder_input_ids=decoder_input).logits  # type: ignore[no-any-return]
    inputs, _ = batch
    return model(**{input_name: inputs}).logits  # type: ignore[no-any-return]


def loss(task: Task, output: torch.Tensor, batch: Any) -> torch.Tensor:
    """The family's own loss: cross-entropy of the logits against its targets."""
    targets = batch[:, 1:] if task.name == "causal-lm" else batch[1]
    return F.cross_entropy(
        output.reshape(-1, output.shape[-1]).float(), targets.reshape(-1), ignore_index=-100
    )


def units_per_step(task: Task, shapes: Shapes) -> int:
    """What one rank's step consumes, in the task's unit: tokens (a seq2seq pair counts both sides'),
    images or clips."""
    if task.inputs != "bytes":
        return shapes.batch_size
    return shapes.batch_size * shapes.seq_len * (2 if task.name == "seq2seq-lm" else 1)


def audio_shape(config: PreTrainedConfig, input_name: str) -> tuple[int, ...]:
    """One clip's main input, as the model's configuration shapes it (see the module docstring)."""
    mel_bins = getattr(config, "num_mel_bins", None)
    if input_name == "input_features" and isinstance(mel_bins, int):
        positions = getattr(config, "max_source_positions", 1500)
        return (mel_bins, 2 * positions)  # Whisper: mel bins x frames (its conv halves them)
    if isinstance(mel_bins, int) and isinstance(getattr(config, "max_length", None), int):
        return (config.max_length, mel_bins)  # the Audio Spectrogram Transformer: frames x mel bins
    width = getattr(config, "feature_projection_input_dim", None)
    if input_name == "input_features" and isinstance(width, int):
        return (100, width)  # wav2vec2-bert: frames x stacked features
    return (AUDIO_SAMPLES,)


def pixel_shape(config: PreTrainedConfig, image_size: int) -> tuple[int, int, int]:
    channels = getattr(config, "num_channels", 3)
    return (channels if isinstance(channels, int) else 3, image_size, image_size)
