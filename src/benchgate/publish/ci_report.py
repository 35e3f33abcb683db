"""The verdict where CI users read it: summary.md (step summary, PR comment) and junit.xml (test reports).

Both are rendered from the run's compare.json and published.json, so the publish stage (local runs and
cluster runs alike), `benchgate run --resume` and `benchgate comment` all show the same thing.

summary.md is what a pull-request reader sees, on the pull request's page and not on the CI runner,
whose disk goes with the job: one table (metric, baseline, candidate, change with its interval,
verdict; a row an A/B decided has its A/B pair on a line under it, as in compare.md), the overall
verdict with the exit code, the machine profile, the MLflow run (a link where the tracking URI is a
server; never a run of a store that only the runner had), why each row that is not PASS is what it
is, and what to do next (benchgate.checks.next_steps, for a reader away from the runner: the run's
files named within the job's artifact, `benchgate-out`). The rules stay folded away: they are long,
and the table says enough.

junit.xml maps each gated row (PASS, WARN, UNKNOWN, FAIL; NEW and INFO rows judge nothing) to one
<testcase>, classname `benchgate.<workload>.<profile>` (dots of the profile become underscores, as
Jenkins splits a classname at its last dot into package and class), name the check. Outcomes:

    FAIL      <failure>   GitLab lists it as failed, Jenkins as a failed test: the report turns red.
    UNKNOWN   <error>     when gate.on_unknown = fail (the job exits 4): both tools count an error as a
                          failing test, so an undecided timing is never a silent green.
              <skipped>   when gate.on_unknown = neutral (the job exits 0): shown as skipped, which both
                          tools display apart from the passed tests, so it stays visible without turning
                          the report red for a job that passed.
    WARN      passed      with the warning in <system-out> (both tools show it on the test's page): a
                          WARN does not fail the job either.
    PASS      passed

So the report is red exactly when the job is. Each element's message holds the change, its interval
and the baseline; its text the whole rule and the row's note. The <testsuites> and <testsuite> carry
tests/failures/errors/skipped counts, as both readers expect.
"""

from __future__ import annotations

import os
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from benchgate.checks.next_steps import next_steps
from benchgate.checks.paired import shown_figures
from benchgate.checks.tables import _change, _interval, _number, table_rows, why_block
from benchgate.errors import BenchgateError
from benchgate.kit.diskfaults import writing
from benchgate.kit.files import read_json_object, write_text
from benchgate.results.bundle import PUBLISHED_FILE
from benchgate.results.comparison import Check, Comparison, load_comparison

SUMMARY_FILE = "summary.md"
JUNIT_FILE = "junit.xml"
CI_FILES = (SUMMARY_FILE, JUNIT_FILE)
STEP_SUMMARY_VARIABLE = "GITHUB_STEP_SUMMARY"
GATED = ("PASS", "WARN", "UNKNOWN", "FAIL")
# The results directory as the CI jobs of docs/ci.md upload it (RunConfig.out's default): the artifact a
# reader downloads, named where the run's own directory is not known (a pipeline task's summary).
DEFAULT_ARTIFACT = "benchgate-out"
# A footnote marker of the verdict table ("tokens/s (ws=1) [1]"): its rules are folded away here.
_FOOTNOTE = re.compile(r" \[\d+\]$")
# XML 1.0 has no place for most control characters; a note quoting a server's error may carry one.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _cell(text: str) -> str:
    """Text as one Markdown table cell: a `|` would end the cell, a newline the row, `<` open HTML."""
    escaped = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")
    return " ".join(escaped.split())


def _code(text: str) -> str:
    return "`" + text.replace("`", "'") + "`"


def change_text(check: Check) -> str:
    """The change and its interval, e.g. `-20.00% [-22.0, -18.0]%`, or `—` when there is none."""
    change, interval = _change(check), _interval(check)
    return change if interval == "—" else f"{change} {interval}"


def _verdict_line(comparison: Comparison) -> str:
    line = f"**Verdict: {comparison.verdict}** (exit {comparison.exit_code})"
    if comparison.verdict == "UNKNOWN" and comparison.on_unknown == "neutral":
        line += ": UNKNOWN is neutral here (gate.on_unknown = neutral)"
    return line


