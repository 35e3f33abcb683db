"""The kopf handlers: each gathers its inputs, asks a decision of controller/decide/ and applies the
`Outcome` and the remote calls (run.py for BenchmarkRun, schedule.py for BenchmarkSchedule, with the
runtime and `apply_outcome` they share in runtime.py), and where kopf keeps its own records
(persistence.py)."""
