"""A suite's Pareto view (suite/report.py) over real `benchgate run` output directories.

Three real runs, once per session: gpt-tiny; gpt-tiny padded with a sleep per step (slower, of the same
perplexity: dominated, on a tie); and sleepy, which has no eval hook (no perplexity) and ran at world
size 1 only. suite.json is written as `benchgate suite run` writes
it, with an entry that failed beside them. Every expectation is computed here from the entries' own
files, independently of the code under test.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from benchgate.errors import ConfigError
from benchgate.suite.report import write_suite_report

FAST = ["--steps", "6", "--warmup", "2", "--no-trace", "--no-tracking", "--no-update-baseline"]
# name, workload, arguments, world sizes
ENTRIES = [
    ("gpt-tiny", "benchgate.workloads.gpt:make_workload", {"size": "tiny"}, "1,2"),
    ("gpt-tiny-padded", "bg_pareto_workloads:padded_gpt", {"pad_ms": 150}, "1,2"),
    ("sleepy", "bg_test_workloads:sleepy", {}, "1"),
]
BROKEN = {
    "name": "broken", "workload": "nope:make", "args": {}, "variant": {}, "out": "broken", "state": "error",
    "verdict": None, "exit_code": 2, "error": "entries[3] 'broken': bench.workload: cannot import 'nope'",
    "seconds": 0.4,
}  # fmt: skip


def _suite_json(directory: Path, entries: list[dict[str, Any]]) -> None:
    exit_code = max(e["exit_code"] for e in entries)
    suite = {
        "suite": "models",
        "suite_file": str(directory / "suite.toml"),
        "started": "2026-11-25T03:00:00+00:00",
        "entries": entries,
        "exit_code": exit_code,
    }
    (directory / "suite.json").write_text(json.dumps(suite, indent=2), encoding="utf-8")


@pytest.fixture(scope="session")
def suite_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The three entries' real result directories, and the suite.json that lists them."""
    root = tmp_path_factory.mktemp("suite")
    config = root / "eval.toml"
    config.write_text("[eval]\ntrain_steps = 20\n", encoding="utf-8")  # the default 400 takes minutes here
    entries = []
    for name, workload, args, world_sizes in ENTRIES:
        command = [sys.executable, "-m", "benchgate", "run", *FAST, "--config", str(config)]
        command += ["--workload", workload, "--world-sizes", world_sizes, "--out", str(root / name)]
        command += ["--baseline-dir", str(root / "baselines")]
        for key, value in args.items():
            command += ["--workload-arg", f"{key}={value}"]
        started = time.monotonic()
        done = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=600)
        # A verdict, whichever: 6 steps are too few for sleepy's loss slope to PASS every time.
        assert done.returncode in (0, 1), done.stdout + done.stderr
        verdict = json.loads((root / name / "compare.json").read_text())["verdict"]
        entries.append({
            "name": name, "workload": workload, "args": args, "variant": {}, "out": name, "state": "done",
            "verdict": verdict, "exit_code": done.returncode, "error": None,
            "seconds": time.monotonic() - started,
        })  # fmt: skip
    _suite_json(root, [*entries, BROKEN])
    return root


@pytest.fixture
def suite_dir(suite_runs: Path, tmp_path: Path) -> Path:
    """A copy a test may damage."""
    return Path(shutil.copytree(suite_runs, tmp_path / "suite", symlinks=True))


def _figures(entry_dir: Path, world_size: int) -> tuple[float, float | None, float]:
    """The run's tokens/s (tokens per step over the mean step, each step capped at 10x the median),
    perplexity (None without eval) and peak memory, read straight from the files."""
    metrics = json.loads((entry_dir / f"metrics-ws{world_size}.json").read_text())
    evaluation = json.loads((entry_dir / "eval.json").read_text())
    steps = metrics["samples"]["step_time_s"]
    cap = 10 * statistics.median(steps)
    tokens = metrics["tokens_per_step_global"] / statistics.fmean(min(t, cap) for t in steps)
    return tokens, evaluation.get("perplexity"), metrics["memory"]["peak_bytes"]


def _spread(entry_dir: Path, world_size: int) -> float:
    """Half the 95% interval of the tokens/s p50, in percent of it (the metrics' own summary)."""
    summary = json.loads((entry_dir / f"metrics-ws{world_size}.json").read_text())["tokens_per_s"]
    return 50 * (summary["p50_ci_high"] - summary["p50_ci_low"]) / summary["p50"]


# docs/suites.md: figures closer than these (percent) are ties; tokens/s also within either's spread.
TIED = {0: 2.0, 1: 0.5, 2: 2.0}


