"""Atomic JSON files: every result benchgate writes is either complete on disk or absent.

A reader that finds a truncated or hand-edited file gets an error naming the path and the problem,
never a half-parsed dict.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any


def write_json(path: Path, data: Any) -> Path:
    """Write `data` as JSON to `path` atomically (temp file in the same directory, fsync, rename)."""
    return write_text(
        path, json.dumps(_finite_or_null(data), indent=2, sort_keys=True, allow_nan=False) + "\n"
    )


def write_text(path: Path, text: str) -> Path:
    """Write `text` to `path` atomically: a full disk or a crash leaves the old file or none, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def read_json(path: Path) -> Any:
    """Read a JSON file; raises ValueError naming the file when it is missing, truncated or not JSON
    (not UTF-8, nested too deep to parse, or an integer too long to convert)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValueError(f"{path}: file not found") from None
    except OSError as e:
        raise ValueError(f"{path}: cannot read ({e.strerror})") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text (byte {e.start}: {e.reason})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON at line {e.lineno} column {e.colno} ({e.msg})") from None
    except RecursionError:
        raise ValueError(f"{path}: not valid JSON (nested too deeply to read)") from None
    except ValueError as e:
        # json.loads refuses an integer literal of more than sys.get_int_max_str_digits() digits.
        raise ValueError(f"{path}: not valid JSON ({e})") from None


def read_json_object(path: Path) -> dict[str, Any]:
    """read_json for a file that must hold a JSON object; ValueError naming the file otherwise."""
    data = read_json(path)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a JSON {type(data).__name__}, not an object")
    return data


def _finite_or_null(value: Any) -> Any:
    # JSON has no NaN/Infinity; a non-finite metric is stored as null so every reader can parse it.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite_or_null(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite_or_null(v) for v in value]
    return value
