"""The benchgate-suite pipeline: every entry of a suite gated in one KFP run (pipeline.py), the suite gate
task (task.py) and the submission (submit.py). An entry's format is the gate pipeline's `suite_entry`
parameter, so it lives beside that pipeline (kfp/suite_entry.py)."""