def _standings(
    figures: dict[str, tuple[float, float | None, float]], index: int, spreads: dict[str, float]
) -> dict[str, str]:
    """Each entry's standing on one panel (index 1: perplexity, 2: memory), by brute force."""

    def order(a: float, b: float, margin: float, sign: int) -> int:
        return 0 if abs(a - b) <= margin / 100 * max(a, b) else (sign if a > b else -sign)

    def beats(x: str, y: str) -> bool:
        a, b = placed[x], placed[y]
        margin = max(TIED[0], spreads[x], spreads[y])
        speed, quality = order(a[0], b[0], margin, 1), order(a[index], b[index], TIED[index], -1)  # type: ignore[arg-type]
        return speed >= 0 and quality >= 0 and (speed > 0 or quality > 0)

    placed = {name: f for name, f in figures.items() if f[index] is not None}
    top = {n for n in placed if not any(beats(m, n) for m in placed)}
    standing = {}
    for name in placed:
        if name in top:
            standing[name] = "frontier"
        else:
            beaters = [m for m in top if beats(m, name)] or [m for m in placed if beats(m, name)]
            by = max(beaters, key=lambda n: placed[n][0])
            standing[name] = f"dominated by {by}"
    return standing


FRONTIER, DOMINATED = (0xD6, 0x27, 0x28), (0x9A, 0x9A, 0x9A)  # suite/pareto_plot.py's colours


