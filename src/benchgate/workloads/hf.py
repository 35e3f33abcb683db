"""Hugging Face causal language models as workloads: built from a configuration, with random weights.

    benchgate run --workload benchgate.workloads.hf:make_workload \\
        --workload-arg model_type=gpt2 --workload-arg n_layer=2 --workload-arg n_embd=128

Any model type that `transformers` has a causal LM for (`AutoModelForCausalLM`) is built from its
configuration class with the given keys (`n_layer`, `hidden_size`, ... whatever that class has), or from
a local `config.json` (`config=PATH`, a file or a directory holding one). Weights are never loaded and
nothing is downloaded: the model is `AutoModelForCausalLM.from_config`, initialised from benchgate's
seed, and a config path must name a file on this machine.

The data are the bundled shard's byte tokens, as for the reference GPT (benchgate.workloads.gpt), so
the eval hook scores every model on the same bytes: the vocabulary defaults to 256 and may be larger
(only the first 256 logits are scored), never smaller.

This is the only module that imports transformers (an import-linter contract): it is the optional extra
`benchgate[hf]`, and the rest of benchgate must work without it.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from benchgate.errors import WorkloadError
from benchgate.workloads.contract import MAX_NAME_LENGTH, NAME_PATTERN
from benchgate.workloads.shard import VOCAB_SIZE, load_shard, sample_windows

try:
    from transformers import CONFIG_MAPPING, AutoModelForCausalLM, PreTrainedConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
except ImportError as e:  # the optional extra is not installed
    raise WorkloadError(
        f"benchgate.workloads.hf needs transformers ({e}); install it with: pip install 'benchgate[hf]'"
    ) from None

# The factory's own arguments; every other keyword is a key of the model's configuration.
OWN_ARGS = ("model_type", "config", "seq_len", "batch_size", "attn_implementation", "lr")
DEFAULT_SEQ_LEN = 128
DEFAULT_BATCH_SIZE = 8
DEFAULT_ATTN = "sdpa"
DEFAULT_LR = 3e-3
# The names a configuration gives its context length (GPT-2 calls it n_positions, most others
# max_position_embeddings; attribute_map aliases one to the other where a class has both).
POSITION_KEYS = ("n_positions", "max_position_embeddings")
# Token ids a configuration may default to beyond a byte vocabulary (GPT-2's are 50256).
SPECIAL_TOKEN_KEYS = ("bos_token_id", "eos_token_id", "pad_token_id")


def causal_lm_types() -> list[str]:
    return sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def config_keys(config_class: type[PreTrainedConfig]) -> set[str]:
    """Every key `config_class` knows: its fields, their aliases, and what its default instance holds.

    transformers keeps unknown keyword arguments as attributes without a word, so a misspelt key
    (`n_layers=2` for GPT-2's `n_layer`) would silently build the default 12-layer model.
    """
    keys = set(getattr(config_class, "attribute_map", {}))
    if dataclasses.is_dataclass(config_class):
        keys |= {f.name for f in dataclasses.fields(config_class)}
    keys |= set(config_class().to_dict())
    return {k for k in keys if not k.startswith("_")}


def read_local_config(path_text: str) -> dict[str, Any]:
    """The JSON of a local config.json (a file, or a directory holding one). Never the hub."""
    path = Path(path_text).expanduser()
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise WorkloadError(
            f"config: {path_text!r} is not a local config.json or a directory holding one "
            f"({path} does not exist); benchgate builds models from local configs only and never "
            "downloads from the Hugging Face Hub: save the config.json next to your code and pass its path"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise WorkloadError(f"config: cannot read {path} as JSON ({e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("model_type"), str):
        raise WorkloadError(f'config: {path} has no "model_type" (a string such as "gpt2")')
    return data


def _did_you_mean(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=3)
    return f"did you mean {' or '.join(close)}? " if close else ""


def config_class_for(model_type: Any) -> type[PreTrainedConfig]:
    if not isinstance(model_type, str) or model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        types = causal_lm_types()
        what = (
            "a configuration without a causal LM (AutoModelForCausalLM has none)"
            if model_type in CONFIG_MAPPING
            else "not a model type transformers knows"
        )
        hint = _did_you_mean(model_type, types) if isinstance(model_type, str) else ""
        raise WorkloadError(
            f"model_type: got {model_type!r}, {what}; {hint}the {len(types)} causal LM types of "
            f"transformers include gpt2, gpt_neox, llama, mistral, qwen2, opt, phi"
        )
    return CONFIG_MAPPING[model_type]


def _count(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise WorkloadError(f"{key}: got {value!r}; expected an int > 0")
    return value


@dataclasses.dataclass(frozen=True)
class HFSpec:
    """What the factory was asked for, checked: the configuration's keys and benchgate's own settings."""

    model_type: str
    config: dict[str, Any]  # keyword arguments of the configuration class
    overrides: dict[str, Any]  # the keys the user set on the command line (they name the workload)
    source: str | None  # the local config path, if any
    seq_len: int
    batch_size: int
    attn_implementation: str
    lr: float

    def build_config(self) -> PreTrainedConfig:
        config = CONFIG_MAPPING[self.model_type](**self.config)
        # Checked on the built config: an alias (hidden_size for n_embd) lands on the field it names.
        vocab = getattr(config, "vocab_size", None)
        if not isinstance(vocab, int) or vocab < VOCAB_SIZE:
            raise WorkloadError(
                f"vocab_size: got {vocab!r}; the workload's tokens are bytes, so it must be >= {VOCAB_SIZE}"
            )
        for key in POSITION_KEYS:
            limit = getattr(config, key, None)
            if isinstance(limit, int) and limit < self.seq_len:
                raise WorkloadError(
                    f"seq_len: got {self.seq_len}, longer than the model's {key}={limit}; lower seq_len "
                    f"or raise {key}"
                )
        return config


def parse_spec(args: dict[str, Any]) -> HFSpec:
    """Check the factory's arguments and work out the configuration's keyword arguments."""
    own = {k: args[k] for k in OWN_ARGS if k in args}
    overrides = {k: v for k, v in args.items() if k not in OWN_ARGS}
    seq_len = _count("seq_len", own.get("seq_len", DEFAULT_SEQ_LEN))
    batch_size = _count("batch_size", own.get("batch_size", DEFAULT_BATCH_SIZE))
    attn = own.get("attn_implementation", DEFAULT_ATTN)
    if not isinstance(attn, str) or not attn:
        raise WorkloadError(f"attn_implementation: got {attn!r}; expected a name such as 'sdpa' or 'eager'")
    lr = own.get("lr", DEFAULT_LR)
    if isinstance(lr, bool) or not isinstance(lr, int | float) or not lr > 0:
        raise WorkloadError(f"lr: got {lr!r}; expected a number > 0")

    source = own.get("config")
    if source is not None:
        if not isinstance(source, str):
            raise WorkloadError(f"config: got {source!r}; expected the path of a local config.json")
        base = read_local_config(source)
        model_type = base["model_type"]
        if "model_type" in own and own["model_type"] != model_type:
            raise WorkloadError(
                f"model_type: got {own['model_type']!r}, but config {source!r} is a {model_type!r} model"
            )
        defaults: dict[str, Any] = {}  # the file says what the model is
    elif "model_type" in own:
        model_type, base = own["model_type"], {}
        defaults = {"vocab_size": VOCAB_SIZE}
    else:
        raise WorkloadError(
            "model_type: missing; pass --workload-arg model_type=NAME (e.g. gpt2, llama) or "
            "--workload-arg config=PATH to a local config.json"
        )
    config_class = config_class_for(model_type)
    known = config_keys(config_class)
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise WorkloadError(
            f"{unknown[0]}: not a key of {config_class.__name__} (model_type {model_type!r}); "
            f"{_did_you_mean(unknown[0], sorted(known))}its keys: {', '.join(sorted(known))}"
        )
    # The context length follows seq_len unless the file or the user set it; GPT-2's n_positions is
    # max_position_embeddings through attribute_map, so at most one of them is set.
    position_key = next((k for k in POSITION_KEYS if k in known), None)
    given = {**base, **overrides}
    if position_key is not None and not any(k in given for k in POSITION_KEYS):
        defaults[position_key] = seq_len
    config = {k: v for k, v in {**defaults, **base, **overrides}.items() if k != "model_type"}
    class_defaults = config_class()
    vocab = config.get("vocab_size", getattr(class_defaults, "vocab_size", None))
    # A byte vocabulary has no room for the ids a configuration defaults to (GPT-2's 50256, also in
    # the config.json a GPT2Config(vocab_size=256) saves): drop those not set on the command line,
    # rather than build an embedding with an out-of-range padding index.
    for key in SPECIAL_TOKEN_KEYS:
        value = config[key] if key in config else getattr(class_defaults, key, None)
        if key not in overrides and isinstance(vocab, int) and isinstance(value, int) and value >= vocab:
            config[key] = None
    return HFSpec(model_type, config, overrides, source, seq_len, batch_size, attn, float(lr))


def workload_name(spec: HFSpec) -> str:
    """A stable name from what changes the work: the model type, the config file, the keys set.

    Sorted keys, so the same arguments in another order keep the same baseline; a name that would be
    too long or hold characters a baseline directory may not, ends in a digest of the full arguments.
    """
    parts = ["hf", spec.model_type]
    if spec.source is not None:
        path = Path(spec.source)
        label = path.parent.name if path.name == "config.json" else path.stem if path.is_file() else path.name
        digest = hashlib.sha256(json.dumps(spec.config, sort_keys=True).encode()).hexdigest()[:8]
        parts += [label, digest]
    # The configuration's keys, then benchgate's own settings where they differ from the defaults.
    settings = [(key, spec.overrides[key]) for key in sorted(spec.overrides)]
    for key, value, default in (
        ("seq_len", spec.seq_len, DEFAULT_SEQ_LEN),
        ("batch_size", spec.batch_size, DEFAULT_BATCH_SIZE),
        ("attn", spec.attn_implementation, DEFAULT_ATTN),
    ):
        if value != default:
            settings.append((key, value))
    for key, value in settings:
        number = isinstance(value, int | float) and not isinstance(value, bool)
        parts.append(f"{key}{value}" if number else f"{key}_{str(value).lower()}")
    name = "-".join(parts)
    if len(name) <= MAX_NAME_LENGTH and NAME_PATTERN.fullmatch(name):
        return name
    digest = hashlib.sha256(json.dumps([name, spec.config], sort_keys=True).encode()).hexdigest()[:12]
    readable = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
    return f"{readable[: MAX_NAME_LENGTH - len(digest) - 1]}-{digest}"


class HFCausalLMWorkload:
    """Implements the benchgate Workload protocol (benchgate.workloads.base) for a transformers causal LM."""

    def __init__(self, spec: HFSpec) -> None:
        self.spec = spec
        self.name = workload_name(spec)
        self.tokens_per_step = spec.batch_size * spec.seq_len
        self.eval_seq_len = spec.seq_len
        self._train = load_shard().train

    def build_model(self, device: torch.device) -> nn.Module:
        try:
            model = AutoModelForCausalLM.from_config(
                self.spec.build_config(), attn_implementation=self.spec.attn_implementation
            )
        except WorkloadError:
            raise
        except (ValueError, KeyError, ImportError) as e:  # e.g. an attention kernel this host lacks
            raise WorkloadError(
                f"attn_implementation={self.spec.attn_implementation!r} or the configuration of "
                f"{self.name} is refused by transformers: {e}"
            ) from None
        # A training step, not generation: no key/value cache to build and throw away.
        model.config.use_cache = False
        return model.to(device).train()  # type: ignore[no-any-return]

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.AdamW(model.parameters(), lr=self.spec.lr, weight_decay=0.0)

    def make_batch(self, generator: torch.Generator, device: torch.device) -> torch.Tensor:
        windows = sample_windows(self._train, self.spec.batch_size, self.spec.seq_len + 1, generator)
        return windows.to(device, non_blocking=True)

    def forward(self, model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
        return model(input_ids=batch[:, :-1]).logits  # type: ignore[no-any-return]

    def loss(self, output: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(output.reshape(-1, output.shape[-1]).float(), batch[:, 1:].reshape(-1))

    def logits(self, model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
        # The eval scores next-byte predictions: a vocabulary beyond the bytes is never a target.
        return model(input_ids=tokens).logits[..., :VOCAB_SIZE]  # type: ignore[no-any-return]


def make_workload(**args: Any) -> HFCausalLMWorkload:
    """Factory for `--workload benchgate.workloads.hf:make_workload --workload-arg model_type=gpt2 ...`."""
    spec = parse_spec(args)
    spec.build_config()  # a bad vocab_size or a seq_len past the context is refused before any launch
    return HFCausalLMWorkload(spec)
