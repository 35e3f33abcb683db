"""`size=tiny|small|base`: one scale for every model type, set through each configuration's own keys.

Configurations name the same dimension many ways (GPT-2's `n_layer`, BERT's `num_hidden_layers`, T5's
`num_layers`, BART's `encoder_layers` and `decoder_layers`; `n_embd`, `hidden_size`, `d_model`, `dim`,
`embed_dim` ...). A preset names each dimension once (ROLES) and sets every key of the model's
configuration class that plays that role, with the class's default telling whether a key is a number
or a per-stage list (a Swin's `depths`, a ResNet's `hidden_sizes`). Keys the user sets win over the
preset, and a key the class lacks is never invented.

| size  | layers | hidden | heads | intermediate | image | patch | audio positions |
|-------|--------|--------|-------|--------------|-------|-------|-----------------|
| tiny  | 2      | 64     | 4     | 128          | 32    | 8     | 64              |
| small | 4      | 256    | 4     | 1024         | 64    | 16    | 256             |
| base  | 12     | 768    | 12    | 3072         | 224   | 16    | 1500            |

base is BERT-base's and ViT-B/16's shape; tiny trains a step of most types in about a second on a CPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SIZES = ("tiny", "small", "base")


@dataclass(frozen=True)
class Preset:
    layers: int
    hidden: int
    heads: int
    intermediate: int
    image: int
    patch: int
    audio_positions: int  # Whisper's encoder positions (its input frames are twice as many)


PRESETS = {
    "tiny": Preset(2, 64, 4, 128, 32, 8, 64),
    "small": Preset(4, 256, 4, 1024, 64, 16, 256),
    "base": Preset(12, 768, 12, 3072, 224, 16, 1500),
}

# Each dimension's names across transformers' configuration classes.
ROLES: dict[str, tuple[str, ...]] = {
    "layers": (
        "num_hidden_layers",
        "n_layer",
        "n_layers",
        "num_layers",
        "encoder_layers",
        "decoder_layers",
        "num_encoder_layers",
        "num_decoder_layers",
        "depths",
    ),
    "hidden": (
        "hidden_size",
        "n_embd",
        "n_embed",
        "d_model",
        "dim",
        "embed_dim",
        "hidden_sizes",
        "embed_dims",
    ),
    "heads": (
        "num_attention_heads",
        "n_head",
        "n_heads",
        "num_heads",
        "encoder_attention_heads",
        "decoder_attention_heads",
        "num_key_value_heads",
    ),
    "intermediate": (
        "intermediate_size",
        "n_inner",
        "d_ff",
        "d_inner",
        "dff",
        "ffn_dim",
        "encoder_ffn_dim",
        "decoder_ffn_dim",
        "ffn_hidden_size",
    ),
    "head_dim": ("head_dim", "d_kv", "attention_head_dim", "kv_channels"),
    "image": ("image_size",),
    "patch": ("patch_size",),
    "audio_positions": ("max_source_positions",),
}
# DistilBERT's `dim` is its width and its `hidden_dim` the MLP's: the one class where hidden_dim is that.
FFN_BESIDE_DIM = "hidden_dim"


def _scaled_list(default: list[Any], role: str, preset: Preset) -> list[Any] | None:
    """A per-stage list (hierarchical models) at the preset's scale; None where it is no list of ints."""
    if not default or not all(isinstance(v, int) and not isinstance(v, bool) for v in default):
        return None
    if role in ("image", "patch"):  # [height, width]
        return [getattr(preset, role)] * len(default)
    if role == "layers":  # depths: at most the preset's layers per stage, at least one
        per_stage = max(1, preset.layers // 2)
        return [min(v, per_stage) for v in default]
    if role == "hidden":  # widths: the first stage at the preset's width / 4, then as the default grows
        first = max(8, preset.hidden // 4)
        return [max(8, round(first * v / default[0])) for v in default]
    if role == "heads":  # heads per stage: one per 32 channels of the scaled widths, at least one
        return [max(1, min(v, preset.heads * (2**i) // 4 or 1)) for i, v in enumerate(default)]
    return None


def preset_config(
    size: str, defaults: dict[str, Any], known: set[str], audio: bool = False
) -> dict[str, Any]:
    """The configuration keys `size` sets, for a class whose default instance is `defaults` (its
    to_dict()) and whose keys are `known`; only roles the class has, as numbers or lists as it has them.
    `audio`: an audio model's (elsewhere `max_source_positions` is a text encoder's context)."""
    preset = PRESETS[size]
    out: dict[str, Any] = {}
    for role, names in ROLES.items():
        if role == "head_dim" or (role == "audio_positions" and not audio):
            continue
        value = getattr(preset, role)
        for name in names:
            if name not in known:
                continue
            default = defaults.get(name)
            if isinstance(default, list):
                scaled = _scaled_list(default, role, preset)
                if scaled is not None:
                    out[name] = scaled
            elif default is None or (isinstance(default, int) and not isinstance(default, bool)):
                out[name] = value
    if "dim" in out and FFN_BESIDE_DIM in known and isinstance(defaults.get(FFN_BESIDE_DIM), int):
        out[FFN_BESIDE_DIM] = preset.intermediate
    heads = next((out[n] for n in ROLES["heads"] if isinstance(out.get(n), int)), None)
    hidden = next((out[n] for n in ROLES["hidden"] if isinstance(out.get(n), int)), None)
    if heads and hidden:  # a head's width where the class names it apart from hidden / heads
        for name in ROLES["head_dim"]:
            if name in known and isinstance(defaults.get(name), int | None):
                out[name] = hidden // heads
    return out
