"""summary.md and junit.xml, rendered from comparisons `compare` really produces (on the bundles of
tests/support/bundles.py)."""

from __future__ import annotations

import dataclasses
import json
import math
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from bundles import bundle

from benchgate.ab.rows import apply_ab
from benchgate.checks.compare import compare
from benchgate.checks.next_steps import next_steps
from benchgate.checks.stage import write_comparison
from benchgate.config import ABConfig, Tolerances
from benchgate.publish.ci_report import (
    JUNIT_FILE,
    SUMMARY_FILE,
    junit_xml,
    summary_markdown,
    write_reports,
    write_step_summary,
)
from benchgate.results.comparison import Comparison

PUBLISHED_SERVER = {
    "baseline_written": None,
    "mlflow_run_id": "0123abcd",
    "spooled": None,
    "mlflow_url": "http://mlflow.example:5000/#/experiments/1/runs/0123abcd",
}


def failing() -> Comparison:
    """16% slower at ws=1: the screen FAILs it with confidence."""
    return compare(bundle(1), bundle(2, step_s=0.12), Tolerances())


def unknown() -> Comparison:
    """Slower with too little noise history to judge it: UNKNOWN."""
    base = bundle(1)
    base.history = base.history[:1]
    return compare(base, bundle(2, step_s=0.15), Tolerances())


def table(summary: str) -> list[list[str]]:
    rows = [line for line in summary.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row.strip("|").split(" | ")] for row in rows]


def test_summary_has_one_row_per_check_then_the_verdict_profile_and_mlflow_link() -> None:
    comparison = failing()
    summary = summary_markdown(comparison, PUBLISHED_SERVER)
    rows = table(summary)
    assert rows[0] == ["metric", "baseline", "candidate", "change (interval)", "verdict"]
    assert len(rows) == 2 + len(comparison.checks)
    timing = next(row for row in rows if row[0] == "tokens/s (ws=1)")
    check = comparison.timing(1)
    assert check is not None and check.ci_low is not None and check.ci_high is not None
    assert timing[3] == f"{check.change:+.2f}% [{check.ci_low:+.1f}, {check.ci_high:+.1f}]%"
    assert timing[4] == "**FAIL**"
    assert "**Verdict: FAIL** (exit 1)" in summary
    assert f"Machine profile: `{comparison.machine_profile}`" in summary
    assert f"MLflow: [run 0123abcd]({PUBLISHED_SERVER['mlflow_url']})" in summary
    assert f"- tokens/s (ws=1): FAIL. {check.note}" in summary  # why, under the table
    # The screen's FAIL: next, confirm it side by side (benchgate.checks.next_steps says so).
    assert (
        "confirm it side by side with `benchgate run --base origin/main`"
        in summary.split("**Next step:**")[1]
    )
    # The summary's verdict is the verdict's, not a copy that could drift: the same rows PASS unchanged.
    passing = summary_markdown(compare(bundle(1), bundle(2), Tolerances()), {})
    assert "**Verdict: PASS** (exit 0)" in passing and "Next step" not in passing


def test_summary_links_mlflow_only_on_a_server_and_never_names_a_runners_store() -> None:
    # A run id without a URL is one of the local store: on a CI runner it goes with the runner.
    local = summary_markdown(failing(), {"mlflow_run_id": "feed42", "mlflow_url": None, "spooled": None})
    assert "feed42" not in local and "in the local store" not in local
    assert "MLflow: no link, the tracking URI is no http(s) server" in local
    spooled = summary_markdown(failing(), {"mlflow_run_id": None, "spooled": "/spool/k"})
    assert "MLflow: not logged; the tracking server could not be reached" in spooled
    assert "/spool/k" not in spooled
    assert "MLflow" not in summary_markdown(failing(), {"baseline_written": None})  # tracking off
    resumed = summary_markdown(failing(), PUBLISHED_SERVER | {"resumed": True})
    assert "logged before the A/B was resumed" in resumed


RUNNER_OUT = Path("/home/runner/work/app/app/benchgate-out")


