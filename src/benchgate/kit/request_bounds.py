"""A time bound on every call of an OpenAPI-generated client (KFP's `kfp_server_api`, `kubernetes`).

Both generated REST clients hand urllib3 an explicit `timeout=None` (no bound at all) wherever a call
passes no `_request_timeout`, and the hand-written clients above them (`kfp.Client`, the kubernetes
APIs as benchgate calls them) pass none. A server, or a proxy before it, that accepts a request and
never answers then holds the calling thread for good: in the controller, enough such calls fill its
executor and stall every handler while the liveness probe stays green.
"""

from __future__ import annotations

from typing import Any, Final

CONNECT_TIMEOUT_S: Final = 10.0
# A state read or a list answers in milliseconds, a create with a large pipeline spec in well under
# a second: 30 s is an outage, not a slow answer.
READ_TIMEOUT_S: Final = 30.0


def bound_requests(rest_client: Any, read_timeout_s: float = READ_TIMEOUT_S) -> None:
    """Give every request of `rest_client` (an ApiClient's `rest_client`) a connect and a read bound
    where the call gives none; a read that timed out is not retried (the server has the request),
    a refused connection is, twice."""
    import urllib3

    bound = (CONNECT_TIMEOUT_S, read_timeout_s)
    unbounded = rest_client.request

    def request(*args: Any, _request_timeout: Any = None, **kwargs: Any) -> Any:
        return unbounded(*args, _request_timeout=_request_timeout or bound, **kwargs)

    rest_client.request = request
    pool = rest_client.pool_manager
    pool.connection_pool_kw["retries"] = urllib3.Retry(total=2, read=0, redirect=False)
    pool.clear()  # pools made before this (a client's first calls) are made again with these retries
