"""Unit tests for workloads/flops.py: peak table lookup, per-token FLOPs formulas and MFU arithmetic."""

from __future__ import annotations

import math
import re

import pytest

from benchgate.workloads.flops import (
    PEAK_FLOPS,
    ModelShape,
    PeakFlops,
    flops_per_token_6nd,
    flops_per_token_attention,
    lookup_peak,
    mfu,
    resolve_peak,
)

# GPT-2 124M-like: ~85M non-embedding parameters, 12 layers x 12 heads x 64, context 1024.
GPT2_SHAPE = ModelShape(n_params=85_000_000, n_layers=12, n_heads=12, head_dim=64, seq_len=1024)
H100_PEAK = 989.4e12


@pytest.mark.parametrize(
    ("device_name", "expected"),
    [
        pytest.param("NVIDIA H100 80GB HBM3", 989.4e12, id="h100-sxm"),
        pytest.param("NVIDIA H100 PCIe", 756e12, id="h100-pcie"),
        pytest.param("NVIDIA H100 NVL", 835.5e12, id="h100-nvl-not-sxm"),
        pytest.param("NVIDIA H200", 989.4e12, id="h200-sxm"),
        pytest.param("NVIDIA H200 NVL", 835.5e12, id="h200-nvl-not-sxm"),
        pytest.param("NVIDIA A100-SXM4-80GB", 312e12, id="a100-sxm4-80gb"),
        pytest.param("NVIDIA A100-SXM4-40GB", 312e12, id="a100-sxm4-40gb"),
        pytest.param("NVIDIA A100 80GB PCIe", 312e12, id="a100-pcie-80gb"),
        pytest.param("NVIDIA A100-PCIE-40GB", 312e12, id="a100-pcie-40gb"),
        pytest.param("NVIDIA L4", 121e12, id="l4"),
        pytest.param("NVIDIA L40S", 362.05e12, id="l40s"),
        pytest.param("NVIDIA A10", 125e12, id="a10"),
        pytest.param("NVIDIA B200", 2250e12, id="b200"),
        pytest.param("NVIDIA GB200", 2500e12, id="gb200"),
        pytest.param("NVIDIA GH200 480GB", 989.4e12, id="gh200-480gb"),
        pytest.param("NVIDIA GH200 144G HBM3e", 989.4e12, id="gh200-144g-hbm3e"),
        pytest.param("NVIDIA GH200 120GB", 989.4e12, id="gh200-120gb"),
        pytest.param("NVIDIA H800", 989.4e12, id="h800-sxm"),
        pytest.param("NVIDIA H800 PCIe", 756e12, id="h800-pcie-not-sxm"),
        pytest.param("NVIDIA H200 141GB HBM3e", 989.4e12, id="h200-jax-device-kind"),
        pytest.param("nvidia h100 nvl", 835.5e12, id="case-insensitive"),
        pytest.param("  NVIDIA L4\n", 121e12, id="surrounding-whitespace"),
        pytest.param("NVIDIA A10G", None, id="a10g-no-datasheet"),
        pytest.param("NVIDIA L40", None, id="l40-not-l40s"),
        pytest.param("NVIDIA GeForce RTX 4090", None, id="unknown-gpu"),
        pytest.param("NVIDIA H100", None, id="ambiguous-h100"),
        # H20 has no NVIDIA datasheet (see flops.py); above all it must not borrow the H200's peak.
        pytest.param("NVIDIA H20", None, id="h20-not-h200"),
        pytest.param("NVIDIA H20-3e", None, id="h20-3e-not-h200"),
        pytest.param("NVIDIA H20 NVL16", None, id="h20-nvl16-not-h200"),
        pytest.param("NVIDIA H800 NVL", None, id="h800-nvl-unknown-variant"),
        pytest.param("NVIDIA H8000", None, id="h800-anchored"),
        pytest.param("NVIDIA GH200", None, id="gh200-unlisted-name"),
        pytest.param("NVIDIA GB300", None, id="gb300-not-gb200"),
        pytest.param("NVIDIA B300 SXM6 AC", None, id="b300-not-b200"),
        pytest.param("NVIDIA B2000", None, id="b200-anchored"),
        pytest.param("cpu", None, id="cpu"),
        pytest.param("", None, id="empty"),
    ],
)
def test_lookup_peak_bf16_by_device_name(device_name: str, expected: float | None) -> None:
    peak = lookup_peak(device_name, "bf16")
    if expected is None:
        assert peak is None
    else:
        assert peak is not None
        assert peak.dtype == "bf16"
        assert peak.flops_per_s == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    "dtype",
    [
        pytest.param("fp32", id="fp32"),
        pytest.param("tf32", id="tf32"),
        pytest.param("fp16", id="fp16"),
        pytest.param("bfloat16", id="torch-spelling"),
        pytest.param("BF16", id="upper-case"),
    ],
)
def test_lookup_peak_non_bf16_dtype_is_none(dtype: str) -> None:
    assert lookup_peak("NVIDIA H100 80GB HBM3", dtype) is None


