from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from benchgate.workloads.shard import decode, encode, load_shard

REPO = Path(__file__).resolve().parents[3]


def test_committed_shard_is_what_the_seeded_script_generates() -> None:
    spec = importlib.util.spec_from_file_location("make_shard", REPO / "scripts" / "make_shard.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text, probes = module.generate()
    data = REPO / "src" / "benchgate" / "data"
    assert (data / "shard.txt").read_text(encoding="ascii") == text
    assert json.loads((data / "probes.json").read_text())["probes"] == probes


def test_shard_splits_on_a_line_boundary_and_probes_are_present() -> None:
    shard = load_shard()
    total = shard.train.numel() + shard.heldout.numel()
    assert 0.09 < shard.heldout.numel() / total < 0.11
    assert decode(shard.train[-1:]) == "\n"
    assert set(shard.probes) == {"facts", "count", "echo"}
    assert all(len(items) == 16 for items in shard.probes.values())


def test_byte_tokenizer_round_trips() -> None:
    text = "count six seven eight."
    assert decode(encode(text)) == text
    assert encode("A").tolist() == [65]
