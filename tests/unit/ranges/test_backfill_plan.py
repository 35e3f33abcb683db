"""The plan of `benchgate backfill A..B` (ranges/commits.py, ranges/backfill.py): the range's syntax and
checks on a real git repository, the commits along first parents, `--every`, which commits are skipped,
and the summary's figures. No gate runs: tests/ranges/test_backfill.py runs them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from benchgate.errors import EXIT_PASS, EXIT_RUN_FAILED, ConfigError
from benchgate.ranges.backfill import (
    Row,
    changes_vs_previous,
    counts,
    every_nth,
    exit_code,
    plan,
    skipped_row,
    summary_markdown,
)
from benchgate.ranges.commits import RangeCommit, parse_range, resolve_range
from benchgate.results.figures import HistoryPoint
from benchgate.tracking.backfill_index import Setup


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def empty_commit(repo: Path, message: str) -> str:
    git(repo, "commit", "-q", "--allow-empty", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def history(tmp_path: Path) -> tuple[Path, list[str], list[str]]:
    """main: m0 m1 m2 M m4, where M merges side branch s1 s2 (forked at m1); returns the repo, main's
    commits oldest first (M included) and the side branch's."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "ci@example.com")
    git(repo, "config", "user.name", "CI")
    main = [empty_commit(repo, "m0"), empty_commit(repo, "m1 [fix] | pipes")]
    git(repo, "checkout", "-q", "-b", "side")
    side = [empty_commit(repo, "s1"), empty_commit(repo, "s2")]
    git(repo, "checkout", "-q", "main")
    main.append(empty_commit(repo, "m2"))
    git(repo, "merge", "-q", "--no-ff", "-m", "merge side", "side")
    main.append(git(repo, "rev-parse", "HEAD"))
    main.append(empty_commit(repo, "m4"))
    return repo, main, side


def commits(n: int) -> list[RangeCommit]:
    return [RangeCommit(f"{i:02d}" * 20, f"commit {i}") for i in range(n)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("v1.4..main", ("v1.4", "main"), id="refs"),
        pytest.param("HEAD~3..HEAD", ("HEAD~3", "HEAD"), id="relative"),
        pytest.param("origin/main..feature/x", ("origin/main", "feature/x"), id="slashes"),
    ],
)
def test_a_range_is_two_ends_around_two_dots(text: str, expected: tuple[str, str]) -> None:
    assert parse_range(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("main", "RANGE: got 'main' (expected A..B with both ends", id="no-dots"),
        pytest.param("..main", "RANGE: got '..main' (expected A..B with both ends", id="no-start"),
        pytest.param("v1..", "RANGE: got 'v1..' (expected A..B with both ends", id="no-end"),
        pytest.param("a..b..c", "RANGE: got 'a..b..c' (expected A..B", id="three-ends"),
        pytest.param("a...b", "RANGE: got 'a...b' (A...B is git's symmetric difference", id="three-dots"),
    ],
)
def test_a_range_of_another_shape_is_refused_naming_it(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_range(text)
    assert message in str(refused.value)


def test_the_range_walks_first_parents_oldest_first(history: tuple[Path, list[str], list[str]]) -> None:
    repo, main, side = history
    resolved = resolve_range("HEAD~3..main", repo)
    # m1 is HEAD~3 along first parents; the merged side branch's commits are not walked.
    assert [c.sha for c in resolved.commits] == main[2:]
    assert not set(side) & {c.sha for c in resolved.commits}
    assert [c.subject for c in resolved.commits] == ["m2", "merge side", "m4"]
    assert (resolved.start, resolved.end) == (main[1], main[-1])
    assert resolved.repository == repo.resolve().as_uri()
    assert resolved.branch == "main"
    # An end that is no local branch gives the runs none; a subject keeps its brackets and pipes.
    by_sha = resolve_range(f"{main[0]}..{main[1]}", repo)
    assert by_sha.branch == "" and by_sha.commits == [RangeCommit(main[1], "m1 [fix] | pipes")]


def test_a_range_from_the_merged_branch_holds_the_merge(history: tuple[Path, list[str], list[str]]) -> None:
    repo, main, side = history
    assert resolve_range(f"{side[1]}..main", repo).end == main[-1]
    # s2 is an ancestor of main, though not on its first-parent line (the merge brought it in); m2 is
    # not reachable from s2, so it is in the range, as git means it.
    assert [c.subject for c in resolve_range(f"{side[1]}..main", repo).commits] == ["m2", "merge side", "m4"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "nope..main", "RANGE 'nope..main': A: got 'nope', which names no commit", id="unknown-a"
        ),
        pytest.param(
            "HEAD~1..nope", "RANGE 'HEAD~1..nope': B: got 'nope', which names no commit", id="unknown-b"
        ),
        pytest.param("main..HEAD", "whose ends are the same commit: it holds no commits", id="empty"),
        pytest.param("main..HEAD~2", "is not an ancestor of B", id="backwards"),
        pytest.param("side..main~2", "is not an ancestor of B", id="side-branch"),
    ],
)
def test_a_range_that_cannot_be_gated_is_bad_input(
    history: tuple[Path, list[str], list[str]], text: str, message: str
) -> None:
    repo, _, _ = history
    with pytest.raises(ConfigError) as refused:
        resolve_range(text, repo)
    assert message in str(refused.value)
    assert refused.value.exit_code == 2


