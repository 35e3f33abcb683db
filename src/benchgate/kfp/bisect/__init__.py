"""The benchgate-bisect pipeline: a whole bisection as one task on one GPU node (pipeline.py) and what
that task runs in its pod (task.py)."""
