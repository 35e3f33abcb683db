"""No silent CPU: where a GPU was asked for or given, torch must see one, or the run stops at once.

A GPU node whose torch cannot reach CUDA (a CPU wheel of torch, a container without the NVIDIA
driver, CUDA_VISIBLE_DEVICES hiding every device, a driver older than the wheel's CUDA) would otherwise
benchmark the CPU with `device = "auto"` and report green against a CPU baseline. A GPU is expected
where:

    bench.device = "cuda"                     (the config, `--device cuda`)
    NVIDIA_VISIBLE_DEVICES names devices      ("0", "0,1", "GPU-<uuid>": what the NVIDIA device plugin
                                               sets in a pod that was given GPUs; "all" alone is only an
                                               image default and names none, "none"/"void" none)
    /dev/nvidia0 exists                       (the container runtime mounted a GPU)

`bench.device = "cpu"` asks for the CPU explicitly and is never refused. The refusal is a ConfigError
(exit 2) naming what was expected and why, what torch sees, and the likely cause.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from benchgate.errors import ConfigError

# Values of NVIDIA_VISIBLE_DEVICES that give a container no GPU, or name none in particular.
_NO_DEVICES = frozenset({"", "none", "void"})
_ALL_DEVICES = "all"


def gpu_expected(
    requested_device: str, environ: Mapping[str, str] | None = None, dev: Path = Path("/dev")
) -> str | None:
    """Why this process should have a GPU (a phrase naming the setting), or None."""
    if requested_device == "cpu":
        return None
    if requested_device == "cuda":
        return "bench.device is 'cuda'"
    environ = os.environ if environ is None else environ
    visible = environ.get("NVIDIA_VISIBLE_DEVICES", "").strip()
    if visible.lower() not in _NO_DEVICES and visible.lower() != _ALL_DEVICES:
        return f"NVIDIA_VISIBLE_DEVICES={visible!r}: the container runtime gave this container GPUs"
    if (dev / "nvidia0").exists():
        return f"{dev / 'nvidia0'} exists: a GPU is mounted in this container"
    return None


def likely_cause(
    torch_cuda_version: str | None,
    cuda_init_error: str | None,
    environ: Mapping[str, str] | None = None,
    driver_path: Path = Path("/proc/driver/nvidia/version"),
) -> str:
    """The most likely reason torch sees no GPU, from the cheapest evidence first."""
    environ = os.environ if environ is None else environ
    if torch_cuda_version is None:
        return (
            "this torch is a CPU build (torch.version.cuda is None): install a CUDA build of the pinned "
            "torch, e.g. from https://download.pytorch.org/whl/cu130 (docs/gpu-images.md)"
        )
    hidden = environ.get("CUDA_VISIBLE_DEVICES")
    if hidden is not None and hidden.strip() in ("", "-1", "none", "void"):
        return f"CUDA_VISIBLE_DEVICES={hidden!r} hides every GPU from this process"
    if not driver_path.exists():
        return (
            f"no NVIDIA driver is loaded here ({driver_path} is missing): the pod did not get the NVIDIA "
            "container runtime (check the node's RuntimeClass and the device plugin), or the node has no "
            "driver"
        )
    if cuda_init_error:
        return (
            f"CUDA did not start: {cuda_init_error} (a driver older than torch's CUDA "
            f"{torch_cuda_version}?)"
        )
    return f"CUDA {torch_cuda_version} found no usable device"


def require_visible_gpu(
    requested_device: str, environ: Mapping[str, str] | None = None, dev: Path = Path("/dev")
) -> None:
    """Raise ConfigError (exit 2) where a GPU is expected (`gpu_expected`) and torch sees none."""
    why = gpu_expected(requested_device, environ, dev)
    if why is None:
        return
    import torch  # only where a GPU is expected: a CPU run never pays for the CUDA probe

    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        return
    init_error = None
    try:
        torch.cuda.init()
    except Exception as e:  # torch's own words for why CUDA did not start (old driver, no device)
        init_error = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    cause = likely_cause(torch.version.cuda, init_error, environ)
    raise ConfigError(
        f"bench.device: got {requested_device!r} and a GPU is expected ({why}), but torch "
        f"{torch.__version__} sees no CUDA device: {cause}. benchgate never measures the CPU in a GPU's "
        "place; set bench.device = 'cpu' (--device cpu) to benchmark the CPU on purpose"
    )
