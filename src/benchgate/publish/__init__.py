"""The publish stage, after the final verdict: the baseline policy, report.html and its plots, the CI
reports (summary.md, junit.xml, the PR comment), the MLflow record through the spool, and resuming an
undecided run.
"""