def mlflow_line(published: dict[str, Any]) -> str | None:
    """Where the run is in MLflow, for a reader of the pull request: a link where the tracking URI is a
    server (published.json has its URL); else why there is none. A run id of the local store, or a
    spool, is on the machine that ran it, which a CI runner does not keep: never given as a place."""
    run_id, url = published.get("mlflow_run_id"), published.get("mlflow_url")
    if url and run_id:
        line = f"MLflow: [run {run_id}]({url})"
    elif run_id:
        line = (
            "MLflow: no link, the tracking URI is no http(s) server; without `MLFLOW_TRACKING_URI` the run "
            "went to the local store of the machine that ran it, which a CI runner does not keep"
        )
    elif published.get("spooled") or published.get("kept"):
        line = (
            "MLflow: not logged; the tracking server could not be reached, and the run waits in the spool "
            "of the machine that ran it for `benchgate sync` (a CI runner's spool goes with the runner)"
        )
    else:
        return None
    if published.get("resumed"):
        line += " (logged before the A/B was resumed; the verdict above is the resumed one)"
    return line


def summary_markdown(comparison: Comparison, published: dict[str, Any], out_dir: Path | None = None) -> str:
    """The short summary for a PR reader (GitHub-flavoured Markdown, also read by GitLab); `out_dir`:
    the run's directory, whose name is the artifact the next steps name (DEFAULT_ARTIFACT where it is not
    known, as in a pipeline task)."""
    artifact = out_dir.name if out_dir is not None and out_dir.name else DEFAULT_ARTIFACT
    steps = next_steps(comparison, out_dir, artifact=artifact)
    lines = [
        f"### benchgate: {comparison.verdict} · {_code(str(comparison.workload))}",
        "",
        "| metric | baseline | candidate | change (interval) | verdict |",
        "|---|---:|---:|---|---|",
    ]
    for row in table_rows(comparison):  # compare.md's lines: an A/B pair under the row it decided
        name, baseline, current, change, interval = row.cells
        status = f"**{row.status}**" if row.status in ("FAIL", "UNKNOWN", "WARN") else row.status
        status += f": {_cell(row.why)}" if row.why else ""
        moved = change if interval == "—" else f"{change} {interval}"
        cells = [_FOOTNOTE.sub("", name), baseline, current, moved]
        lines.append("| " + " | ".join(_cell(cell) for cell in cells) + f" | {status} |")
    lines += ["", _verdict_line(comparison), "", f"Machine profile: {_code(comparison.machine_profile)}"]
    if (where := mlflow_line(published)) is not None:
        lines += ["", where]
    flagged = [c for c in comparison.checks if c.status in ("FAIL", "UNKNOWN", "WARN")]
    if flagged:
        lines.append("")
        lines += [f"- {_cell(c.name)}: {c.status}. {_cell(c.note or c.rule)}".rstrip() for c in flagged]
    lines += why_block(comparison)  # the operators behind an explained A/B's change
    lines += [f"\n> {_cell(note)}" for note in comparison.notes]
    if steps:
        # The steps are benchgate's own sentences, commands already in backticks: Markdown as written.
        lines += ["", "**Next step:**", ""] + [f"- {' '.join(step.split())}" for step in steps]
    ruled = [c for c in comparison.checks if c.rule and c.status in GATED]
    if ruled:
        lines += ["", "<details><summary>rules</summary>", ""]
        lines += [f"- {_cell(c.name)}: {_cell(c.rule)}" for c in ruled]
        lines += ["", "</details>"]
    return "\n".join(lines) + "\n"


def _xml_text(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)


def _classname(comparison: Comparison) -> str:
    return _xml_text(f"benchgate.{comparison.workload}.{comparison.machine_profile.replace('.', '_')}")


def _detail(check: Check) -> str:
    shown = shown_figures(check)
    pair = ""
    if shown.paired:
        base, candidate = _number(shown.ab_base, check.unit), _number(shown.ab_candidate, check.unit)
        pair = f", A/B base {base}, A/B candidate {candidate}"
    return _xml_text(
        f"baseline {_number(shown.baseline, check.unit)}, candidate {_number(shown.current, check.unit)}"
        f"{pair}, change {change_text(check)}"
    )


