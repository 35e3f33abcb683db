"""The README, executed: every shell block runs as printed, in a repository set up as the quickstart says.

A block that must not run in a test (`make test` is this suite; a server runs until stopped; an install
needs the network) carries `<!-- not run by tests: REASON -->` on the line above it. Every other shell
block is run, in document order, in one shared directory: a git repository on `main` with the README's
`my_bench.py` committed and pushed to a bare `origin`, so `origin/main` exists as it does in a clone.
docs/workloads.md, where the README's "Bring your own model" goes on, is run the same way after the
README, in the same directory (its FSDP2 example is `my_fsdp_bench.py` there). `benchgate` comes from
this checkout's .venv (first on PATH); nothing is installed.

Some blocks depend on the state of the repository, as the README's prose around them says; SCENARIOS
holds that state and the exit code the README promises for it (the quickstart's `--base` run is on a
branch whose change makes the model slower: FAIL, exit 1). Every other block must exit 0.

The fast tests check what can be checked without running anything: the markers, the TOML blocks
against the config loader, the links between the documents, and the first screen.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from doc_blocks import (
    CI_DOC,
    CONFIG_DOC,
    README,
    REPO,
    WORKLOADS_DOC,
    Block,
    code_blocks,
    commit_files,
    deeper_model,
    git,
    init_repo,
    parallel_example,
    run_shell,
    shell_blocks,
    stray_markers,
    user_env,
    workload_example,
)

from benchgate.config import load_config
from benchgate.results.comparison import TIMING

FIRST_RUN = "benchgate run --workload my_bench:make_workload --workload-arg hidden=512"
BASE_RUN = FIRST_RUN + " --base origin/main"
# The documents this change wrote; their relative links must resolve (files and #anchors).
CLUSTER_DOCS = ("kfp", "kubernetes", "design", "multinode", "suites-on-kubernetes")
# The pages the README's longer sections moved to (the README links to each, one step away).
MOVED_DOCS = (
    "configuration", "verdict", "results", "gpus", "hugging-face", "suites", "baselines", "mlflow",
    "backfill", "bisect", "doctor", "reliability",
)  # fmt: skip
# The documents whose shell blocks run (in this order, in one workspace): the README, then the rest of
# its "Bring your own model".
RUN_DOCS = (README, WORKLOADS_DOC)
# Every other document's commands need a cluster, a server, the network or minutes: none runs unmarked.
MARKED_DOCS = [CI_DOC, *(REPO / "docs" / f"{n}.md" for n in (*CLUSTER_DOCS, *MOVED_DOCS))]
LINKED_DOCS = [*RUN_DOCS, *MARKED_DOCS]
# The TOML blocks that must load as bench.toml: the README's, docs/ci.md's and the config reference's.
CONFIG_DOCS = (README, CI_DOC, CONFIG_DOC)


def _timing_rows(workspace: Path) -> list[dict[str, Any]]:
    compare = json.loads((workspace / "benchgate-out" / "compare.json").read_text(encoding="utf-8"))
    return [c for c in compare["checks"] if c["metric"] == TIMING]


def _on_main(workspace: Path) -> None:
    assert git(workspace, "rev-parse", "--abbrev-ref", "HEAD") == "main"


def _first_run_wrote_the_baseline(workspace: Path) -> None:
    rows = _timing_rows(workspace)
    assert rows and all(r["status"] == "NEW" for r in rows), rows
    stored = list((workspace / ".benchgate" / "baselines").glob("*/mlp-regression/baseline.json"))
    assert stored, "the first run on main must write the baseline"


def _a_slower_change_on_a_branch(workspace: Path) -> None:
    git(workspace, "switch", "-q", "-c", "my-change")
    commit_files(workspace, "a deeper model", {"my_bench.py": deeper_model(workload_example())})


def _ab_called_it_slower(workspace: Path) -> None:
    rows = _timing_rows(workspace)
    # ws=N > 1 is A/B'd only on a host with gate.ab.cores_per_rank x N cores (ab/host_fit.py): on a
    # 2-core host its row says why it was not, and ws=1's A/B decides.
    assert rows and all(
        (r["status"] == "FAIL" and r["decided_by"] == "ab")
        or (r["world_size"] > 1 and r["decided_by"] == "host" and "cores" in r["note"])
        for r in rows
    ), rows
    assert any(r["world_size"] == 1 and r["decided_by"] == "ab" for r in rows), rows


@dataclass(frozen=True)
class Scenario:
    before: Callable[[Path], None]
    exit_code: int
    after: Callable[[Path], None]


SCENARIOS = {
    FIRST_RUN: Scenario(_on_main, 0, _first_run_wrote_the_baseline),
    BASE_RUN: Scenario(_a_slower_change_on_a_branch, 1, _ab_called_it_slower),
}


def _commands(block: Block) -> str:
    """The block without comment lines and trailing comments: what SCENARIOS keys on."""
    lines = [re.sub(r"\s+#.*$", "", line).strip() for line in block.text.splitlines()]
    return "\n".join(line for line in lines if line and not line.startswith("#"))


EXECUTED = [b for doc in RUN_DOCS for b in shell_blocks(doc) if b.not_run is None]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The user's repository of the quickstart: my_bench.py on main, pushed to a bare origin."""
    root = tmp_path_factory.mktemp("readme")
    origin = root / "origin.git"
    git(root, "init", "-q", "--bare", "-b", "main", str(origin))
    repo = init_repo(root / "my-project")
    commit_files(
        repo,
        "a training step to gate",
        {"my_bench.py": workload_example(), "my_fsdp_bench.py": parallel_example()},
    )
    git(repo, "remote", "add", "origin", str(origin))
    git(repo, "push", "-q", "-u", "origin", "main")
    return repo


