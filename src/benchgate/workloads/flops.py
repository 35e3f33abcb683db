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
#
# H20 ("NVIDIA H20", also "NVIDIA H20-3e" and "NVIDIA H20 NVL16") is deliberately absent too: NVIDIA publishes
# no H20 datasheet; the figure in circulation (FP16/BF16 148 TFLOPS, 296 with sparsity) comes from partner
# spec sheets quoted in the press. It cannot be derived either: the H20's tensor rate is capped well below
# what its 78 SMs (torch's multi_processor_count) would give at Hopper clocks. Set bench.peak_tflops for it.

B200 = _bf16(
    "B200",
    2250.0,
    "NVIDIA HGX B200 specifications (nvidia.com/en-us/data-center/hgx), per-GPU FP16/BF16 Tensor Core"
    " 4.5 PFLOPS, footnoted 'all petaFLOPS ... with sparsity except FP64' -> 2,250 dense (HGX B200, up to"
    " 1,000 W per GPU)",
)
GB200 = _bf16(
    "GB200",
    2500.0,
    "NVIDIA GB200 NVL72 specifications (nvidia.com/en-us/data-center/gb200-nvl72), GB200 Grace Blackwell"
    " Superchip FP16/BF16 Tensor Core 10 PFLOPS with sparsity for its 2 Blackwell GPUs: NVIDIA gives no"
    " per-GPU figure, so 10 / 2 GPUs = 5 PFLOPS per GPU with sparsity -> 2,500 dense (GPU configurable up"
    " to 1,200 W)",
)
GH200 = _bf16(
    "GH200",
    989.4,
    "Derived, secondhand: NVIDIA's GH200 Grace Hopper Superchip datasheet was not retrievable here. Its GPU"
    " is a Hopper GPU with H100 SXM's 132 SMs (public logs of 'NVIDIA GH200 480GB') and 1,980 MHz boost"
    " (Wikipedia, Hopper), so it takes the NVIDIA H100 datasheet's H100 SXM BF16 Tensor Core 1,979 TFLOPS"
    " with sparsity -> 989.4 dense; the module draws up to 1,000 W and a lower power cap lowers the peak",
)
H800_SXM = _bf16(
    "H800 SXM",
    989.4,
    "Secondhand: NVIDIA's H800 datasheet was not retrievable here; OEM and third-party spec tables give the"
    " H800 SXM5 (132 SMs) the H100 SXM's BF16 Tensor Core 1,979 TFLOPS with sparsity (NVLink cut to"
    " 400 GB/s) -> 989.4 dense",
)
H800_PCIE = _bf16(
    "H800 PCIe",
    756.0,
    "Lenovo Press LP1814 'ThinkSystem NVIDIA H800 PCIe Gen5 GPU' spec table, BF16 Tensor Core"
    " 1,513 TFLOPS with sparsity -> 756 dense (as quoted; NVIDIA's own H800 datasheet not retrievable here)",
)

PEAK_FLOPS: tuple[PeakFlops, ...] = (
    H100_SXM,
    H100_PCIE,
    H100_NVL,
    H200_SXM,
    H200_NVL,
    A100,
    L4,
    L40S,
    A10,
    B200,
    GB200,
    GH200,
    H800_SXM,
    H800_PCIE,
)

# First match wins, so each variant (NVL, PCIe) precedes its family's broader rule: "NVIDIA H200 NVL" would
# otherwise be caught by the plain-H200 rule and get the SXM peak. Names are anchored so that "L40" does not
# match "L40S", nor "A10G"/"A100" the A10 rule, nor "NVIDIA H20" the H200 rule, nor "NVIDIA GB200" the B200
# rule. The names are what torch.cuda.get_device_name() returns (NVIDIA's driver product names): matched
# against the board's name with any " MIG <profile>" suffix removed (see lookup_peak).
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
        # "NVIDIA H800 PCIe" before the SXM5 board's bare "NVIDIA H800"; "NVIDIA H800 NVL" matches neither.
        (r"^NVIDIA H800 PCIe$", H800_PCIE),
        (r"^NVIDIA H800$", H800_SXM),
        # The three GH200 names in NVIDIA's driver list (open-gpu-kernel-modules README, "Compatible GPUs");
        # another would be an unfamiliar variant (None).
        (r"^NVIDIA GH200 (120GB|480GB|144G HBM3e)$", GH200),
        (r"^NVIDIA GB200$", GB200),
        (r"^NVIDIA B200$", B200),
        # "A100-SXM4-80GB", "A100-SXM4-40GB", "A100 80GB PCIe", "A100-PCIE-40GB": one bf16 peak for all.
        (r"^NVIDIA A100[- ]", A100),
        (r"^NVIDIA L4$", L4),
        (r"^NVIDIA L40S$", L40S),
        (r"^NVIDIA A10$", A10),
    )
)


@dataclass(frozen=True)
class BoardSMs:
    """The streaming multiprocessors of a whole board: the denominator when a MIG slice's peak is scaled."""

    sms: int
    source: str


