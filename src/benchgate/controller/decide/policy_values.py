"""The admin policy the chart gives the controller, read from Helm values: the one definition that the
chart's BENCHGATE_POLICY (templates/configmap.yaml renders `.Values.policy` as JSON) and
`benchgate policy check --values` share, so the CLI says what the controller would do.

Values are merged as Helm merges a values file over the chart's defaults: maps key by key, anything
else (lists included) replaced whole. Pure: the caller reads the files.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from benchgate.controller.decide.admin_policy import Policy, policy_from_json
from benchgate.errors import ConfigError

__all__ = ["merged_values", "policy_from_values", "policy_json"]


def merged_values(defaults: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """`overrides` over `defaults` as Helm merges values: maps recursively, a null deletes the key."""
    merged = dict(defaults)
    for key, value in overrides.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merged_values(merged[key], value)
        else:
            merged[key] = value
    return merged


def policy_json(values: Mapping[str, Any]) -> str:
    """BENCHGATE_POLICY as the chart renders it from `values` (its `policy` map as JSON)."""
    policy = values.get("policy", {})
    if not isinstance(policy, Mapping):
        raise ConfigError(f"policy: got {policy!r} (expected a map of the admin policy's keys)")
    return json.dumps(policy, sort_keys=True)


def policy_from_values(values: Mapping[str, Any]) -> Policy:
    """The controller's policy under the chart's `values`; a ConfigError naming a bad key and value."""
    return policy_from_json(policy_json(values))
