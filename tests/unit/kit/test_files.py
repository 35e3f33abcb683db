from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchgate.kit.files import read_json, write_json


def test_write_json_replaces_atomically_and_leaves_no_temp_files(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "m.json"
    write_json(path, {"a": 1})
    write_json(path, {"a": 2})
    assert read_json(path) == {"a": 2}
    assert [p.name for p in path.parent.iterdir()] == ["m.json"]


def test_write_json_stores_non_finite_floats_as_null(tmp_path: Path) -> None:
    path = write_json(tmp_path / "m.json", {"x": float("nan"), "y": [1.0, float("inf")]})
    assert json.loads(path.read_text()) == {"x": None, "y": [1.0, None]}


def test_write_json_failure_keeps_the_old_file(tmp_path: Path) -> None:
    path = write_json(tmp_path / "m.json", {"ok": True})
    with pytest.raises(TypeError):
        write_json(path, {"bad": object()})
    assert read_json(path) == {"ok": True}
    assert [p.name for p in tmp_path.iterdir()] == ["m.json"]


def test_read_json_names_the_file_when_truncated_or_missing(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text('{"samples": [1, 2')
    with pytest.raises(ValueError, match=r"m\.json: not valid JSON at line 1"):
        read_json(path)
    with pytest.raises(ValueError, match=r"absent\.json: file not found"):
        read_json(tmp_path / "absent.json")


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        pytest.param(
            b'{"profile": "\xff"}', r"not UTF-8 text \(byte 13: invalid start byte\)", id="not-utf8"
        ),
        pytest.param(
            b"[" * 100_000 + b"]" * 100_000,
            r"not valid JSON \(nested too deeply to read\)",
            id="deep-nesting",
        ),
        pytest.param(b'{"n": ' + b"9" * 5000 + b"}", r"not valid JSON \(.*4300 digits", id="huge-int"),
    ],
)
def test_read_json_names_the_file_for_every_unreadable_content(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    path = tmp_path / "meta.json"
    path.write_bytes(content)
    with pytest.raises(ValueError, match="^" + re.escape(f"{path}: ") + problem) as caught:
        read_json(path)
    # The message is whole: no chained traceback carries the file-less original.
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