def test_lookup_peak_nvl_and_sxm_are_distinct_entries() -> None:
    h100_sxm = lookup_peak("NVIDIA H100 80GB HBM3", "bf16")
    h100_nvl = lookup_peak("NVIDIA H100 NVL", "bf16")
    h200_sxm = lookup_peak("NVIDIA H200", "bf16")
    h200_nvl = lookup_peak("NVIDIA H200 NVL", "bf16")
    assert h100_sxm is not None and h100_nvl is not None and h200_sxm is not None and h200_nvl is not None
    assert (h100_sxm.device, h100_nvl.device) == ("H100 SXM", "H100 NVL")
    assert (h200_sxm.device, h200_nvl.device) == ("H200 SXM", "H200 NVL")


@pytest.mark.parametrize("entry", [pytest.param(e, id=e.device) for e in PEAK_FLOPS])
def test_peak_table_entry_is_cited_and_plausible(entry: PeakFlops) -> None:
    source = entry.source.lower()
    # Every entry names its document (a datasheet or spec table) and shows the sparse -> dense step.
    assert "datasheet" in source or "specifications" in source or "spec table" in source
    assert "sparsity" in source and "dense" in source
    assert entry.dtype == "bf16"
    assert math.isfinite(entry.flops_per_s)
    # Above 1e13 catches a value typed in TFLOPS; below 3e15 catches a sparsity figure for any GPU here
    # (the largest, GB200, is 2.5e15 dense and 5e15 with sparsity).
    assert 1e13 < entry.flops_per_s < 3e15


@pytest.mark.parametrize(
    ("entry_device", "sparse_tflops"),
    [
        pytest.param("B200", 4500.0, id="b200"),
        pytest.param("GB200", 5000.0, id="gb200"),
        pytest.param("GH200", 1979.0, id="gh200"),
        pytest.param("H800 SXM", 1979.0, id="h800-sxm"),
        pytest.param("H800 PCIe", 1513.0, id="h800-pcie"),
    ],
)
def test_new_entries_are_half_the_sparsity_figure(entry_device: str, sparse_tflops: float) -> None:
    (entry,) = [e for e in PEAK_FLOPS if e.device == entry_device]
    assert entry.flops_per_s == pytest.approx(sparse_tflops * 1e12 / 2, rel=1e-3)


def test_peak_table_devices_are_unique() -> None:
    devices = [entry.device for entry in PEAK_FLOPS]
    assert len(devices) == len(set(devices))


@pytest.mark.parametrize(
    "flops_per_s",
    [
        pytest.param(0.0, id="zero"),
        pytest.param(-1.0, id="negative"),
        pytest.param(math.nan, id="nan"),
        pytest.param(math.inf, id="inf"),
    ],
)
def test_peak_flops_rejects_bad_peak(flops_per_s: float) -> None:
    with pytest.raises(ValueError, match="flops_per_s"):
        PeakFlops(device="x", dtype="bf16", flops_per_s=flops_per_s, source="x datasheet")