def test_outside_a_repository_the_range_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is not inside a git repository"):
        resolve_range("HEAD~1..HEAD", tmp_path)


@pytest.mark.parametrize(
    ("n", "every", "kept"),
    [
        pytest.param(12, 1, list(range(12)), id="every-commit"),
        pytest.param(12, 5, [0, 5, 10, 11], id="every-5th-and-B"),
        pytest.param(12, 11, [0, 11], id="B-falls-on-the-step"),
        pytest.param(12, 4, [0, 4, 8, 11], id="B-added"),
        pytest.param(12, 100, [0, 11], id="first-and-B"),
        pytest.param(1, 3, [0], id="one-commit"),
    ],
)
def test_every_nth_keeps_the_first_every_nth_after_it_and_always_b(
    n: int, every: int, kept: list[int]
) -> None:
    made = commits(n)
    assert every_nth(made, every) == [made[i] for i in kept]


def test_every_below_one_is_refused() -> None:
    with pytest.raises(ConfigError, match="--every: got 0"):
        every_nth(commits(3), 0)


def point(commit: RangeCommit, run_id: str, rate: float, verdict: str = "PASS") -> HistoryPoint:
    figures = {"ws1/tokens_per_s_mean": rate}  # the run's tokens/s, as a gate run logs it
    return HistoryPoint(commit=commit.sha, created_unix=0.0, figures=figures, run_id=run_id, verdict=verdict)


def test_commits_mlflow_has_are_skipped_with_their_newest_run_unless_forced() -> None:
    made = commits(4)
    measured = {
        made[1].sha: [point(made[1], "old", 100.0), point(made[1], "new", 110.0, "WARN")],
        made[3].sha: [point(made[3], "only", 50.0)],
    }
    planned = plan(made, measured, force=False)
    assert [p.run for p in planned] == [True, False, True, False]
    assert planned[1].existing is not None and planned[1].existing.run_id == "new"
    assert skipped_row(planned[1]) == Row(made[1], "skipped", "WARN", 110.0, "new")
    forced = plan(made, measured, force=True)
    assert all(p.run for p in forced)
    assert forced[3].existing is not None  # still known: what --force measures again


def test_a_run_counts_only_where_it_measured_every_world_size_of_the_setup() -> None:
    setup = Setup("cpu-x2_torch2", "0123456789abcdef", (1, 2))
    assert setup.covers({"ws1/tokens_per_s_p50", "ws2/tokens_per_s_p50", "ws4/tokens_per_s_p50"})
    assert not setup.covers({"ws1/tokens_per_s_p50", "ws1/peak_memory_mib"})


def test_change_vs_previous_skips_commits_without_a_figure() -> None:
    made = commits(4)
    rows = [
        Row(made[0], "ran", "PASS", 100.0),
        Row(made[1], "failed", note="rank 0 crashed"),
        Row(made[2], "skipped", "PASS", 80.0),
        Row(made[3], "ran", "PASS", 88.0),
    ]
    changes = changes_vs_previous(rows)
    assert changes[0] is None and changes[1] is None
    assert changes[2] == pytest.approx(-20.0) and changes[3] == pytest.approx(10.0)


def test_exit_3_only_when_every_commit_to_run_failed() -> None:
    made = commits(3)
    failed = [Row(c, "failed", note="disk full") for c in made]
    assert exit_code(failed) == EXIT_RUN_FAILED
    assert exit_code([*failed[:2], Row(made[2], "ran", "FAIL", 1.0)]) == EXIT_PASS  # a verdict is no failure
    assert exit_code([*failed[:2], Row(made[2], "skipped")]) == EXIT_RUN_FAILED
    assert exit_code([Row(c, "skipped") for c in made]) == EXIT_PASS  # nothing to run: done


def test_the_summary_lists_every_commit_with_its_run_or_why_not() -> None:
    made = [RangeCommit("a" * 40, "fix | speed"), *commits(3)]
    rows = [
        Row(made[0], "ran", "PASS", 1000.0, "run-a"),
        Row(made[1], "skipped", "PASS", 500.0, "run-b"),
        Row(made[2], "failed", note="rank 0 crashed"),
        Row(made[3], "submitted", run_id="kfp-1", note="benchgate-0303-abc"),
    ]
    text = summary_markdown("backfill a..b", rows)
    lines = text.splitlines()
    assert lines[0] == "## backfill a..b"
    assert counts(rows) == "4 commits: 1 ran, 1 submitted, 1 skipped, 1 failed" == lines[2]
    assert lines[6] == "| aaaaaaaaaaaa | fix \\| speed | PASS | 1,000 | — | run-a |"
    assert lines[7] == f"| {made[1].sha[:12]} | commit 0 | PASS | 500 | -50.0% | skipped (run-b) |"
    assert "| failed: rank 0 crashed |" in lines[8]
    assert lines[9].endswith("| submitted: kfp-1 (benchgate-0303-abc) |")
