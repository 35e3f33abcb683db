"""A suite's coverage: how many entries ran to a verdict, and each one that could not, with its reason.

For a coverage suite (`benchgate suite plan --hf`: one entry per model type of a family) this is the
answer to "which types train": the entries done now or measured before (an incremental suite's skipped
ones) ran; an entry in error could not, and its line says why (the workload refused its arguments, its
step raised, a rank crashed), the error on one line without the entry's own name, cut at 240
characters. suite.md and the terminal print it under the table, wherever the suite is incremental or an
entry could not run.
"""

from __future__ import annotations

import re
from typing import Any

REASON_CHARS = 240
_ENTRY_PREFIX = re.compile(r"^entries\[\d+\](?: '[^']*')?: ")


def shows_coverage(record: dict[str, Any]) -> bool:
    return bool(record.get("incremental")) or any(e["state"] == "error" for e in record["entries"])


def coverage_lines(record: dict[str, Any]) -> list[str]:
    """The coverage sentence, then one line per entry that could not run (see the module docstring)."""
    entries = record["entries"]
    ran = [e for e in entries if e["state"] in ("done", "skipped")]
    skipped = sum(e["state"] == "skipped" for e in entries)
    failed = [e for e in entries if e["state"] == "error"]
    share = 100.0 * len(ran) / len(entries) if entries else 0.0
    sentence = f"Coverage: {len(ran)} of {len(entries)} entries ran to a verdict ({share:.0f}%)"
    if skipped:
        sentence += f", {skipped} of them measured before (skipped: same machine profile and settings)"
    lines = [sentence + (f"; {len(failed)} could not run:" if failed else ".")]
    for e in failed:
        # One line: the error's lines joined (transformers says why on the line after its first).
        reason = _ENTRY_PREFIX.sub("", " ".join(str(e.get("error") or "no reason recorded").split()))
        if len(reason) > REASON_CHARS:
            reason = reason[: REASON_CHARS - 3] + "..."
        lines.append(f"- {e['name']} (exit {e['exit_code']}): {reason}")
    return lines
