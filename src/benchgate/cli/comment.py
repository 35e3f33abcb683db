"""`benchgate comment`: the run's summary as one PR/MR comment, printed, and posted when a token is set.

It reports, it does not gate: whatever the verdict, it exits 0 once the comment is printed (and posted).
The job's pass or fail comes from `benchgate run`'s exit code. Exit 2: bad input (no results in --out,
a variable the forge needs is not set); exit 3: the forge refused the comment or could not be reached.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

from benchgate.cli.terminal import errors, exit_codes, fail, option
from benchgate.errors import EXIT_BAD_INPUT, EXIT_PASS, EXIT_RUN_FAILED, BenchgateError

EPILOG = exit_codes(
    (EXIT_PASS, "the comment was printed (and posted), whatever the verdict: it reports, it does not gate"),
    (EXIT_BAD_INPUT, "bad input: no run in --out, a bad flag, or a variable the forge needs is not set"),
    (EXIT_RUN_FAILED, "the forge refused the comment (401, 403, 404, ...) or was unreachable"),
)


def comment(
    out: Annotated[
        Path, option(metavar="DIR", text="Results directory of a finished benchgate run (its --out).")
    ] = Path("benchgate-out"),
    pr: Annotated[
        int | None,
        option(
            metavar="N",
            text="Pull request number (GitHub) or merge request IID (GitLab).",
            default="GITHUB_EVENT_PATH's pull_request.number, or CI_MERGE_REQUEST_IID",
        ),
    ] = None,
    forge: Annotated[
        str,
        option(
            metavar="FORGE",
            text="github, gitlab, or auto: the one whose token is set (GITHUB_TOKEN, GITLAB_TOKEN).",
        ),
    ] = "auto",
) -> None:
    """Print the run's summary as one pull/merge request comment; with a token, post it.

    The comment starts with a hidden marker of the workload and machine profile: a later run edits that
    comment in place instead of adding another. GitHub: GITHUB_TOKEN, GITHUB_REPOSITORY, GITHUB_API_URL.
    GitLab: GITLAB_TOKEN (api scope), CI_API_V4_URL, CI_PROJECT_ID. Without a token the comment is only
    printed. This command reports, it does not gate: it exits 0 whatever the verdict.
    """
    from benchgate.publish.comment import comment_body, post, target_from_env

    try:
        target = target_from_env(os.environ, pr, forge)
        tag, body = comment_body(out.resolve())
    except BenchgateError as exc:
        fail(exc)
    print(body, end="", flush=True)
    if target is None:
        errors.print(
            "no GITHUB_TOKEN or GITLAB_TOKEN: the comment is printed, not posted",
            markup=False,
            highlight=False,
        )
        return
    try:
        posted = post(target, tag, body)
    except BenchgateError as exc:
        fail(exc)
    errors.print(f"comment {posted.action}: {posted.url}", markup=False, highlight=False)