def test_every_shell_block_is_run_or_says_why_not() -> None:
    for doc in RUN_DOCS:
        for block in shell_blocks(doc):
            if block.not_run is not None:
                assert block.not_run, f"{block.where}: a `not run by tests` marker must give its reason"
        assert stray_markers(doc) == [], f"{doc.relative_to(REPO)}: markers that sit above no shell block"
    # The quickstart's commands are among those run, not marked away, and so is the FSDP2 example's.
    run_commands = {_commands(b) for b in EXECUTED}
    assert set(SCENARIOS) <= run_commands, set(SCENARIOS) - run_commands
    assert any(b.path == WORKLOADS_DOC and "my_fsdp_bench:make_workload" in b.text for b in EXECUTED)
    # `make test` is this suite: running it from here would recurse.
    assert all("make test" not in b.text for b in EXECUTED)


@pytest.mark.parametrize("doc", MARKED_DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_no_other_document_has_a_shell_block_nobody_runs(doc: Path) -> None:
    """docs/ci.md's commands are its jobs' steps (test_ci_jobs.py runs them); the cluster documents'
    commands need a cluster; the other pages' need a server, the network or minutes (a test elsewhere
    runs each, as its marker says). A shell block there must say why no test runs it."""
    unmarked = [b.where for b in shell_blocks(doc) if not b.not_run]
    assert unmarked == []
    assert stray_markers(doc) == []


def test_the_first_screen_says_what_to_run_and_what_each_verdict_asks_of_you() -> None:
    text = README.read_text(encoding="utf-8")
    first_screen = text[: text.index("\n## ")]
    for needed in ("make bench", "make test", "PASS", "WARN", "FAIL", "UNKNOWN", "NEW"):
        assert needed in first_screen, needed
    for what_to_do in ("--base origin/main", "benchgate run --resume", "max_rounds"):
        assert what_to_do in first_screen, what_to_do
    assert "Kubeflow" not in first_screen  # the cluster comes later, for those who have one


def test_the_config_reference_is_among_the_loaded_files() -> None:
    """docs/configuration.md's file, with every default, is loaded below: the parametrisation cannot
    lose it without failing here."""
    (block,) = [b for b in code_blocks(CONFIG_DOC) if b.lang == "toml"]
    assert "[gate.ab]" in block.text and "[gate.tolerances]" in block.text


@pytest.mark.parametrize(
    "block",
    [b for path in CONFIG_DOCS for b in code_blocks(path) if b.lang == "toml"],
    ids=lambda b: b.where,
)
def test_documented_config_files_load(block: Block, tmp_path: Path) -> None:
    """Each TOML block is a valid bench.toml: unknown keys or bad values would be refused (exit 2)."""
    path = tmp_path / "bench.toml"
    path.write_text(block.text, encoding="utf-8")
    config = load_config(path)
    documented = tomllib.loads(block.text)
    if "bench" in documented and "workload" in documented["bench"]:
        assert config.bench.workload == documented["bench"]["workload"]


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    anchors = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*$", markdown, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.replace("`", "").lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


@pytest.mark.parametrize("doc", LINKED_DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://", target):
            continue
        file_part, _, anchor = target.partition("#")
        linked = (doc.parent / file_part).resolve() if file_part else doc
        if not linked.exists() or (
            anchor and linked.suffix == ".md" and anchor not in _anchors(linked.read_text(encoding="utf-8"))
        ):
            broken.append(target)
    assert broken == [], f"{doc.relative_to(REPO)}: links to nothing: {broken}"


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.timeout(900)
@pytest.mark.parametrize("block", EXECUTED, ids=lambda b: b.where)
def test_readme_shell_block_runs_as_printed(block: Block, workspace: Path) -> None:
    """Run in document order in the shared repository; the quickstart's runs take a minute or more."""
    scenario = SCENARIOS.get(_commands(block))
    if scenario is not None:
        scenario.before(workspace)
    done = run_shell(block.text, workspace, user_env())
    expected = scenario.exit_code if scenario is not None else 0
    assert done.returncode == expected, (
        f"{block.where}: exit {done.returncode}, the README promises {expected}\n"
        f"{block.text}\n--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}"
    )
    if scenario is not None:
        scenario.after(workspace)
