"""A BenchmarkRun's GPU pod requests, end to end: real kopf, kmock's API, the FAKE KFP server.

The spec's `cpuRequest` and `memoryRequest` reach the KFP run as the pipeline's `gpu_cpu_request` and
`gpu_memory_request`, in the pipeline the controller sends (whose GPU executors read them and mount a
memory /dev/shm); a request of zero, which would leave the pods BestEffort, is refused before KFP hears
of the run.
"""

from __future__ import annotations

from typing import Any

import pytest
from operator_harness import Cluster, run_manifest, schema_errors

pytestmark = pytest.mark.asyncio


def gpu_executors(pipeline: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """{executor label: its container's resources} of every executor that asks for a GPU."""
    executors = pipeline["pipeline_spec"]["deploymentSpec"]["executors"]
    return {
        label: executor["container"]["resources"]
        for label, executor in executors.items()
        if "accelerator" in executor["container"].get("resources", {})
    }


async def test_the_runs_requests_reach_the_kfp_run_and_its_gpu_pods(cluster: Cluster) -> None:
    await cluster.create(run_manifest("pr-gpu", cpuRequest="16", memoryRequest="64Gi"))
    await cluster.phase("pr-gpu", "Running")
    (body,) = cluster.kfp.created_runs
    parameters = body["runtime_config"]["parameters"]
    assert (parameters["gpu_cpu_request"], parameters["gpu_memory_request"]) == ("16", "64Gi")
    pipeline = body["pipeline_spec"]
    executors = gpu_executors(pipeline)
    assert len(executors) >= 6  # env, two benches, eval, trace, A/B (twice)
    k8s = pipeline["platform_spec"]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    for label, resources in executors.items():
        assert "pipelinechannel--gpu_cpu_request" in resources["resourceCpuRequest"], label
        assert "pipelinechannel--gpu_memory_request" in resources["resourceMemoryRequest"], label
        shm = [m for m in k8s[label]["emptyDirMounts"] if m["mountPath"] == "/dev/shm"]
        assert shm and shm[0]["medium"] == "Memory", label


async def test_a_run_without_requests_gets_the_defaults(cluster: Cluster) -> None:
    await cluster.create(run_manifest("pr-default"))
    await cluster.phase("pr-default", "Running")
    (body,) = cluster.kfp.created_runs
    parameters = body["runtime_config"]["parameters"]
    assert (parameters["gpu_cpu_request"], parameters["gpu_memory_request"]) == ("8", "32Gi")


async def test_a_zero_request_is_refused_before_kfp_hears_of_it(cluster: Cluster) -> None:
    manifest = run_manifest("zero", cpuRequest="0")
    assert schema_errors("benchmarkruns", manifest)  # an API server with the CRD refuses it ...
    await cluster.create(manifest)  # ... one without it hands it to the controller
    status = await cluster.phase("zero", "Failed")
    (submitted,) = [c for c in status["conditions"] if c["type"] == "Submitted"]
    assert submitted["reason"] == "InvalidSpec"
    assert "spec.cpuRequest: got '0' (String should match pattern" in submitted["message"]
    assert cluster.kfp.requests == []
