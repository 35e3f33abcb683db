import benchgate

EXPECTED = {
    "BadInputError",
    "BaselineError",
    "BenchgateError",
    "Bundle",
    "Check",
    "Comparison",
    "ConfigError",
    "FlopsPerToken",
    "GateOutcome",
    "RunConfig",
    "RunFailedError",
    "Workload",
    "WorkloadError",
    "__version__",
    "capture_environment",
    "compare",
    "load_bundle",
    "load_config",
    "load_workload",
    "machine_profile",
    "run_gate",
}


def test_public_api_is_pinned() -> None:
    assert set(benchgate.__all__) == EXPECTED
    assert all(hasattr(benchgate, name) for name in benchgate.__all__)
