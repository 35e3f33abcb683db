"""The gate's tolerances in the CRDs: benchgate's `gate.tolerances` under camelCase names, as the rest
of a BenchmarkRun's spec, with the TOML file's snake_case names still accepted (deprecated: manifests
written before the camelCase names keep working). The CRD lists both names of each tolerance; the
model refuses both set for one."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, model_validator
from pydantic.alias_generators import to_camel, to_snake

from benchgate.config import Tolerances


def _snake_case_too(schema: dict[str, Any]) -> None:
    """The CRD schema of the tolerances: each camelCase key, and its TOML (snake_case) name beside it,
    deprecated, which manifests written before the camelCase names keep working with (a structural
    schema would prune, or a strict client refuse, a key it does not list)."""
    properties = schema.get("properties") or {}
    for name, prop in list(properties.items()):
        # No defaults in the CRD: the API server would fill in the other name of a tolerance given
        # under one, and two names set is refused. The controller fills in what is unset.
        prop.pop("default", None)
        snake = to_snake(name)
        if snake != name:
            said = str(prop.get("description") or "")
            properties[snake] = {**prop, "description": f"Deprecated: {name}, under its TOML name. {said}"}


class KubeTolerances(Tolerances):
    """What counts as a regression (benchgate's gate.tolerances) under camelCase names, as the rest of
    the CRD; the TOML file's snake_case names are still accepted (deprecated), never both for one."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        allow_inf_nan=False,
        json_schema_extra=_snake_case_too,
    )

    @model_validator(mode="before")
    @classmethod
    def _one_name_each(cls, data: Any) -> Any:
        if isinstance(data, dict):
            both = [k for k in data if to_camel(k) != k and to_camel(k) in data]
            if both:
                raise ValueError(
                    f"{both[0]} and {to_camel(both[0])} both set (one tolerance, two names: "
                    f"keep {to_camel(both[0])})"
                )
        return data
