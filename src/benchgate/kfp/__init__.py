"""The gate as a Kubeflow pipeline: each KFP component wraps one stage (`components`, over the task
bodies in `tasks`), `pipeline` chains them, `local_run` runs that same pipeline through kfp.local, and
`submit` sends it to a cluster. kfp is imported here only.
"""
