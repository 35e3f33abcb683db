"""`benchgate run --resume DIR`: continue an undecided A/B from the rounds DIR saved.

A/B answers UNKNOWN when its time budget (gate.ab.max_seconds) ends before a look decides, or after
gate.ab.max_rounds. Starting over would throw the rounds away and hand a real slowdown a fresh chance
to pass; resuming continues the same sequence, whose looks keep its error control (ab/decision.py).

What a resume may continue: the A/B of DIR's own run (config.json, env.json, ab/ws<N>/ab.json), of the
same base commit against the same candidate: a commit, or a working tree that is still that clean
commit. The base (and a candidate commit) are checked out afresh into a temporary directory; the new
rounds, compare.json, compare.md, report.html and the CI reports (summary.md, junit.xml) are written
into DIR, and published.json marks the run resumed (its MLflow run holds the verdict before the
resume). The run's own configuration (DIR/config.json) is kept; a `--config` file given to the resume
contributes only its [gate.ab] section (the budget: max_rounds, max_seconds), so the resumed rounds
measure what the first ones did.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from benchgate.ab.runner import AB_FILE, RoundCallback, Side
from benchgate.config import RunConfig
from benchgate.errors import BadInputError
from benchgate.kit.diskfaults import writing
from benchgate.kit.files import read_json, read_json_object, write_json
from benchgate.measure.env import capture_git
from benchgate.results import outdir
from benchgate.results.comparison import Comparison

UNDECIDED = ("UNKNOWN", "CONTINUE")


def _saved(out_dir: Path) -> dict[int, dict[str, Any]]:
    return {int(p.parent.name.removeprefix("ws")): read_json(p) for p in out_dir.glob(f"ab/ws*/{AB_FILE}")}


def _working_tree(env: dict[str, Any], description: str) -> Side:
    """The candidate as the working tree, only while it is still the clean commit the run measured."""
    then = env.get("git") or {}
    now = capture_git(Path.cwd(), None)
    if (
        then.get("dirty") is not False
        or now.get("dirty") is not False
        or now.get("commit") != then.get("commit")
    ):
        raise BadInputError(
            f"--resume: the candidate was the working tree at {then.get('commit') or 'an unknown commit'}"
            f"{' with changes' if then.get('dirty') else ''}; here is {now.get('commit') or 'no git commit'}"
            f"{' with changes' if now.get('dirty') else ''}. A resume must measure the same code: commit "
            "the change and run `benchgate run --base REF` again"
        )
    return Side(description)


def resume_gate(
    out_dir: Path, config: RunConfig | None = None, on_round: RoundCallback | None = None
) -> Comparison:
    """Continue the undecided A/B world sizes of the run in `out_dir`; returns the new comparison.

    `config`: where the budget comes from (its gate.ab only); the run's own config.json otherwise."""
    from benchgate.ab.stage import stage_ab
    from benchgate.measure.source import checkout, import_paths
    from benchgate.publish.ci_report import CI_FILES, write_reports
    from benchgate.publish.stage import write_report
    from benchgate.results.bundle import PUBLISHED_FILE

    out_dir = Path(out_dir).resolve()
    if not (out_dir / "compare.json").is_file():
        raise BadInputError(f"--resume: {out_dir} holds no benchgate run (no compare.json)")
    saved = _saved(out_dir)
    undecided = sorted(ws for ws, ab in saved.items() if ab["decision"]["status"] in UNDECIDED)
    if not undecided:
        found = ", ".join(f"ws={ws} {ab['decision']['status']}" for ws, ab in sorted(saved.items()))
        raise BadInputError(
            f"--resume: {out_dir} holds no undecided A/B ({found or 'no ab/ws<N>/ab.json at all'}); "
            "only an A/B that ended UNKNOWN can be resumed"
        )
    with outdir.claimed(out_dir) as out:
        out.will_write(["ab", "compare.json", "compare.md", "report.html", PUBLISHED_FILE, *CI_FILES])
        settings = RunConfig.model_validate(read_json(out_dir / "config.json"))
        if config is not None:
            gate = settings.gate.model_copy(update={"ab": config.gate.ab})
            settings = settings.model_copy(update={"gate": gate})
        env = read_json(out_dir / "env.json")
        first = saved[undecided[0]]
        repository = (env.get("base") or {}).get("repository") or (env.get("source") or {}).get("repository")
        if not repository:
            raise BadInputError(f"--resume: {out_dir}/env.json names no repository to check the base out of")
        with tempfile.TemporaryDirectory(prefix="benchgate-resume-") as tmp:
            base_commit = first["base"]["commit"]
            base_root = checkout(repository, base_commit, Path(tmp) / "base")
            base = Side(first["base"]["description"], base_commit, tuple(import_paths(base_root)))
            candidate_commit = first["candidate"]["commit"]
            if candidate_commit:
                root = checkout(repository, candidate_commit, Path(tmp) / "candidate")
                candidate = Side(
                    first["candidate"]["description"], candidate_commit, tuple(import_paths(root))
                )
            else:
                candidate = _working_tree(env, first["candidate"]["description"])
            comparison = stage_ab(settings, out_dir, undecided, base, candidate, on_round, resume=True)
        write_report(settings, out_dir)
        _mark_resumed(out_dir)
        write_reports(out_dir, out_dir)
    return comparison


def _mark_resumed(out_dir: Path) -> None:
    """published.json says the verdict was decided after the run was published: its MLflow run holds
    the verdict before the resume (the CI summary says so beside its link)."""
    from benchgate.results.bundle import PUBLISHED_FILE

    path = out_dir / PUBLISHED_FILE
    try:
        published = read_json_object(path) if path.is_file() else {}
    except ValueError as e:  # names the file
        raise BadInputError(f"--resume: {e}") from None
    with writing("the results", path):
        write_json(path, published | {"resumed": True})
