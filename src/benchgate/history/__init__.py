"""What a per-commit gate cannot see, found in the history of runs: change points in a figure's level
(`changes`), over the runs MLflow holds for one machine profile and workload.
"""
