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
    window: int  # a windowed model of stages' (Swin's) attention window


PRESETS = {
    "tiny": Preset(2, 64, 4, 128, 32, 8, 64, 2),
    "small": Preset(4, 256, 4, 1024, 64, 16, 256, 4),
    "base": Preset(12, 768, 12, 3072, 224, 16, 1500, 7),
}
# A model of stages halves its grid per stage: 64 pixels in Swin's patches of 4 keep 16 x 16, and 2 x 2
# at its 4th stage.
HIERARCHICAL_IMAGE = 64

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
        "embedding_size",  # ALBERT's and SqueezeBERT's embeddings (SqueezeBERT wants it = hidden_size)
        "intra_bottleneck_size",  # MobileBERT's
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
    "head_dim": ("head_dim", "d_kv", "attention_head_dim", "kv_channels", "rotary_dim", "v_head_dim"),
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
    if role == "image":  # [height, width]
        return [max(preset.image, HIERARCHICAL_IMAGE)] * len(default)
    if role == "layers":  # depths: at most the preset's layers per stage, at least one
        per_stage = max(1, preset.layers // 2)
        return [min(v, per_stage) for v in default]
    if role == "hidden":  # widths: the first stage at the preset's width / 2 (32 at least: BiT's group
        # norms take 32 groups), then as the default grows, in multiples of 8 (MobileViT's heads)
        first = max(32, preset.hidden // 2)
        return [max(8, 8 * round(first * v / default[0] / 8)) for v in default]
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
    # A model of stages (Swin's depths, ConvNeXt's hidden_sizes): the lists set it, and its numbers of
    # the same role are derived from them (Swin's hidden_size, ConvNeXt's num_stages), never set.
    staged = {role for role, names in ROLES.items() if any(isinstance(defaults.get(n), list) for n in names)}
    for role, names in ROLES.items():
        if role == "head_dim" or (role == "audio_positions" and not audio):
            continue
        value = getattr(preset, role)
        if role == "patch" and staged:  # its stem is made for its own patch (LeViT's 16, Swin's 4)
            continue
        if role == "image" and staged:
            value = max(value, HIERARCHICAL_IMAGE)
        for name in names:
            if name not in known:
                continue
            default = defaults.get(name)
            if role in staged and not isinstance(default, list):
                continue
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
        expand = defaults.get("expand")  # Mamba-2's heads span expand x hidden
        width = (expand * hidden if isinstance(expand, int) and "expand" in known else hidden) // heads
        for name in ROLES["head_dim"]:
            if name in known and isinstance(defaults.get(name), int | None):
                out[name] = width
        # Multi-head latent attention (DeepSeek-V2/V3): the rotary and plain halves of a query head,
        # and the low ranks its queries and keys pass through.
        for name, value in (("qk_rope_head_dim", width // 2), ("qk_nope_head_dim", width // 2)):
            if name in known and isinstance(defaults.get(name), int):
                out[name] = value
        for name in ("kv_lora_rank", "q_lora_rank"):
            if name in known and isinstance(defaults.get(name), int):
                out[name] = hidden // 2
        if "qk_rope_head_dim" in out and "head_dim" in out:  # there, the rotary part's width
            out["head_dim"] = out["qk_rope_head_dim"]
    if "num_kv_shared_layers" in known and isinstance(defaults.get("num_kv_shared_layers"), int):
        out["num_kv_shared_layers"] = 0  # Gemma 3n: layers that reuse an earlier one's cache, none of 2
    if "window_size" in known and isinstance(defaults.get("window_size"), int) and "layers" in staged:
        out["window_size"] = preset.window  # a window no wider than the smallest stage's grid
    if "layers" not in staged:
        _per_layer_lists(defaults, known, preset, out)
    return out


def _per_layer_lists(defaults: dict[str, Any], known: set[str], preset: Preset, out: dict[str, Any]) -> None:
    """Lists with one item per layer (`layer_types`, Zamba's `layers_block_type`), cut to the preset's
    layers: a class checks their length against its layer count."""
    layers = next(
        (
            defaults[n]
            for n in ROLES["layers"]
            if isinstance(defaults.get(n), int) and not isinstance(defaults.get(n), bool)
        ),
        None,
    )
    if not layers or not any(isinstance(out.get(n), int) for n in ROLES["layers"]):
        return
    for name, value in defaults.items():
        if name in out or name not in known or not isinstance(value, list) or len(value) != layers:
            continue
        out[name] = _cut(value, preset.layers)


def _cut(per_layer: list[Any], layers: int) -> list[Any]:
    """The first `layers` items, with a full-attention layer kept where the list has one and the cut
    would lose it: a hybrid's attention layer, every fourth, replaces the last linear one (OLMo Hybrid
    refuses a model without attention, Cohere's keys its cache by "full_attention")."""
    cut = per_layer[:layers]
    full = next((v for v in per_layer if isinstance(v, str) and "full" in v), None)
    if full is not None and full not in cut:
        cut[-1] = full
    return cut
