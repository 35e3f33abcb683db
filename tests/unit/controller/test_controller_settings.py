"""The controller's peering settings (BENCHGATE_PEERING, BENCHGATE_PEERING_PRIORITY)."""

from __future__ import annotations

import uuid

import pytest

from benchgate.controller.settings import (
    AUTO_PRIORITY_MAX,
    AUTO_PRIORITY_MIN,
    priority_from_uid,
    settings_from_env,
)
from benchgate.errors import ConfigError

KFP = {"KFP_HOST": "https://kfp.example.com"}


def test_without_a_peering_name_the_controller_runs_standalone_at_priority_0() -> None:
    settings = settings_from_env(KFP)
    assert (settings.peering_name, settings.peering_priority) == ("", 0)


def test_peering_name_and_a_fixed_priority() -> None:
    settings = settings_from_env(
        {**KFP, "BENCHGATE_PEERING": " benchgate ", "BENCHGATE_PEERING_PRIORITY": "250"}
    )
    assert (settings.peering_name, settings.peering_priority) == ("benchgate", 250)


def test_auto_priorities_are_the_pods_own_and_distinct() -> None:
    """kopf pauses every peer whose priority equals another live one's: each pod's must differ, stay
    the same for the pod, and sit above an instance started by hand (0) and below kopf freeze's
    2^31 - 1."""
    uids = [str(uuid.UUID(int=i)) for i in range(2000)]
    priorities = [priority_from_uid(uid) for uid in uids]
    assert len(set(priorities)) == len(uids)
    assert all(AUTO_PRIORITY_MIN <= p <= AUTO_PRIORITY_MAX < 2**31 - 1 for p in priorities)
    assert AUTO_PRIORITY_MIN > 0
    env = {**KFP, "BENCHGATE_PEERING_PRIORITY": "auto", "POD_UID": uids[7]}
    assert settings_from_env(env).peering_priority == priorities[7] == settings_from_env(env).peering_priority


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"BENCHGATE_PEERING_PRIORITY": "high"}, "BENCHGATE_PEERING_PRIORITY: got 'high'"),
        ({"BENCHGATE_PEERING_PRIORITY": "1.5"}, "BENCHGATE_PEERING_PRIORITY: got '1.5'"),
        (
            {"BENCHGATE_PEERING_PRIORITY": "auto"},
            "BENCHGATE_PEERING_PRIORITY: got 'auto', which needs POD_UID",
        ),
    ],
)
def test_a_bad_priority_names_the_variable_and_value(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        settings_from_env({**KFP, **env})


def test_configure_bounds_every_watch() -> None:
    """A watch the network drops silently must end and be resumed: kopf's watches get a server-side
    timeout, and a client-side one a little longer (unset, kopf waits on a dead watch forever)."""
    import asyncio
    from types import SimpleNamespace

    import kopf

    from benchgate.controller.main import configure

    settings = settings_from_env(KFP)
    kopf_settings = kopf.OperatorSettings()
    asyncio.run(configure(kopf_settings, memo=SimpleNamespace(settings=settings)))  # type: ignore[arg-type]
    watching = kopf_settings.watching
    assert watching.server_timeout == settings.watch_server_timeout_s == 300
    assert watching.client_timeout == settings.watch_client_timeout_s == 330
    assert watching.connect_timeout == settings.watch_connect_timeout_s
    assert watching.client_timeout > watching.server_timeout