def test_flops_per_token_6nd_gpt2_shape() -> None:
    assert flops_per_token_6nd(GPT2_SHAPE) == 510_000_000.0


def test_flops_per_token_attention_gpt2_shape() -> None:
    # 6 * 85e6 + 12 * 12 layers * 12 heads * 64 head_dim * 1024 tokens = 5.1e8 + 113,246,208.
    assert flops_per_token_attention(GPT2_SHAPE) == 623_246_208.0


def test_flops_per_token_attention_exceeds_6nd() -> None:
    assert flops_per_token_attention(GPT2_SHAPE) > flops_per_token_6nd(GPT2_SHAPE)


def test_flops_per_token_attention_term_scales_linearly_with_seq_len() -> None:
    short = ModelShape(n_params=1, n_layers=2, n_heads=3, head_dim=4, seq_len=5)
    long = ModelShape(n_params=1, n_layers=2, n_heads=3, head_dim=4, seq_len=10)
    short_attn = flops_per_token_attention(short) - flops_per_token_6nd(short)
    long_attn = flops_per_token_attention(long) - flops_per_token_6nd(long)
    assert short_attn == 12 * 2 * 3 * 4 * 5
    assert long_attn == 2 * short_attn


@pytest.mark.parametrize(
    ("field", "value"),
    [
        pytest.param("n_params", 0, id="zero-params"),
        pytest.param("n_layers", -1, id="negative-layers"),
        pytest.param("seq_len", 1024.0, id="float-seq-len"),
        pytest.param("n_heads", True, id="bool-heads"),
    ],
)
def test_model_shape_rejects_bad_field(field: str, value: object) -> None:
    kwargs: dict[str, object] = {"n_params": 1, "n_layers": 1, "n_heads": 1, "head_dim": 1, "seq_len": 1}
    kwargs[field] = value
    with pytest.raises(ValueError, match=field):
        ModelShape(**kwargs)


def test_mfu_single_device_arithmetic() -> None:
    peak = lookup_peak("NVIDIA H100 80GB HBM3", "bf16")
    result = mfu(1e5, 6e8, peak, 1)
    assert result == pytest.approx(1e5 * 6e8 / H100_PEAK, rel=1e-12)
    assert result == pytest.approx(0.0606428, rel=1e-5)


def test_mfu_divides_by_summed_peak_of_all_devices() -> None:
    peak = lookup_peak("NVIDIA H100 80GB HBM3", "bf16")
    one = mfu(8e5, 6e8, peak, 1)
    eight = mfu(8e5, 6e8, peak, 8)
    assert one is not None and eight is not None
    assert eight == pytest.approx(one / 8, rel=1e-12)


def test_mfu_zero_throughput_is_zero() -> None:
    assert mfu(0.0, 6e8, lookup_peak("NVIDIA A100-SXM4-80GB", "bf16"), 1) == 0.0


def test_mfu_unknown_peak_is_none() -> None:
    assert mfu(1e5, 6e8, None, 1) is None