def test_next_steps_for_a_pull_request_name_the_jobs_artifact_not_the_runners_disk() -> None:
    from ab_outcomes import outcome, straddling

    slower = failing()
    by_ab = apply_ab(slower, outcome([math.log(0.8)] * 4), Tolerances(), ABConfig())
    summary = summary_markdown(by_ab, {}, RUNNER_OUT)
    assert "/home/runner" not in summary
    assert (
        "- download the `benchgate-out` artifact of this job: its report.html shows the A/B rounds behind "
        "the FAIL (they are in ab/ws1/ab.json)"
    ) in summary
    # The terminal is read where the run is: the path stays there.
    assert f"{RUNNER_OUT}/ab/ws1/ab.json" in next_steps(by_ab, RUNNER_OUT)[0]
    budget = apply_ab(unknown(), outcome(straddling(27)), Tolerances(), ABConfig())
    summary = summary_markdown(budget, {}, RUNNER_OUT)
    assert "/home/runner" not in summary and "--resume /" not in summary
    assert (
        "set `[gate.ab] max_rounds` above 27 (the round budget that ran out) in the job's config" in summary
    )
    # A pipeline task does not know the directory: the artifact of docs/ci.md's jobs is named.
    assert "the `benchgate-out` artifact of this job" in summary_markdown(budget, {}, None)


def test_an_unknown_summary_says_what_to_run_next(tmp_path: Path) -> None:
    write_comparison(tmp_path, unknown())
    write_reports(tmp_path, tmp_path)
    summary = (tmp_path / SUMMARY_FILE).read_text()
    assert "**Verdict: UNKNOWN** (exit 4)" in summary
    steps = summary.split("**Next step:**", 1)[1].split("<details>")[0]
    listed = [line.removeprefix("- ") for line in steps.splitlines() if line.startswith("- ")]
    assert listed == next_steps(unknown(), tmp_path) and listed
    # A screen UNKNOWN without an A/B: decide it by A/B against the base code.
    assert "`benchgate run --base origin/main`" in listed[-1]


def test_cells_cannot_break_the_table_or_open_html() -> None:
    comparison = failing()
    first = dataclasses.replace(comparison.checks[0], name="loss | <b>slope</b>\nnext")
    comparison.checks[0] = first
    comparison.workload = "w|<x>"
    rows = table(summary_markdown(comparison, {}))
    assert len(rows) == 2 + len(comparison.checks)
    assert rows[2][0] == "loss \\| &lt;b&gt;slope&lt;/b&gt; next"
    assert all(len(row) == 5 for i, row in enumerate(rows) if i != 1)  # 1: the |---| line


def parse(text: str) -> ET.Element:
    root = ET.fromstring(text)
    assert root.tag == "testsuites"
    return root


def counts(element: ET.Element) -> dict[str, int]:
    return {key: int(element.attrib[key]) for key in ("tests", "failures", "errors", "skipped")}


def outcome(case: ET.Element) -> str:
    children = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
    assert len(children) <= 1
    return children[0] if children else "passed"


def assert_consistent(root: ET.Element) -> None:
    """The shape GitLab's and Jenkins' readers need: counts on both levels that match the test cases."""
    suites = root.findall("testsuite")
    assert len(suites) == 1
    cases = suites[0].findall("testcase")
    tally = {"tests": len(cases), "failures": 0, "errors": 0, "skipped": 0}
    plural = {"failure": "failures", "error": "errors", "skipped": "skipped"}
    for case in cases:
        assert case.attrib["classname"] and case.attrib["name"]
        float(case.attrib["time"])
        if (kind := outcome(case)) != "passed":
            tally[plural[kind]] += 1
    assert counts(suites[0]) == tally
    assert counts(root) == tally


