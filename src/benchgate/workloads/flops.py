"""Peak-FLOPs table, per-token FLOPs formulas and Model FLOPs Utilisation (MFU).

Pure arithmetic with no torch import, so the table and formulas can be unit-tested and used when
rendering reports on machines without a GPU. The device name comes from ``torch.cuda.get_device_name()``
on the caller's side.

Every peak is the vendor's DENSE bf16 tensor-core figure. Datasheets headline the 2:4 structured-sparsity
number, which is twice the dense one; training does not use structured sparsity, so MFU against that
figure would halve every result.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

_BF16 = "bf16"


@dataclass(frozen=True)
class PeakFlops:
    device: str
    dtype: str
    flops_per_s: float
    source: str

    def __post_init__(self) -> None:
        # A zero or NaN peak would turn every MFU into inf/NaN far from where the bad entry was made.
        if not (math.isfinite(self.flops_per_s) and self.flops_per_s > 0):
            raise ValueError(f"flops_per_s: got {self.flops_per_s!r} (must be finite and > 0)")


def _bf16(device: str, tflops: float, source: str) -> PeakFlops:
    return PeakFlops(device=device, dtype=_BF16, flops_per_s=tflops * 1e12, source=source)


H100_SXM = _bf16(
    "H100 SXM",
    989.4,
    "NVIDIA H100 Tensor Core GPU datasheet, H100 SXM BF16 Tensor Core"
    " 1,979 TFLOPS with sparsity -> 989.4 dense",
)
H100_PCIE = _bf16(
    "H100 PCIe",
    756.0,
    "NVIDIA H100 Tensor Core GPU datasheet, H100 PCIe BF16 Tensor Core"
    " 1,513 TFLOPS with sparsity -> 756 dense",
)
H100_NVL = _bf16(
    "H100 NVL",
    835.5,
    "NVIDIA H100 Tensor Core GPU datasheet, H100 NVL BF16 Tensor Core 1,671 TFLOPS per GPU with sparsity"
    " -> 835.5 dense",
)
H200_SXM = _bf16(
    "H200 SXM",
    989.4,
    "NVIDIA H200 Tensor Core GPU datasheet, H200 SXM BF16 Tensor Core"
    " 1,979 TFLOPS with sparsity -> 989.4 dense",
)
H200_NVL = _bf16(
    "H200 NVL",
    835.5,
    "NVIDIA H200 Tensor Core GPU datasheet, H200 NVL BF16 Tensor Core"
    " 1,671 TFLOPS with sparsity -> 835.5 dense",
)
A100 = _bf16(
    "A100",
    312.0,
    "NVIDIA A100 Tensor Core GPU datasheet, BF16 Tensor Core 624 TFLOPS with sparsity -> 312 dense"
    " (same for SXM and PCIe, 40GB and 80GB)",
)
L4 = _bf16(
    "L4",
    121.0,
    "NVIDIA L4 Tensor Core GPU datasheet, BF16 Tensor Core 242 TFLOPS with sparsity -> 121 dense",
)
L40S = _bf16(
    "L40S",
    362.05,
    "NVIDIA L40S GPU datasheet, BF16 Tensor Core 733 TFLOPS with sparsity, 362.05 dense as listed",
)
A10 = _bf16(
    "A10",
    125.0,
    "NVIDIA A10 Tensor Core GPU datasheet, BF16 Tensor Core 250 TFLOPS with sparsity -> 125 dense",
)
# A10G (AWS G5) is deliberately absent: NVIDIA publishes no datasheet for it and its clocks differ from the
# A10, so reusing the A10 figure would be a guess. It looks up as None (no MFU) rather than a wrong MFU.

PEAK_FLOPS: tuple[PeakFlops, ...] = (H100_SXM, H100_PCIE, H100_NVL, H200_SXM, H200_NVL, A100, L4, L40S, A10)

# First match wins, so each variant (NVL, PCIe) precedes its family's broader rule: "NVIDIA H200 NVL" would
# otherwise be caught by the plain-H200 rule and get the SXM peak. Names are anchored so that "L40" does not
# match "L40S", nor "A10G"/"A100" the A10 rule.
_RULES: tuple[tuple[re.Pattern[str], PeakFlops], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), entry)
    for pattern, entry in (
        (r"^NVIDIA H100 NVL$", H100_NVL),
        (r"^NVIDIA H100 PCIe$", H100_PCIE),
        # The SXM5 board reports "NVIDIA H100 80GB HBM3"; require HBM3/SXM rather than any "H100" so an
        # unfamiliar variant yields None instead of borrowing the SXM peak.
        (r"^NVIDIA H100\b.*\b(HBM3|SXM)", H100_SXM),
        (r"^NVIDIA H200 NVL$", H200_NVL),
        (r"^NVIDIA H200\b", H200_SXM),
        # "A100-SXM4-80GB", "A100-SXM4-40GB", "A100 80GB PCIe", "A100-PCIE-40GB": one bf16 peak for all.
        (r"^NVIDIA A100[- ]", A100),
        (r"^NVIDIA L4$", L4),
        (r"^NVIDIA L40S$", L40S),
        (r"^NVIDIA A10$", A10),
    )
)


def lookup_peak(device_name: str, dtype: str) -> PeakFlops | None:
    """Dense peak for ``device_name`` as ``torch.cuda.get_device_name()`` reports it, e.g. "NVIDIA H100 NVL".

    Returns None for an unknown device, a CPU, or any ``dtype`` other than "bf16": the table holds bf16
    peaks only, and an fp32/tf32 run measured against a bf16 peak would report a misleadingly low MFU.
    """
    if dtype != _BF16:
        return None
    name = device_name.strip()
    for pattern, entry in _RULES:
        if pattern.search(name):
            return entry
    return None


@dataclass(frozen=True)
class ModelShape:
    n_params: int  # non-embedding parameters
    n_layers: int
    n_heads: int
    head_dim: int
    seq_len: int

    def __post_init__(self) -> None:
        # Reject nonsense at construction so a bad workload shape never shows up as a plausible MFU.
        for name in ("n_params", "n_layers", "n_heads", "head_dim", "seq_len"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: got {value!r} (must be an integer >= 1)")


def flops_per_token_6nd(shape: ModelShape) -> float:
    """Training FLOPs per token as 6N (Kaplan et al. 2020, "Scaling Laws for Neural Language Models").

    Forward is 2N (one multiply-add per parameter) and backward 4N (gradients w.r.t. activations and
    weights); N excludes embeddings, whose lookup is not a matmul.
    """
    return 6.0 * shape.n_params


def flops_per_token_attention(shape: ModelShape) -> float:
    """Training FLOPs per token as 6N + 12*L*H*Q*T (PaLM, Chowdhery et al. 2022, appendix B).

    The second term adds the attention score (QK^T) and value (AV) matmuls that 6N leaves out. It counts
    full (non-causal) attention, as PaLM and torchtitan do, so for a causal model it is an upper bound of
    the work done; keeping the convention keeps our MFU comparable with published figures.
    """
    attention = 12.0 * shape.n_layers * shape.n_heads * shape.head_dim * shape.seq_len
    return flops_per_token_6nd(shape) + attention


def _check_rate(name: str, value: float) -> None:
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{name}: got {value!r} (must be finite and >= 0)")


def mfu(tokens_per_s: float, flops_per_token: float, peak: PeakFlops | None, n_devices: int) -> float | None:
    """Model FLOPs Utilisation: achieved FLOP/s over the summed peak of ``n_devices`` devices.

    ``tokens_per_s`` is the GLOBAL rate across all devices, hence the peak is multiplied by ``n_devices``.
    Returns a fraction (0.4 means 40%), or None when ``peak`` is None (unknown device or dtype). Arguments
    are validated even then, so a bad call fails the same way on every machine.
    """
    _check_rate("tokens_per_s", tokens_per_s)
    _check_rate("flops_per_token", flops_per_token)
    if isinstance(n_devices, bool) or not isinstance(n_devices, int) or n_devices < 1:
        raise ValueError(f"n_devices: got {n_devices!r} (must be an integer >= 1)")
    if peak is None:
        return None
    return tokens_per_s * flops_per_token / (peak.flops_per_s * n_devices)
