"""The attribution as a reader sees it: a heading line per world size, then the top entries, one a line.

    Why ws=1 is slower: 2 profiled rounds (12 steps each) against the A/B's -7.0% (+11.9 ms/step); the top
    five carry 118% of it
      1. aten::native_layer_norm  +6.25 ms/step [+4.43, +8.79]  52%  (calls/step 2 -> 26)
      2. aten::native_layer_norm_backward  +4.80 ms/step [+3.89, +5.88]  40%  (calls/step 2 -> 26)
      ...
      took less time (offsets part of it): aten::relu -0.31 (gone); ...
      operators run per step: 1,210 -> 1,402 (x1.16)
      whole ranges (operators inside included): forward +6.60 [+4.61, +9.02] 55%; backward ...
    traces: ab/ws1/explain/round1/A/op-trace/rank0.pt.trace.json.gz, ... (Perfetto or TensorBoard)

The terminal, compare.md, summary.md (the step summary and the PR comment) and report.html all print
these lines, so every view names the same operators.
"""

from __future__ import annotations

from typing import Any

from benchgate.results.comparison import Comparison

SHOWN = 5
RANGES = 3  # the whole ranges shown, the largest change first
_ONLY_IN = {"candidate": "new", "base": "gone"}


def _ms(value: float) -> str:
    return f"{value:+.2f}"


def entry_line(rank: int, entry: dict[str, Any]) -> str:
    low, high = entry["ci"]
    share = entry.get("share_pct")
    parts = [
        f"{rank}. {entry['op']}",
        f"{_ms(entry['change_ms_per_step'])} ms/step [{_ms(low)}, {_ms(high)}]",
    ]
    if share is not None:
        parts.append(f"{share:.0f}%")
    if entry.get("only_in"):
        parts.append(f"({_ONLY_IN[entry['only_in']]}: only the {entry['only_in']} runs it)")
    elif _calls_differ(entry.get("base_calls_per_step"), entry.get("candidate_calls_per_step")):
        parts.append(
            f"(calls/step {entry['base_calls_per_step']:.0f} -> {entry['candidate_calls_per_step']:.0f})"
        )
    return "  ".join(parts)


def _calls_differ(base: float | None, candidate: float | None) -> bool:
    """Whether the call counts differ by more than rounding (counts are means over steps and ranks)."""
    return base is not None and candidate is not None and abs(candidate - base) >= max(0.5, 0.05 * base)


def _offsetting(entry: dict[str, Any]) -> str:
    text = f"{entry['op']} {_ms(entry['change_ms_per_step'])}"
    return text + (f" ({_ONLY_IN[entry['only_in']]})" if entry.get("only_in") else "")


def _range(entry: dict[str, Any]) -> str:
    low, high = entry["ci"]
    share = entry.get("share_pct")
    return f"{entry['op']} {_ms(entry['change_ms_per_step'])} [{_ms(low)}, {_ms(high)}]" + (
        f" {share:.0f}%" if share is not None else ""
    )


def heading(world_size: str, block: dict[str, Any], change_pct: float | None) -> str:
    if block.get("why") or not block.get("entries"):
        return f"Why ws={world_size} changed: not explained ({block.get('why') or 'no profiled operators'})"
    total = float(block["shared_change_ms_per_step"])
    direction = "slower" if total >= 0 else "faster"
    rounds, steps = block.get("rounds", 1), block.get("steps_per_round", block.get("steps"))
    against = (
        f"the A/B's {change_pct:+.1f}% ({_ms(total)} ms/step)"
        if change_pct is not None
        else (f"their own {_ms(total)} ms/step")
    )
    line = (
        f"Why ws={world_size} is {direction}: {rounds} profiled round(s) per side ({steps} steps each) "
        f"against {against}"
    )
    explained = block.get("explained_by_top_pct")
    if explained is not None:
        line += f"; the top {min(SHOWN, len(block['entries']))} carry {explained:.0f}% of it"
    return line


def block_lines(world_size: str, block: dict[str, Any], change_pct: float | None = None) -> list[str]:
    """One world size's lines (see the module docstring)."""
    lines = [heading(world_size, block, change_pct)]
    entries = block.get("entries") or []
    lines += [f"  {entry_line(i, e)}" for i, e in enumerate(entries[:SHOWN], start=1)]
    offsetting = block.get("offsetting") or []
    if offsetting:  # what the change hides: an operator the candidate no longer runs, ...
        moved = "less" if float(block["shared_change_ms_per_step"]) >= 0 else "more"
        lines.append(
            f"  took {moved} time (offsets part of it): " + "; ".join(map(_offsetting, offsetting[:3]))
        )
    calls = block.get("calls_per_step") or {}
    if _calls_differ(calls.get("base"), calls.get("candidate")):  # a cause spread thin over operators
        lines.append(
            f"  operators run per step: {calls['base']:,.0f} -> {calls['candidate']:,.0f} "
            f"(x{calls['candidate'] / calls['base']:.2f})"
        )
    ranges = block.get("ranges") or []
    if ranges:
        lines.append("  whole ranges (operators inside included): " + "; ".join(map(_range, ranges[:RANGES])))
    communication = block.get("communication")
    if communication:
        low, high = communication["ci"]
        lines.append(
            f"  collectives: {communication['base_ms_per_step']:.2f} -> "
            f"{communication['candidate_ms_per_step']:.2f} ms/step "
            f"({_ms(communication['change_ms_per_step'])} [{_ms(low)}, {_ms(high)}]); the rest is compute"
        )
    for grown in (block.get("allocations") or [])[:3]:
        lines.append(
            f"  allocates more: {grown['op']} {grown['base_mib_per_step']:.1f} -> "
            f"{grown['candidate_mib_per_step']:.1f} MiB/step"
        )
    traces = block.get("traces") or []
    if traces:
        lines.append(
            f"  traces (Perfetto or TensorBoard): {', '.join(traces[:2])}"
            + (" ..." if len(traces) > 2 else "")
        )
    return lines


def attribution_lines(comparison: Comparison) -> list[str]:
    """Every explained world size's lines, by world size."""
    lines: list[str] = []
    for ws in sorted(comparison.attribution, key=int):
        timing = comparison.timing(int(ws))
        change = timing.change if timing is not None and timing.decided_by == "ab" else None
        lines += block_lines(ws, comparison.attribution[ws], change)
    return lines
