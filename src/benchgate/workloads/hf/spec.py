"""What a Hugging Face workload was asked for, checked: the family, the model type, its configuration's
keys (from the command line, a size preset or a local config.json) and benchgate's own settings; and the
workload's name, from what changes the work.

Every bad argument is a WorkloadError naming it (exit 2), before any launch: a model type without a
model in the family (and the families it has), a key its configuration class lacks (and the closest
one it has), a vocabulary smaller than the bytes, a seq_len past the model's context.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from transformers import CONFIG_MAPPING, PreTrainedConfig

from benchgate.errors import WorkloadError
from benchgate.workloads.contract import MAX_NAME_LENGTH, NAME_PATTERN
from benchgate.workloads.hf.sizes import SIZES, preset_config
from benchgate.workloads.hf.tasks import DEFAULT_TASK, TASKS, Task, model_class, tasks_of
from benchgate.workloads.shard import VOCAB_SIZE

# The factory's own arguments; every other keyword is a key of the model's configuration.
OWN_ARGS = (
    "task",
    "size",
    "model_type",
    "config",
    "seq_len",
    "batch_size",
    "image_size",
    "attn_implementation",
    "lr",
)
DEFAULT_SEQ_LEN = 128
DEFAULT_BATCH_SIZE = 8
DEFAULT_IMAGE_SIZE = 64  # where neither the configuration nor a size preset sets one
# "auto": SDPA where the model supports it, its own default (eager) otherwise; "sdpa" names the same.
DEFAULT_ATTN = "auto"
UNNAMED_ATTN = ("auto", "sdpa")  # attention settings the workload's name leaves out (the default work)
DEFAULT_LR = 3e-3
# The names a configuration gives its context length (GPT-2 calls it n_positions, most others
# max_position_embeddings; attribute_map aliases one to the other where a class has both).
POSITION_KEYS = ("n_positions", "max_position_embeddings")
PAD_ID = VOCAB_SIZE - 1  # byte 255: no UTF-8 text holds it
# Token ids a configuration may default to beyond a byte vocabulary (GPT-2's are 50256).
SPECIAL_TOKEN_KEYS = ("bos_token_id", "eos_token_id", "pad_token_id")


def causal_lm_types() -> list[str]:
    return sorted(TASKS[DEFAULT_TASK].types)


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


def task_named(name: Any) -> Task:
    if not isinstance(name, str) or name not in TASKS:
        hint = _did_you_mean(name, list(TASKS)) if isinstance(name, str) else ""
        raise WorkloadError(f"task: got {name!r}; {hint}the families: {', '.join(TASKS)}")
    return TASKS[name]


def config_class_for(model_type: Any, task: Task | None = None) -> type[PreTrainedConfig]:
    task = task or TASKS[DEFAULT_TASK]
    if not isinstance(model_type, str) or model_type not in task.types:
        types = sorted(task.types)
        others = tasks_of(model_type) if isinstance(model_type, str) else []
        if others:
            has = ", ".join(f"task={t}" for t in others)
            what = f"a model type with no {task.name} model in transformers; it has: {has}"
        elif model_type in CONFIG_MAPPING:
            what = f"a configuration without a model in any family benchgate trains ({', '.join(TASKS)})"
        else:
            what = "not a model type transformers knows"
        hint = _did_you_mean(model_type, types) if isinstance(model_type, str) else ""
        raise WorkloadError(
            f"model_type: got {model_type!r}, {what}; {hint}the {len(types)} {task.name} types of "
            f"transformers include {', '.join(types[:8])}"
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
    task: Task = TASKS[DEFAULT_TASK]
    size: str | None = None  # the preset, if any (sizes.py)

    def build_config(self) -> PreTrainedConfig:
        try:
            config = CONFIG_MAPPING[self.model_type](**self.config)
        except Exception as e:
            # A strict configuration class refuses None for a special id dropped from the byte
            # vocabulary (Emu3's pad_token_id): byte 255 instead.
            dropped = [k for k in SPECIAL_TOKEN_KEYS if k in self.config and self.config[k] is None]
            if not dropped or not any(k in str(e) for k in dropped):
                raise
            self.config.update({k: PAD_ID for k in dropped})
            config = CONFIG_MAPPING[self.model_type](**self.config)
        if self.task.inputs != "bytes":  # pixels and audio: no vocabulary, no context to check
            return config
        # Checked on the built config: an alias (hidden_size for n_embd) lands on the field it names.
        vocab = getattr(config, "vocab_size", None)
        if vocab is None and hasattr(config, "get_text_config"):  # a composite's, in its text config
            vocab = getattr(config.get_text_config(), "vocab_size", None)
        if not isinstance(vocab, int) or vocab < VOCAB_SIZE:
            raise WorkloadError(
                f"vocab_size: got {vocab!r}; the workload's tokens are bytes, so it must be >= {VOCAB_SIZE}"
            )
        for key in POSITION_KEYS:
            limit = getattr(config, key, None)
            if isinstance(limit, int) and 0 < limit < self.seq_len:  # XLNet's -1: no limit
                raise WorkloadError(
                    f"seq_len: got {self.seq_len}, longer than the model's {key}={limit}; lower seq_len "
                    f"or raise {key}"
                )
        return config


def _position_offset(task: Task, model_type: str, config_class: type[PreTrainedConfig]) -> int:
    """The positions a model uses beyond seq_len: RoBERTa and its kin number positions from the padding
    id + 1 (their `create_position_ids_from_input_ids`), so a context of seq_len would be too short."""
    cls = model_class(task, model_type)
    module = sys.modules.get(getattr(cls, "__module__", ""), None)
    source = Path(getattr(module, "__file__", "") or "")
    if not source.is_file() or "def create_position_ids_from_input_ids" not in source.read_text(
        encoding="utf-8"
    ):
        return 0
    pad = getattr(config_class(), "pad_token_id", None)
    return (pad if isinstance(pad, int) and pad >= 0 else 1) + 1


def _sub_presets(size: str, config_class: type[PreTrainedConfig], task: Task) -> dict[str, dict[str, Any]]:
    """The size preset of each sub-configuration of a composite configuration (`sub_configs`: Gemma 3's
    text_config and vision_config, T5Gemma's encoder and decoder), as the dict that sub-configuration is
    built from; a language family's byte vocabulary goes into each that has a vocabulary."""
    out: dict[str, dict[str, Any]] = {}
    declared = getattr(config_class, "sub_configs", None) or {}
    if not declared:
        return out
    composite = config_class()
    for name, sub_class in declared.items():
        # The default instance's own sub-configuration: its concrete class where the declared one is
        # AutoConfig (Audio Flamingo's Qwen2 text model).
        instance = getattr(composite, name, None)
        if not isinstance(instance, PreTrainedConfig):
            continue
        sub = type(instance)
        keys, defaults = config_keys(sub) | set(instance.to_dict()), instance.to_dict()
        aliases = getattr(sub, "attribute_map", {})
        values = {
            aliases.get(k, k): v
            for k, v in preset_config(size, defaults, keys, task.inputs == "audio").items()
        }
        if task.inputs == "bytes" and "vocab_size" in keys:
            values["vocab_size"] = VOCAB_SIZE
            for key in SPECIAL_TOKEN_KEYS:  # ids beyond the bytes: the padding byte (strict classes
                if isinstance(defaults.get(key), int) and defaults[key] >= VOCAB_SIZE:  # refuse None)
                    values[key] = PAD_ID
        if values:
            concrete = isinstance(sub_class, type) and issubclass(sub_class, PreTrainedConfig)
            # A sub-configuration declared as AutoConfig is built from a dict by its model_type.
            out[name] = (
                values
                if concrete and sub_class is not PreTrainedConfig
                else {"model_type": instance.model_type, **values}
            )
    return out


def parse_spec(args: dict[str, Any]) -> HFSpec:
    """Check the factory's arguments and work out the configuration's keyword arguments."""
    own = {k: args[k] for k in OWN_ARGS if k in args}
    overrides = {k: v for k, v in args.items() if k not in OWN_ARGS}
    task = task_named(own.get("task", DEFAULT_TASK))
    size = own.get("size")
    if size is not None and size not in SIZES:
        raise WorkloadError(
            f"size: got {size!r}; expected one of {', '.join(SIZES)} (or the configuration's own keys)"
        )
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
        defaults = {"vocab_size": VOCAB_SIZE} if task.inputs == "bytes" else {}
    else:
        raise WorkloadError(
            "model_type: missing; pass --workload-arg model_type=NAME (e.g. gpt2, llama) or "
            "--workload-arg config=PATH to a local config.json"
        )
    config_class = config_class_for(model_type, task)
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
    if task.inputs == "bytes" and position_key is not None and not any(k in given for k in POSITION_KEYS):
        defaults[position_key] = seq_len + _position_offset(task, model_type, config_class)
    class_defaults = config_class()
    # A preset sits over the file and under the command line: keys set by hand win.
    preset = preset_config(size, class_defaults.to_dict(), known, task.inputs == "audio") if size else {}
    # Through the class's aliases (GPT-2's num_hidden_layers is its n_layer): one key per field, and none
    # of a field set by hand.
    aliases = getattr(config_class, "attribute_map", {})
    by_hand = {aliases.get(k, k) for k in overrides}
    preset = {aliases.get(k, k): v for k, v in preset.items() if aliases.get(k, k) not in by_hand}
    if size:  # a composite model (a text and a vision config, an encoder and a decoder): each its preset
        preset |= {k: v for k, v in _sub_presets(size, config_class, task).items() if k not in by_hand}
    config = {k: v for k, v in {**defaults, **base, **preset, **overrides}.items() if k != "model_type"}
    vocab = config.get("vocab_size", getattr(class_defaults, "vocab_size", None))
    # A byte vocabulary has no room for the ids a configuration defaults to (GPT-2's 50256, also in
    # the config.json a GPT2Config(vocab_size=256) saves): drop those not set on the command line,
    # rather than build an embedding with an out-of-range padding index.
    for key in SPECIAL_TOKEN_KEYS:
        value = config[key] if key in config else getattr(class_defaults, key, None)
        if key not in overrides and isinstance(vocab, int) and isinstance(value, int) and value >= vocab:
            config[key] = None
    pad = (
        config["pad_token_id"] if "pad_token_id" in config else getattr(class_defaults, "pad_token_id", None)
    )
    if task.inputs == "bytes" and task.name != DEFAULT_TASK and "pad_token_id" in known and pad is None:
        # A decoder's classifier reads the last token that is not padding, and refuses a batch of more
        # than one sequence without a padding id, and an encoder masks its attention by it (ESM): byte
        # 255, which no UTF-8 text holds. (A causal LM keeps its own: its baselines predate this.)
        config["pad_token_id"] = PAD_ID
    return HFSpec(model_type, config, overrides, source, seq_len, batch_size, attn, float(lr), task, size)


def workload_name(spec: HFSpec) -> str:
    """A stable name from what changes the work: the model type, the config file, the keys set.

    Sorted keys, so the same arguments in another order keep the same baseline; a name that would be
    too long or hold characters a baseline directory may not, ends in a digest of the full arguments.
    """
    parts = ["hf", spec.model_type]
    if spec.task.name != DEFAULT_TASK:
        parts.append(spec.task.name)
    if spec.size is not None:
        parts.append(spec.size)
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
        if value != default and not (key == "attn" and value in UNNAMED_ATTN):
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
