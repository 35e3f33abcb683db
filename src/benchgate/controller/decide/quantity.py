"""Kubernetes resource quantities ("500m", "8", "32Gi", "64G") as numbers, so that the admin policy's
maxima compare with a run's requests by value ("1Gi" is more than "1000Mi", "0.5" equals "500m"), never
as strings.

Only the forms a BenchmarkRun's cpuRequest and memoryRequest take (kfp/params.py's patterns): a plain
decimal with an optional decimal (k, M, G, T, P, E, m) or binary (Ki ... Ei) suffix. Pure.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Final

_QUANTITY = re.compile(r"(?P<number>[0-9]+(\.[0-9]*)?|\.[0-9]+)(?P<suffix>m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?")
_SUFFIXES: Final = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    **{s: Decimal(1000) ** (i + 1) for i, s in enumerate(("k", "M", "G", "T", "P", "E"))},
    **{s: Decimal(1024) ** (i + 1) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))},
}


def quantity(text: str) -> Decimal:
    """The value of the quantity `text` (in cores or bytes); a ValueError naming it otherwise."""
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not a Kubernetes quantity such as '8', '500m' or '32Gi'")
    return Decimal(match["number"]) * _SUFFIXES[match["suffix"] or ""]
