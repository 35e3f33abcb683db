"""Files the workloads read at run time: the fixed evaluation shard (shard.txt) and the task probes
(probes.json). A package so that the layer rules of `make lint` can place it: beside `workloads`, the
only reader (workloads/shard.py, through importlib.resources). No code.
"""
