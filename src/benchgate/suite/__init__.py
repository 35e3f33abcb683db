"""Suites: several workloads and variants gated in one run, and the trade-offs between them.

Each entry of a suite.toml (a workload, its arguments and a variant) is a gate run of its own, stored
and compared under its own name; the suite adds one table, one exit code, one MLflow parent over them
all, and the Pareto view of the entries' speed against their quality and memory.

    spec           suite.toml read and checked; each entry's RunConfig (`entry_config`)
    runner         the entries run one at a time through an injected gate function; suite.json after each
    table          the verdicts grouped by entry: the terminal's table and suite.md
    stage          a whole suite: the entries, the table, the report, then the MLflow parent
    report         the Pareto view written into the suite's directory (`write_suite_report`)
    entry_figures  each entry's tokens/s, perplexity and peak memory, read from its results
    pareto         the frontier, pure; pareto_plot draws it, suite_page is suite.html

The gate itself is injected (`benchgate suite run` passes the local pipeline's `run_gate`), so this
folder sits below kfp/ and cli/ and imports neither.
"""