@pytest.mark.parametrize(
    ("tokens_per_s", "flops_per_token", "n_devices", "message"),
    [
        pytest.param(-1.0, 6e8, 1, "tokens_per_s: got -1.0", id="negative-tokens"),
        pytest.param(math.nan, 6e8, 1, "tokens_per_s: got nan", id="nan-tokens"),
        pytest.param(math.inf, 6e8, 1, "tokens_per_s: got inf", id="inf-tokens"),
        pytest.param(1e5, -6e8, 1, "flops_per_token: got -600000000.0", id="negative-flops"),
        pytest.param(1e5, math.nan, 1, "flops_per_token: got nan", id="nan-flops"),
        pytest.param(1e5, math.inf, 1, "flops_per_token: got inf", id="inf-flops"),
        pytest.param(1e5, 6e8, 0, "n_devices: got 0", id="zero-devices"),
        pytest.param(1e5, 6e8, -2, "n_devices: got -2", id="negative-devices"),
    ],
)
@pytest.mark.parametrize(
    "peak",
    [
        pytest.param(PeakFlops("H100 SXM", "bf16", H100_PEAK, "datasheet"), id="known-peak"),
        pytest.param(None, id="unknown-peak"),
    ],
)
def test_mfu_rejects_bad_input(
    tokens_per_s: float, flops_per_token: float, n_devices: int, message: str, peak: PeakFlops | None
) -> None:
    # The message names the argument and the offending value, so a user can act on it without a traceback.
    with pytest.raises(ValueError, match=re.escape(message)):
        mfu(tokens_per_s, flops_per_token, peak, n_devices)


# MIG slices: the board's peak scaled by the slice's SMs over the whole board's SMs.


@pytest.mark.parametrize(
    ("device_name", "sm_count", "board_peak", "board_sms"),
    [
        pytest.param("NVIDIA H100 80GB HBM3 MIG 1g.10gb", 16, 989.4e12, 132, id="h100-sxm-1g"),
        pytest.param("NVIDIA H100 80GB HBM3 MIG 3g.40gb", 60, 989.4e12, 132, id="h100-sxm-3g"),
        pytest.param("NVIDIA H100 80GB HBM3 MIG 1g.10gb+me", 16, 989.4e12, 132, id="h100-media-extension"),
        pytest.param("NVIDIA H100 PCIe MIG 1g.10gb", 14, 756e12, 114, id="h100-pcie"),
        pytest.param("NVIDIA A100-SXM4-40GB MIG 1g.5gb", 14, 312e12, 108, id="a100-sxm4-40gb"),
        pytest.param("NVIDIA A100 80GB PCIe MIG 7g.80gb", 98, 312e12, 108, id="a100-pcie-7g"),
        pytest.param("NVIDIA H200 MIG 1g.18gb", 16, 989.4e12, 132, id="h200"),
        pytest.param("NVIDIA B200 MIG 1g.23gb", 18, 2250e12, 148, id="b200"),
        pytest.param("NVIDIA GB200 MIG 1g.24gb", 18, 2500e12, 152, id="gb200"),
        pytest.param("NVIDIA GH200 480GB MIG 1g.12gb", 16, 989.4e12, 132, id="gh200"),
        pytest.param("NVIDIA H800 MIG 2g.20gb", 32, 989.4e12, 132, id="h800-sxm"),
        pytest.param("NVIDIA H800 PCIe MIG 1g.10gb", 14, 756e12, 114, id="h800-pcie"),
        pytest.param("nvidia h100 80gb hbm3 mig 1g.10gb", 16, 989.4e12, 132, id="case-insensitive"),
    ],
)
def test_mig_slice_peak_is_scaled_by_sms(
    device_name: str, sm_count: int, board_peak: float, board_sms: int
) -> None:
    peak = lookup_peak(device_name, "bf16", sm_count=sm_count)
    assert peak is not None
    assert peak.flops_per_s == pytest.approx(board_peak * sm_count / board_sms, rel=1e-12)
    # The entry says it is a slice and how it was scaled, so a report cannot mistake it for the whole board.
    assert "MIG" in peak.device
    assert f"({sm_count}/{board_sms} SMs)" in peak.device
    assert f"x {sm_count}/{board_sms} SMs" in peak.source
    assert "sparsity" in peak.source  # the board's own citation is carried along