def test_junit_fail_row_is_a_failure_with_change_interval_and_rule() -> None:
    comparison = failing()
    root = parse(junit_xml(comparison, PUBLISHED_SERVER))
    assert_consistent(root)
    cases = {case.attrib["name"]: case for case in root.iter("testcase")}
    gated = [c.name for c in comparison.checks if c.status in ("PASS", "WARN", "UNKNOWN", "FAIL")]
    assert sorted(cases) == sorted(gated)  # NEW and INFO rows judge nothing: no test case
    case = cases["tokens/s (ws=1)"]
    # Jenkins splits the classname at its last dot: the profile's own dots must not split it.
    assert case.attrib["classname"] == "benchgate.w." + comparison.machine_profile.replace(".", "_")
    failure = case.find("failure")
    assert failure is not None
    check = comparison.timing(1)
    assert check is not None
    assert (
        f"change {check.change:+.2f}% [{check.ci_low:+.1f}, {check.ci_high:+.1f}]%"
        in failure.attrib["message"]
    )
    assert f"rule: {check.rule}" in (failure.text or "")
    assert all(outcome(c) == "passed" for name, c in cases.items() if name != "tokens/s (ws=1)")
    suite = root.find("testsuite")
    assert suite is not None
    properties = {p.attrib["name"]: p.attrib["value"] for p in suite.iter("property")}
    assert properties["verdict"] == "FAIL" and properties["mlflow_run_id"] == "0123abcd"


@pytest.mark.parametrize(("on_unknown", "tag"), [("fail", "error"), ("neutral", "skipped")])
def test_junit_unknown_is_an_error_when_it_fails_the_job_and_skipped_when_neutral(
    on_unknown: str, tag: str
) -> None:
    comparison = unknown()
    comparison.on_unknown = on_unknown
    root = parse(junit_xml(comparison))
    assert_consistent(root)
    undecided = [c for c in root.iter("testcase") if outcome(c) != "passed"]
    assert [c.attrib["name"] for c in undecided] == [
        c.name for c in comparison.checks if c.status == "UNKNOWN"
    ]
    assert {outcome(c) for c in undecided} == {tag}
    element = undecided[0].find(tag)
    assert element is not None and "UNKNOWN" in element.attrib["message"]
    assert counts(root)["errors" if tag == "error" else "skipped"] == len(undecided) >= 1


def test_junit_warn_passes_with_the_warning_in_system_out_and_text_is_valid_xml() -> None:
    comparison = failing()
    timing = comparison.timing(1)
    assert timing is not None
    # A WARN row, as the scaling check writes one, with a note quoting a server's control characters.
    warned = dataclasses.replace(timing, status="WARN", note="server said \x00\x1b[31mno\x1b[0m")
    comparison.checks = [warned if c is timing else c for c in comparison.checks]
    root = parse(junit_xml(comparison))
    assert_consistent(root)
    assert counts(root)["failures"] == 0
    case = next(c for c in root.iter("testcase") if c.attrib["name"] == "tokens/s (ws=1)")
    out = case.find("system-out")
    assert outcome(case) == "passed" and out is not None and (out.text or "").startswith("WARN: baseline ")
    assert "server said \ufffd\ufffd[31mno" in (out.text or "")


def test_reports_are_written_and_the_step_summary_appended_once_per_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    write_comparison(out, failing())
    (out / "published.json").write_text(json.dumps(PUBLISHED_SERVER))
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    assert write_step_summary(out) is None  # not in GitHub Actions: the reports only
    assert "**Verdict: FAIL**" in (out / SUMMARY_FILE).read_text()
    assert_consistent(parse((out / JUNIT_FILE).read_text()))
    step = tmp_path / "step_summary.md"
    step.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    assert write_step_summary(out) == step
    assert write_step_summary(out) == step
    text = step.read_text()
    assert text.startswith("earlier step\n")  # appended, never overwritten
    assert text.count("| tokens/s (ws=1) |") == 2
    assert text.count("MLflow: [run 0123abcd]") == 2


def test_a_step_summary_that_cannot_be_written_warns_and_keeps_the_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write_comparison(tmp_path, failing())
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "missing-dir" / "summary.md"))
    assert write_step_summary(tmp_path) is None
    assert "cannot append to GITHUB_STEP_SUMMARY" in capsys.readouterr().err
    assert (tmp_path / SUMMARY_FILE).is_file()