# SMs of each whole board, as torch's get_device_properties().multi_processor_count reports them when MIG is
# off: a MIG slice's multi_processor_count is divided by this. A board missing here (H100 NVL, H200 NVL, ...)
# gives a MIG slice no peak rather than a guessed one. Only boards that support MIG are needed.
# JAX_GPU_SPEC is JAX's GPU hardware table (the "Exposes GPU hardware information" module, fallback for jaxlib
# < 0.12, copyright 2026): per CUDA device name, its core_count is the SM count (XLA's device descriptions).
_JAX_GPU_SPEC = "JAX GPU spec table (core_count by CUDA device name)"
_BOARD_SMS: dict[str, BoardSMs] = {
    H100_SXM.device: BoardSMs(
        132, f"NVIDIA H100 Tensor Core GPU Architecture whitepaper: H100 SXM5 132 SMs; {_JAX_GPU_SPEC}"
    ),
    H100_PCIE.device: BoardSMs(
        114, f"NVIDIA H100 Tensor Core GPU Architecture whitepaper: H100 PCIe 114 SMs; {_JAX_GPU_SPEC}"
    ),
    H200_SXM.device: BoardSMs(132, f"{_JAX_GPU_SPEC}: 'NVIDIA H200 141GB HBM3e' 132"),
    A100.device: BoardSMs(
        108,
        f"NVIDIA A100 Tensor Core GPU Architecture whitepaper: 108 SMs; {_JAX_GPU_SPEC}: 108, three A100s",
    ),
    B200.device: BoardSMs(148, f"{_JAX_GPU_SPEC}: 'NVIDIA B200' 148 (torch logs: multi_processor_count=148)"),
    GB200.device: BoardSMs(152, f"{_JAX_GPU_SPEC}: 'NVIDIA GB200' 152"),
    GH200.device: BoardSMs(132, "public benchmark log of 'NVIDIA GH200 480GB': sm_90, 132 SMs"),
    H800_SXM.device: BoardSMs(132, "public H800 SXM5 GEMM notes: 132 SMs (no NVIDIA source read here)"),
    H800_PCIE.device: BoardSMs(
        114, "public logs of 'NVIDIA H800 PCIe': SM90, 114 SMs (no NVIDIA source here)"
    ),
}

# "NVIDIA H100 80GB HBM3 MIG 1g.10gb", "NVIDIA A100-SXM4-40GB MIG 3g.20gb": board name, " MIG ", profile.
_MIG = re.compile(r"^(?P<board>.+?)\s+MIG(?:\s+(?P<profile>\S.*))?$", re.IGNORECASE)


@dataclass(frozen=True)
class PeakResolution:
    """The dense peak for a device, or None and why: what a run records next to an absent MFU."""

    peak: PeakFlops | None
    reason: str


def _check_sm_count(sm_count: int | None) -> None:
    if sm_count is None:
        return
    if isinstance(sm_count, bool) or not isinstance(sm_count, int) or sm_count < 1:
        raise ValueError(f"sm_count: got {sm_count!r} (must be an integer >= 1 or None)")


def _match(board_name: str) -> PeakFlops | None:
    for pattern, entry in _RULES:
        if pattern.search(board_name):
            return entry
    return None


def resolve_peak(device_name: str, dtype: str, sm_count: int | None = None) -> PeakResolution:
    """The dense peak of ``device_name`` as lookup_peak gives it, with the reason when there is none.

    ``sm_count`` is the device's ``torch.cuda.get_device_properties(device).multi_processor_count``. It is
    used only for a MIG slice (a name with " MIG "), whose peak is the whole board's scaled by the slice's SMs
    over the board's SMs; for a whole board the datasheet figure stands and ``sm_count`` is not consulted.
    """
    _check_sm_count(sm_count)
    if dtype != _BF16:
        return PeakResolution(None, f"no peak for dtype {dtype!r}: the table holds dense bf16 peaks only")
    name = device_name.strip()
    mig = _MIG.match(name)
    board_name = mig.group("board") if mig else name
    entry = _match(board_name)
    if entry is None:
        return PeakResolution(None, f"no datasheet peak for {board_name!r} in the table")
    if mig is None:
        return PeakResolution(entry, f"datasheet peak of {entry.device}")
    profile = mig.group("profile") or "slice"
    if sm_count is None:
        return PeakResolution(
            None,
            f"{name!r} is a MIG slice and no sm_count was given: its share of the {entry.device} peak is"
            " unknown (pass get_device_properties().multi_processor_count)",
        )
    board = _BOARD_SMS.get(entry.device)
    if board is None:
        return PeakResolution(
            None, f"{name!r} is a MIG slice of {entry.device}, whose whole-board SM count is not in the table"
        )
    if sm_count > board.sms:
        return PeakResolution(
            None,
            f"{name!r} reports {sm_count} SMs, more than the {board.sms} of a whole {entry.device}:"
            " the board table does not fit this device",
        )
    scaled = PeakFlops(
        device=f"{entry.device} MIG {profile} ({sm_count}/{board.sms} SMs)",
        dtype=entry.dtype,
        flops_per_s=entry.flops_per_s * sm_count / board.sms,
        source=(
            f"MIG slice {profile}: the {entry.device} peak x {sm_count}/{board.sms} SMs (slice SMs from"
            f" multi_processor_count; whole board: {board.source}). Board peak: {entry.source}"
        ),
    )
    return PeakResolution(scaled, f"MIG slice: {sm_count} of {board.sms} {entry.device} SMs")


def lookup_peak(device_name: str, dtype: str, sm_count: int | None = None) -> PeakFlops | None:
    """Dense peak for ``device_name`` as ``torch.cuda.get_device_name()`` reports it, e.g. "NVIDIA H100 NVL".

    Returns None for an unknown device, a CPU, or any ``dtype`` other than "bf16": the table holds bf16
    peaks only, and an fp32/tf32 run measured against a bf16 peak would report a misleadingly low MFU.
    A MIG slice ("NVIDIA H100 80GB HBM3 MIG 1g.10gb") gets its board's peak scaled by ``sm_count`` (the
    slice's ``multi_processor_count``) over the board's SMs, or None without ``sm_count`` or when the board's
    SM count is not known. ``resolve_peak`` gives the same answer with the reason for a None.
    """
    return resolve_peak(device_name, dtype, sm_count).peak


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
