"""A Kubernetes API client the way every benchgate component in a cluster needs one: an explicit
endpoint when given (an emulator in the tests, a proxy), else the pod's service account, else the
user's kubeconfig (a laptop).
"""

from __future__ import annotations

from typing import Any


def api_client(host: str | None = None) -> Any:
    """A `kubernetes.client.ApiClient` for `host`, in-cluster or from the kubeconfig without one."""
    from kubernetes import client, config

    if host:
        configuration = client.Configuration()
        configuration.host = host
        return client.ApiClient(configuration)
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.ApiClient()
