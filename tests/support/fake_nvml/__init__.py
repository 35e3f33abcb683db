"""The fake NVML (pynvml.py here) put in place for a test: `use_fake_nvml(monkeypatch)`.

`import pynvml` then finds the fake in the test's process (sys.modules, and this folder first on
sys.path) and in every process it starts (first on PYTHONPATH), until the test ends; monkeypatch undoes
all three. Hooks: pynvml.py's
docstring.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

FAKE_DIR = Path(__file__).resolve().parent


def use_fake_nvml(monkeypatch: pytest.MonkeyPatch, **env: str) -> ModuleType:
    """The fake pynvml, fresh (no hooks, counters at zero), as `pynvml` for this test and its children.
    `env` sets the fake's environment hooks, e.g. FAKE_NVML_GPUS="2"."""
    for name in [n for n in os.environ if n.startswith("FAKE_NVML_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    path = [str(FAKE_DIR), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in path if p))
    monkeypatch.syspath_prepend(str(FAKE_DIR))  # the fake imports its vocabulary, nvml_types.py
    spec = importlib.util.spec_from_file_location("pynvml", FAKE_DIR / "pynvml.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "pynvml", module)
    return module
