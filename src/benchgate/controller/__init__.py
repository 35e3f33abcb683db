"""The kopf operator of the BenchmarkRun and BenchmarkSchedule custom resources: it submits the pipeline
to KFP and mirrors the run and its verdict into the resource's status. kopf is imported here only.
"""
