"""Kubernetes' rules for object names, label keys and values, and annotations, checked in benchgate.

The API server refuses an object that breaks them, but only when the object is sent: a schedule whose
run template carries a bad label would be accepted and then fail at every cron time, and a schedule
name too long for a label value would never create a run. The controller checks them itself (the
spec models, the scheduled run's manifest) and says which field and value are wrong.

The rules are Kubernetes' documented ones (Labels and Selectors; Annotations; Object Names and IDs):

- an object name is a DNS-1123 subdomain: at most 253 characters, lower-case alphanumerics, '-' and
  '.', starting and ending with an alphanumeric (each '.'-separated part too);
- a label value is at most 63 characters of [A-Za-z0-9_.-], starting and ending with an alphanumeric,
  or empty;
- a label or annotation key is an optional prefix (a DNS-1123 subdomain) and '/', then a name of at
  most 63 characters with a label value's charset, not empty;
- all annotations of an object together are at most 256 KiB (keys and values).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping

MAX_NAME = 253
MAX_LABEL = 63
MAX_ANNOTATIONS_BYTES = 256 * 1024

_LABEL = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
_LABEL_RULE = f"at most {MAX_LABEL} characters of A-Z, a-z, 0-9, '-', '_', '.', alphanumeric at both ends"
_NAME_RULE = (
    f"a DNS-1123 subdomain: at most {MAX_NAME} characters of a-z, 0-9, '-', '.', alphanumeric at both ends"
)


def name_problem(name: str) -> str | None:
    """Why `name` is not a valid object name (a DNS-1123 subdomain), or None."""
    if len(name) > MAX_NAME or not _SUBDOMAIN.fullmatch(name):
        return f"got {name!r} (expected {_NAME_RULE})"
    return None


def label_value_problem(value: str) -> str | None:
    """Why `value` is not a valid label value (empty is valid), or None."""
    if len(value) > MAX_LABEL or not _LABEL.fullmatch(value):
        return f"got {value!r} (expected {_LABEL_RULE}, or empty)"
    return None


def key_problem(key: str) -> str | None:
    """Why `key` is not a valid label or annotation key ([prefix/]name), or None."""
    prefix, slash, name = key.rpartition("/")
    if slash and name_problem(prefix) is not None:
        return f"got {key!r} (its prefix {prefix!r} must be {_NAME_RULE})"
    if not name or len(name) > MAX_LABEL or not _LABEL.fullmatch(name):
        return f"got {key!r} (its name {name!r} must be {_LABEL_RULE}, after an optional 'prefix/')"
    return None


def labels_problem(labels: Mapping[str, str]) -> str | None:
    """The first invalid key or value of `labels`, naming it and saying why, or None."""
    for key, value in labels.items():
        problem = key_problem(key)
        if problem is not None:
            return f"labels: key {problem}"
        problem = label_value_problem(value)
        if problem is not None:
            return f"labels[{key!r}]: value {problem}"
    return None


def annotations_problem(annotations: Mapping[str, str]) -> str | None:
    """The first invalid key of `annotations`, or their total size over 256 KiB; None when valid."""
    for key in annotations:
        problem = key_problem(key)
        if problem is not None:
            return f"annotations: key {problem}"
    size = sum(len(k.encode()) + len(v.encode()) for k, v in annotations.items())
    if size > MAX_ANNOTATIONS_BYTES:
        return f"annotations: {size} bytes in all (at most {MAX_ANNOTATIONS_BYTES}, 256 KiB, keys and values)"
    return None


def label_safe(text: str) -> str:
    """`text` itself when it is a valid label value, else a valid one that stands for it: its start,
    cut to leave room, and a hash of the whole (distinct texts stay distinct)."""
    if label_value_problem(text) is None:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    start = re.sub(r"[^-A-Za-z0-9_.]", "-", text)[: MAX_LABEL - len(digest) - 1]
    start = start.strip("-_.")
    return f"{start}-{digest}" if start else digest


def name_prefix(name: str, room: int) -> str:
    """The start of object name `name` that leaves `room` characters for a suffix joined with '-':
    cut where needed and never ending in '-' or '.', so that the joined name stays a DNS-1123
    subdomain."""
    return name[: MAX_NAME - room - 1].rstrip("-.")