def _testcase(comparison: Comparison, check: Check) -> tuple[ET.Element, str]:
    """One gated row as a <testcase>, and what it counts as: passed, failure, error or skipped."""
    case = ET.Element("testcase", classname=_classname(comparison), name=_xml_text(check.name), time="0")
    body = _xml_text("\n".join(p for p in (f"rule: {check.rule}" if check.rule else "", check.note) if p))
    message = _detail(check)
    if check.status == "FAIL":
        ET.SubElement(case, "failure", message=message, type="FAIL").text = body
        return case, "failures"
    if check.status == "UNKNOWN" and comparison.on_unknown == "neutral":
        ET.SubElement(case, "skipped", message=f"UNKNOWN, neutral (gate.on_unknown = neutral): {message}")
        ET.SubElement(case, "system-out").text = body
        return case, "skipped"
    if check.status == "UNKNOWN":
        ET.SubElement(case, "error", message=f"UNKNOWN (undecided): {message}", type="UNKNOWN").text = body
        return case, "errors"
    ET.SubElement(case, "system-out").text = _xml_text(f"{check.status}: {message}\n{body}".rstrip())
    return case, "passed"


def junit_xml(comparison: Comparison, published: dict[str, Any] | None = None) -> str:
    """The gated rows as a JUnit XML report (see the module docstring for how each verdict maps)."""
    published = published or {}
    counts = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    suite = ET.Element(
        "testsuite",
        name=_xml_text(f"benchgate {comparison.workload} on {comparison.machine_profile}"),
    )
    properties = ET.SubElement(suite, "properties")
    facts = {
        "verdict": comparison.verdict,
        "exit_code": str(comparison.exit_code),
        "machine_profile": comparison.machine_profile,
        "mlflow_run_id": str(published.get("mlflow_run_id") or ""),
        "mlflow_url": str(published.get("mlflow_url") or ""),
    }
    for key, value in facts.items():
        if value:
            ET.SubElement(properties, "property", name=key, value=_xml_text(value))
    for check in comparison.checks:
        if check.status not in GATED:
            continue
        case, outcome = _testcase(comparison, check)
        suite.append(case)
        counts["tests"] += 1
        if outcome != "passed":
            counts[outcome] += 1
    attributes = {key: str(value) for key, value in counts.items()} | {"time": "0"}
    suite.attrib.update(attributes)
    root = ET.Element("testsuites", {"name": "benchgate", **attributes})
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _published(results_dir: Path) -> dict[str, Any]:
    path = results_dir / PUBLISHED_FILE
    return read_json_object(path) if path.is_file() else {}


def render_summary(results_dir: Path, out_dir: Path | None = None) -> str:
    """summary.md's text for the run in `results_dir`; `out_dir`: the directory the next step names
    (None where it is not known, as in a pipeline task)."""
    return summary_markdown(load_comparison(results_dir / "compare.json"), _published(results_dir), out_dir)


def write_reports(results_dir: Path, out_dir: Path | None = None) -> list[Path]:
    """Write summary.md and junit.xml into `results_dir`, each atomically; a refused write is a DiskError."""
    comparison = load_comparison(results_dir / "compare.json")
    published = _published(results_dir)
    texts = {
        SUMMARY_FILE: summary_markdown(comparison, published, out_dir),
        JUNIT_FILE: junit_xml(comparison, published),
    }
    written = []
    for name, text in texts.items():
        path = results_dir / name
        with writing("the CI report", path):
            written.append(write_text(path, text))
    return written


def write_step_summary(out_dir: Path) -> Path | None:
    """At the end of `benchgate run` (and `--resume`): rewrite the reports in `out_dir`, so that the next
    step names this directory, then append summary.md to $GITHUB_STEP_SUMMARY when it is set.

    Returns the step summary file, or None (not set, or a problem, which is a warning: the verdict is
    decided and printed, and the job's exit code must stay the verdict's)."""
    out_dir = Path(out_dir).resolve()
    try:
        write_reports(out_dir, out_dir)
    except (BenchgateError, ValueError) as e:
        print(f"benchgate: warning: the CI reports were not rewritten: {e}", file=sys.stderr, flush=True)
    target = os.environ.get(STEP_SUMMARY_VARIABLE, "")
    summary = out_dir / SUMMARY_FILE
    if not target or not summary.is_file():
        return None
    try:
        with open(target, "a", encoding="utf-8") as f:
            f.write(summary.read_text(encoding="utf-8") + "\n")
    except OSError as e:
        print(
            f"benchgate: warning: cannot append to {STEP_SUMMARY_VARIABLE} {target}: {e.strerror or e}",
            file=sys.stderr,
            flush=True,
        )
        return None
    return Path(target)
