"""A Kubernetes API client the way every benchgate component in a cluster needs one: an explicit
endpoint when given (an emulator in the tests, a proxy), else the pod's service account, else the
user's kubeconfig (a laptop). Every call it makes is time-bounded (kit/request_bounds.py).
"""

from __future__ import annotations

from typing import Any

from benchgate.kit.request_bounds import bound_requests


def api_client(host: str | None = None) -> Any:
    """A `kubernetes.client.ApiClient` for `host`, in-cluster or from the kubeconfig without one."""
    from kubernetes import client, config

    if host:
        configuration = client.Configuration()
        configuration.host = host
        made = client.ApiClient(configuration)
    else:
        try:
            config.load_incluster_config()
        except config.ConfigException:
            config.load_kube_config()
        made = client.ApiClient()
    bound_requests(made.rest_client)
    return made