def test_mig_slice_keeps_the_profile_and_board_in_its_names() -> None:
    peak = lookup_peak("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "bf16", sm_count=16)
    assert peak is not None
    assert peak.device == "H100 SXM MIG 1g.10gb (16/132 SMs)"
    assert peak.source.startswith("MIG slice 1g.10gb: the H100 SXM peak x 16/132 SMs")
    assert peak.flops_per_s == pytest.approx(119.92727e12, rel=1e-6)


def test_mig_slice_mfu_is_against_the_slice_not_the_card() -> None:
    whole = lookup_peak("NVIDIA H100 80GB HBM3", "bf16", sm_count=132)
    slice_ = lookup_peak("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "bf16", sm_count=16)
    assert whole is not None and slice_ is not None
    on_whole = mfu(1e4, 6e8, whole, 1)
    on_slice = mfu(1e4, 6e8, slice_, 1)
    assert on_whole is not None and on_slice is not None
    assert on_slice == pytest.approx(on_whole * 132 / 16, rel=1e-12)


def test_whole_board_ignores_sm_count() -> None:
    # The caller passes multi_processor_count for every device; a whole board keeps its datasheet figure.
    for sm_count in (None, 132, 100):
        peak = lookup_peak("NVIDIA H100 80GB HBM3", "bf16", sm_count=sm_count)
        assert peak is not None
        assert peak.flops_per_s == 989.4e12
        assert peak.device == "H100 SXM"


def test_positional_two_argument_call_still_works() -> None:
    peak = lookup_peak("NVIDIA H100 NVL", "bf16")
    assert peak is not None and peak.device == "H100 NVL"


@pytest.mark.parametrize(
    ("device_name", "sm_count", "reason_part"),
    [
        pytest.param("NVIDIA H100 80GB HBM3 MIG 1g.10gb", None, "no sm_count was given", id="mig-without-sm"),
        pytest.param("NVIDIA H100 NVL MIG 1g.12gb", 16, "SM count is not in the table", id="h100-nvl-board"),
        pytest.param("NVIDIA H200 NVL MIG 1g.18gb", 16, "SM count is not in the table", id="h200-nvl-board"),
        pytest.param("NVIDIA H100 80GB HBM3 MIG 1g.10gb", 133, "more than the 132", id="more-sms-than-board"),
        pytest.param("NVIDIA H20 MIG 1g.12gb", 10, "no datasheet peak for 'NVIDIA H20'", id="h20-slice"),
        pytest.param("NVIDIA A10G MIG 1g.6gb", 10, "no datasheet peak for 'NVIDIA A10G'", id="unknown-board"),
    ],
)
def test_mig_slice_without_a_defensible_peak_is_none_with_reason(
    device_name: str, sm_count: int | None, reason_part: str
) -> None:
    assert lookup_peak(device_name, "bf16", sm_count=sm_count) is None
    resolution = resolve_peak(device_name, "bf16", sm_count=sm_count)
    assert resolution.peak is None
    assert reason_part in resolution.reason


def test_mig_name_is_not_matched_as_its_whole_board_without_sm_count() -> None:
    # Before MIG handling this name matched the H100 SXM rule and got the whole card's peak.
    assert lookup_peak("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "bf16") is None


def test_mig_slice_of_non_bf16_dtype_is_none() -> None:
    resolution = resolve_peak("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "fp32", sm_count=16)
    assert resolution.peak is None
    assert "bf16" in resolution.reason


def test_resolve_peak_reasons_for_whole_boards() -> None:
    known = resolve_peak("NVIDIA B200", "bf16")
    assert known.peak is not None and known.peak.device == "B200"
    unknown = resolve_peak("NVIDIA H20", "bf16", sm_count=78)
    assert unknown.peak is None and "NVIDIA H20" in unknown.reason


@pytest.mark.parametrize(
    "sm_count",
    [
        pytest.param(0, id="zero"),
        pytest.param(-4, id="negative"),
        pytest.param(True, id="bool"),
        pytest.param(16.0, id="float"),
    ],
)
def test_lookup_peak_rejects_bad_sm_count(sm_count: object) -> None:
    with pytest.raises(ValueError, match="sm_count: got"):
        lookup_peak("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "bf16", sm_count=sm_count)  # type: ignore[arg-type]
