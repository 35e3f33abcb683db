"""The pictures: real rendering of synthetic bundles, checked as files and as HTML."""

from __future__ import annotations

import base64
import dataclasses
import re
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from benchgate.checks.compare import compare
from benchgate.config import Tolerances
from benchgate.publish.html_report import html_report
from benchgate.publish.plots import _unit, current_point, history_panels, history_png
from benchgate.publish.report_changes import report_history
from benchgate.results.bundle import Bundle
from benchgate.results.comparison import Check, Comparison
from benchgate.results.figures import HistoryPoint, run_figures

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PROFILE = "cpu-Test-x2_torch2.13.0"
IMG_TAG = re.compile(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"')


def bench(ws: int, step_s: float, seed: int, workload: str = "w", n: int = 30) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    times = [float(t) for t in step_s * (1 + 0.03 * rng.standard_normal(n))]
    tokens = 512 * ws
    return {
        "workload": workload,
        "world_size": ws,
        "precision": "fp32",
        "tokens_per_step_global": tokens,
        "memory": {"peak_bytes": 400 * 2**20},
        "samples": {
            "step_time_s": times,
            "tokens_per_s": [tokens / t for t in times],
            "loss": [3.0 - 0.01 * i for i in range(n)],
        },
    }


def bundle(
    seed: int,
    sizes: tuple[int, ...] = (1, 2),
    step_s: float = 0.1,
    workload: str = "w",
    profile: str = PROFILE,
    commit: str = "0123456789abcdef",
) -> Bundle:
    return Bundle(
        path=Path(f"/runs/{seed}"),
        env={"machine_profile": profile, "git": {"commit": commit, "branch": "main"}},
        metrics={ws: bench(ws, step_s * (1 + 0.1 * (ws - 1)), seed + ws, workload) for ws in sizes},
    )


def history(n: int = 4, sizes: tuple[int, ...] = (1, 2)) -> list[HistoryPoint]:
    points = []
    for i in range(n):
        figures = {f"ws{ws}/tokens_per_s_mean": 5000.0 * ws + 10 * i for ws in sizes}
        figures.update({f"ws{ws}/step_time_ms_mean": 100.0 + i for ws in sizes})
        if len(sizes) > 1:
            figures["scaling_efficiency_pct"] = 90.0 - i
        points.append(HistoryPoint(f"{i:x}" * 12, 1_700_000_000.0 + i, figures, is_baseline=i == 0))
    # Given newest first on purpose: the plots must order by created_unix themselves.
    return points[::-1]


def images(page: str) -> list[bytes]:
    return [base64.b64decode(data) for data in IMG_TAG.findall(page)]


def test_html_report_inlines_three_pngs_and_needs_no_network() -> None:
    baseline, current = bundle(1), bundle(2, step_s=0.12)
    page = html_report(current, compare(baseline, current, Tolerances()), baseline, history())
    pngs = images(page)
    assert len(pngs) == 3
    assert all(png.startswith(PNG_MAGIC) and 5_000 < len(png) < 200_000 for png in pngs)
    # No noise history behind this baseline: the screen cannot decide a 17% drop, and says so.
    assert "UNKNOWN" in page.split("</h1>")[0]
    assert "run-to-run noise unknown" in page
    assert "0123456789abcdef" in page
    for external in ("http://", "https://", "<script", "<link"):
        assert external not in page


def test_html_report_colours_the_status_cell() -> None:
    current = bundle(2)
    comparison = Comparison(PROFILE, "w", None, [Check("made up", "%", 1.0, status="FAIL")])
    page = html_report(current, comparison, None, [])
    assert '<td style="font-weight:bold;color:#cf222e">FAIL</td>' in page
    assert "<th>CI of change</th>" in page


def test_html_report_escapes_strings_from_the_data() -> None:
    evil = '<script>alert("x")</script>'
    current = bundle(2, workload=evil, profile=f"p{evil}", commit=f'"><b>{evil}')
    comparison = compare(None, current, Tolerances())
    # A "$" pair in a commit would be read as mathtext by matplotlib and fail to draw.
    points = [HistoryPoint("$\\oops{$", 1.0, {"ws1/tokens_per_s_p50": 1.0}), *history()]
    page = html_report(current, comparison, None, points)
    assert "<script>" not in page
    assert '"><b>' not in page
    assert "&quot;&gt;&lt;b&gt;" in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    assert "p&lt;script&gt;" in page
    assert len(images(page)) == 3


def test_html_report_without_baseline_says_so() -> None:
    current = bundle(2)
    page = html_report(current, compare(None, current, Tolerances()), None, [])
    assert "baseline: <b>none</b>" in page
    pngs = images(page)
    assert len(pngs) == 3
    assert pngs[0].startswith(PNG_MAGIC)


def test_html_report_single_world_size_says_scaling_is_not_available() -> None:
    baseline, current = bundle(1, sizes=(1,)), bundle(2, sizes=(1,))
    page = html_report(current, compare(baseline, current, Tolerances()), baseline, history(sizes=(1,)))
    assert "Scaling efficiency is not available" in page
    assert len(images(page)) == 2


def test_current_point_carries_the_run_figures_and_verdict() -> None:
    current = bundle(2)
    point = current_point(current, compare(None, current, Tolerances()))
    assert point.commit == "0123456789abcdef"
    assert point.branch == "main"
    assert point.verdict == "PASS"
    assert not point.is_baseline
    assert point.figures["ws2/tokens_per_s_p50"] > point.figures["ws1/tokens_per_s_p50"]
    assert 0 < point.figures["scaling_efficiency_pct"] < 100
    assert point.figures["gate/exit_code"] == 0
    assert current_point(current, None).verdict is None


def test_history_png_writes_a_png(tmp_path: Path) -> None:
    path = history_png(history(6), tmp_path / "nested" / "dir" / "history.png")
    assert path == tmp_path / "nested" / "dir" / "history.png"
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC)
    assert 5_000 < len(data) < 200_000


