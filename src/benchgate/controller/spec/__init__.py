"""The operator's API: the spec models of BenchmarkRun and BenchmarkSchedule (resources.py, a suite's in
suite.py), their status models (status.py) and the CRDs generated from both (crds.py). Pure."""