def _marks(image: Image.Image, left: int) -> dict[tuple[int, int, int], list[tuple[int, int]]]:
    """Solid 5x5 blocks of the frontier's and the dominated entries' colours in the panel starting at
    pixel column `left`: markers (lines and anti-aliased text never fill such a block), one per marker."""
    rgb = image.convert("RGB")
    pixels, size = rgb.load(), 5
    found: dict[tuple[int, int, int], list[tuple[int, int]]] = {}
    for colour in (FRONTIER, DOMINATED):
        near = {
            (x, y)
            for x in range(left, left + image.width // 2)
            for y in range(image.height)
            if all(abs(a - b) <= 12 for a, b in zip(pixels[x, y], colour, strict=True))
        }
        blocks: list[tuple[int, int]] = []
        for x, y in sorted(near):
            solid = all((x + i, y + j) in near for i in range(size) for j in range(size))
            if solid and not any(abs(x - bx) <= 2 * size and abs(y - by) <= 2 * size for bx, by in blocks):
                blocks.append((x, y))
        found[colour] = blocks
    return found


def _table(markdown: str) -> dict[str, list[str]]:
    rows = [line.strip("|").split(" | ") for line in markdown.splitlines() if line.startswith("| ")]
    return {row[0].strip(): [cell.strip() for cell in row] for row in rows[1:]}


@pytest.mark.slow
@pytest.mark.timeout(900)  # the first to run waits for the session's three runs
def test_the_pareto_view_of_real_runs_marks_what_their_files_say(suite_dir: Path) -> None:
    written = write_suite_report(suite_dir)
    assert written == [suite_dir / "pareto.png", suite_dir / "pareto.md", suite_dir / "suite.html"]

    # sleepy ran at world size 1 only: every entry is read at ws=1, the largest they all ran.
    figures = {name: _figures(suite_dir / name, 1) for name, *_ in ENTRIES}
    assert figures["sleepy"][1] is None and figures["gpt-tiny"][1] is not None
    markdown = (suite_dir / "pareto.md").read_text()
    table = _table(markdown)
    assert "tokens/s at world size 1" in markdown
    spreads = {name: _spread(suite_dir / name, 1) for name in figures}
    quality, memory = _standings(figures, 1, spreads), _standings(figures, 2, spreads)
    # The padded variant is slower, of the very same perplexity: it is surely dominated, by gpt-tiny.
    assert figures["gpt-tiny-padded"][1] == figures["gpt-tiny"][1]
    assert quality["gpt-tiny-padded"] == "dominated by gpt-tiny"
    for name, (tokens, perplexity, peak) in figures.items():
        row = table[name]
        assert row[2] == f"{tokens:,.0f}"
        assert row[3] == ("—" if perplexity is None else f"{perplexity:,.2f}")
        assert row[4] == f"{peak / 2**20:,.1f} MiB"
        assert row[5] == quality.get(name, "no perplexity (its run had no eval)")
        assert row[6] == memory[name]
    assert table["broken"][5:] == ["not plotted: error", "not plotted: error"]
    assert "sleepy is left out of the perplexity panel: no perplexity (its run had no eval)." in markdown
    assert "broken is not plotted: state error: entries[3] 'broken': bench.workload:" in markdown
    padded, tiny = figures["gpt-tiny-padded"], figures["gpt-tiny"]
    assert (
        f"gpt-tiny-padded is dominated by gpt-tiny: slower ({padded[0]:,.0f} vs {tiny[0]:,.0f} tokens/s) and "
        f"no better perplexity ({padded[1]:,.2f} vs {tiny[1]:,.2f})"
    ) in markdown

    with Image.open(suite_dir / "pareto.png") as image:
        image.verify()  # a whole, valid PNG
    with Image.open(suite_dir / "pareto.png") as image:
        assert image.format == "PNG" and image.width > 2 * image.height > 600  # two panels side by side
        left, right = _marks(image, 0), _marks(image, image.width // 2)
    # Perplexity panel: gpt-tiny's red diamond and padded's grey dot, each beside its legend's marker.
    assert (len(left[FRONTIER]), len(left[DOMINATED])) == (2, 2)
    # Memory panel: at least one frontier diamond besides the legend's (close points may touch).
    assert len(right[FRONTIER]) >= 2

    page = (suite_dir / "suite.html").read_text()
    assert page.count('<img src="data:image/png;base64,') == 1
    for name, *_ in ENTRIES:
        assert f'<a href="{name}/report.html">' in page
        assert (suite_dir / name / "report.html").is_file()
    assert '<a href="broken/">broken/</a> (no report written)' in page
    assert "<td>dominated by gpt-tiny</td>" in page


@pytest.mark.slow
@pytest.mark.timeout(900)  # the first to run waits for the session's three runs
def test_entries_that_share_a_larger_world_size_are_read_there(suite_dir: Path) -> None:
    entries = json.loads((suite_dir / "suite.json").read_text())["entries"]
    _suite_json(suite_dir, [e for e in entries if e["name"].startswith("gpt-tiny")])
    write_suite_report(suite_dir)
    markdown = (suite_dir / "pareto.md").read_text()
    assert "tokens/s at world size 2" in markdown
    tokens, _, peak = _figures(suite_dir / "gpt-tiny", 2)
    assert _table(markdown)["gpt-tiny"][2:5:2] == [f"{tokens:,.0f}", f"{peak / 2**20:,.1f} MiB"]


@pytest.mark.slow
@pytest.mark.timeout(900)  # the first to run waits for the session's three runs
def test_a_damaged_entry_loses_its_own_point_only(suite_dir: Path) -> None:
    metrics = suite_dir / "gpt-tiny" / "metrics-ws1.json"
    metrics.write_text(metrics.read_text()[:200], encoding="utf-8")  # truncated mid-write
    write_suite_report(suite_dir)
    markdown = (suite_dir / "pareto.md").read_text()
    assert f"gpt-tiny is not plotted: its results cannot be read: {metrics}: not valid JSON" in markdown
    table = _table(markdown)
    assert table["gpt-tiny"][5:] == ["not plotted: results unreadable"] * 2
    assert table["gpt-tiny-padded"][5] == "frontier"  # nothing left on its panel to beat it


def test_no_finished_entry_is_an_error_naming_the_directory(tmp_path: Path) -> None:
    _suite_json(tmp_path, [BROKEN])
    with pytest.raises(
        ConfigError, match=r"no finished entry to plot \(broken: state error: entries\[3\]"
    ) as e:
        write_suite_report(tmp_path)
    assert str(e.value).startswith(f"{tmp_path}: ") and e.value.exit_code == 2
    assert not (tmp_path / "pareto.png").exists()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, r"suite\.json: file not found \(`benchgate suite run --out DIR` writes it into DIR\)"),
        ('{"suite": "models", "entries": [', r"suite\.json: not valid JSON at line 1 column 33 \(Expecting"),
        ("[]", r"suite\.json: a JSON list, not an object"),
        ('{"suite": "models"}', r"suite\.json: entries: got nothing \(Field required\)"),
        (
            '{"suite": "models", "entries": [{"name": "a", "state": "finished", "out": "a"}]}',
            r"suite\.json: entries\[0\]\.state: got 'finished' \(Input should be 'pending', 'running', ",
        ),
        (
            '{"suite": "models", "entries": [{"name": "a", "state": "done", "out": "../../etc"}]}',
            r"suite\.json: entries\[0\]\.out: got '\.\./\.\./etc' \(expected a directory inside ",
        ),
        (
            '{"suite": "models", "entries": [{"name": "a", "state": "done", "out": "a"}, '
            '{"name": "a", "state": "done", "out": "b"}]}',
            r"suite\.json: entries\[1\]\.name: got 'a' \(more than one entry has it\)",
        ),
    ],
)
def test_a_missing_or_damaged_suite_json_is_an_error_naming_the_file(
    tmp_path: Path, content: str | None, message: str
) -> None:
    if content is not None:
        (tmp_path / "suite.json").write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError, match=message) as e:
        write_suite_report(tmp_path)
    assert str(tmp_path / "suite.json") in str(e.value) and e.value.exit_code == 2