def test_history_png_without_runs_raises(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no runs to plot"):
        history_png([], tmp_path / "history.png")
    assert not (tmp_path / "history.png").exists()


def test_history_png_without_any_named_figure_raises(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="none of the runs"):
        history_png(history(), tmp_path / "history.png", names=["eval/perplexity"])


def test_history_panels_default_lists_only_present_figures() -> None:
    points = history(sizes=(1,))
    points.append(HistoryPoint(None, 0.0, {"ws4/peak_memory_mib": 512.0, "eval/perplexity": 2.0}))
    assert history_panels(points) == [
        "ws1/tokens_per_s_mean",
        "ws1/step_time_ms_mean",
        "ws4/peak_memory_mib",
        "eval/perplexity",
    ]


def test_history_panels_skips_named_figures_no_run_has(tmp_path: Path) -> None:
    names = ["ws1/step_time_ms_mean", "ws8/mfu_6nd_pct", "scaling_efficiency_pct"]
    points = history(sizes=(1,))
    assert history_panels(points, names) == ["ws1/step_time_ms_mean"]
    assert history_png(points, tmp_path / "h.png", names).read_bytes().startswith(PNG_MAGIC)


def test_current_point_has_mfu_in_percent_and_the_drift_corrected_figure() -> None:
    current = bundle(2, sizes=(1,))
    metrics = current.metrics[1]
    metrics["mfu"] = {"dense_6n": 0.41, "attention_aware": 0.45}  # fractions, as the bench writes them
    metrics["samples"]["reference_s"] = [t / 20 for t in metrics["samples"]["step_time_s"]]
    figures = current_point(current, None).figures
    assert figures["ws1/mfu_6nd_pct"] == pytest.approx(41.0)
    assert figures["ws1/mfu_attention_pct"] == pytest.approx(45.0)
    assert figures["ws1/step_time_per_reference_p50"] == pytest.approx(20.0)
    assert "ws1/mfu_6nd_pct" in history_panels([current_point(current, None)])


def test_history_axes_label_percent_figures_as_given_and_the_reference_ratio_as_such() -> None:
    assert _unit("ws1/mfu_6nd_pct") == "%"
    assert _unit("ws1/step_time_per_reference_p50") == "step / reference time"
    assert _unit("ws1/step_time_ms_p50") == "ms"
    assert _unit("ws1/tokens_per_s_p50") == "tokens/s"


def test_history_png_draws_mfu_and_the_reference_ratio(tmp_path: Path) -> None:
    points = history(3, sizes=(1,))
    for i, point in enumerate(points):
        point.figures.update({"ws1/mfu_6nd_pct": 40.0 + i, "ws1/step_time_per_reference_p50": 20.0 - i})
    names = ["ws1/mfu_6nd_pct", "ws1/step_time_per_reference_p50"]
    assert history_panels(points, names) == names
    assert history_png(points, tmp_path / "h.png", names).read_bytes().startswith(PNG_MAGIC)


def test_html_report_says_the_next_step_under_the_verdict_and_folds_the_rules() -> None:
    baseline, current = bundle(1), bundle(2, step_s=0.12)
    # No noise history behind this baseline: UNKNOWN, and no A/B ran.
    page = html_report(current, compare(baseline, current, Tolerances()), baseline, history(), Path("/r/1"))
    after_verdict = page.split("</h1>\n", 1)[1]
    assert after_verdict.startswith('<div class="next"><b>Next:</b><ul><li>the run-to-run noise is not known')
    assert "<code>benchgate run --base origin/main</code>" in after_verdict.split("</div>", 1)[0]
    table_end = page.index("</table>")
    details = page.index("<details><summary>How this was decided</summary><ul><li>[1] tokens/s (ws=1)")
    assert details == table_end + len("</table>")
    assert page.index("rule: ") > details  # the rules only inside the fold


def test_html_report_of_a_pass_has_no_next_step() -> None:
    current = bundle(2)
    comparison = Comparison(PROFILE, "w", None, [Check("made up", "%", 1.0)])
    page = html_report(current, comparison, None, [])
    assert 'class="next"' not in page.split("<style>")[1].split("</style>")[1]
    assert "<details>" not in page


def logged_history(step_s: list[float], acknowledged: dict[int, str] | None = None) -> list[HistoryPoint]:
    """Gate runs of commits c0, c1, ... with these step times, as the report gets them: the parent run's
    metrics read back by tracking.read.history_point, kept in tracking.json and read again. They started
    out of commit order (as reruns and backfills do), so only the commit order finds a clean step."""
    from mlflow.entities import Metric, Run, RunData, RunInfo, RunTag

    from benchgate.tracking import client as tracking
    from benchgate.tracking.read import history_point

    points = []
    for i, step in enumerate(step_s):
        figures = run_figures(bundle(100 + i, sizes=(1,), step_s=step))
        started_ms = 1_700_000_000_000 + 1000 * ((i * 5) % len(step_s))
        tags = [RunTag(tracking.TAG_COMMIT, commit_of(i)), RunTag(tracking.TAG_BRANCH, "main")]
        tags += (
            [RunTag(tracking.TAG_ACK_REASON, (acknowledged or {})[i])] if i in (acknowledged or {}) else []
        )
        info = RunInfo(f"run{i:02d}", "0", "ci", "FINISHED", started_ms, started_ms + 1000, "active")
        run = Run(info, RunData(metrics=[Metric(k, v, started_ms, 0) for k, v in figures.items()], tags=tags))
        points.append(HistoryPoint(**dataclasses.asdict(history_point(run))))
    return points


def commit_of(i: int) -> str:
    return f"{i:02d}" * 20


def change_rows(page: str) -> list[str]:
    section = page.split("<h2>Change points over these runs</h2>", 1)[1].split("<h2>", 1)[0]
    return re.findall(r"<tr><td>.*?</tr>", section)


def test_html_report_marks_and_lists_a_level_shift_at_its_commit() -> None:
    """Eleven runs, every step 25% slower from the seventh commit on, and this run as slow: the table
    names that commit, the change, and that it is a regression nobody acknowledged."""
    steps = [0.1] * 6 + [0.125] * 5
    history_points = logged_history(steps)
    order = [commit_of(i) for i in range(len(steps))] + ["0123456789abcdef"]
    current = bundle(2, sizes=(1,), step_s=0.125)
    comparison = compare(None, current, Tolerances())
    page = html_report(current, comparison, None, history_points, commit_order=order)
    (row,) = change_rows(page)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row)
    assert cells[0] == "tokens/s ws=1"
    assert cells[1] == f"<code>{commit_of(6)[:12]}</code>"
    assert float(cells[2].rstrip("%")) == pytest.approx(-20.0, abs=2.0)  # 1/1.25 - 1
    assert cells[5] == "6/6" and cells[6] == "yes" and cells[7] == "" and cells[8] == "run06"
    assert '<td style="font-weight:bold;color:#cf222e">yes</td>' in row
    assert "benchgate history ack RUN_ID --reason TEXT" in page
    # Marked on the throughput plot at the first slow run, where the table says.
    marks = report_history(history_points, current_point(current, comparison), order).marks()
    assert marks == [("ws1/tokens_per_s_mean", 6)]
    assert len(images(page)) == 2

    acked = logged_history(steps, acknowledged={6: "bigger model, on purpose"})
    (row,) = change_rows(html_report(current, comparison, None, acked, commit_order=order))
    assert "<td>bigger model, on purpose</td>" in row and "color:#cf222e" not in row


def test_html_report_says_none_without_a_change_and_why_with_too_few_runs() -> None:
    current = bundle(2, sizes=(1,), step_s=0.1)
    comparison = compare(None, current, Tolerances())
    steady = html_report(current, comparison, None, logged_history([0.1] * 11))
    assert change_rows(steady) == []
    assert "<p>Change points: none in 12 runs (at the 1% level).</p>" in steady
    few = html_report(current, comparison, None, history(4, sizes=(1,)))
    assert "Change points: none in 5 runs (a change needs at least 3 runs on each side of it)" in few


def test_the_publish_stage_orders_the_reports_history_by_the_branch_it_runs_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """write_report reads the history from tracking.json and the commit order from the checkout it runs
    in (a real git repository): there the step shows at its commit; outside it, by start time, not."""
    from harness import make_config

    from benchgate.kit.files import write_json
    from benchgate.publish.stage import write_report

    repo = tmp_path / "repo"
    repo.mkdir()
    for args in (["init", "-q"], ["config", "user.email", "ci@example.com"], ["config", "user.name", "CI"]):
        subprocess.run(["git", *args], cwd=repo, check=True)
    for i in range(11):
        subprocess.run(["git", "commit", "-q", "--allow-empty", "-m", f"c{i}"], cwd=repo, check=True)
    done = subprocess.run(["git", "rev-list", "--reverse", "HEAD"], cwd=repo, capture_output=True, text=True)
    commits = done.stdout.split()
    points = logged_history([0.1] * 6 + [0.125] * 5)
    points = [dataclasses.replace(p, commit=commits[int(str(p.run_id)[3:])]) for p in points]
    run_dir = tmp_path / "out"
    run_dir.mkdir()
    current = bundle(2, sizes=(1,), step_s=0.125, commit=commits[-1])
    write_json(run_dir / "env.json", current.env)
    write_json(
        run_dir / "metrics-ws1.json", {**current.metrics[1], "schema_version": 1, "machine_profile": PROFILE}
    )
    write_json(run_dir / "compare.json", compare(None, current, Tolerances()).to_dict())
    write_json(run_dir / "tracking.json", {"history": [dataclasses.asdict(p) for p in points]})
    config = make_config(tmp_path)

    monkeypatch.chdir(repo)
    rows = change_rows(write_report(config, run_dir).read_text(encoding="utf-8"))
    assert [re.findall(r"<code>(\w+)</code>", row) for row in rows] == [[commits[6][:12]]]
    monkeypatch.chdir(tmp_path)  # no repository: start time, which here is no clean step
    page = write_report(config, run_dir).read_text(encoding="utf-8")
    assert commits[6][:12] not in "".join(change_rows(page))
