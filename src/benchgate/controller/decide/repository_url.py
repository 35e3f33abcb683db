"""Where a git URL points, so that the admin policy's repository prefixes are compared by origin and
whole path segments, never as substrings (`https://github.com/acme` covers `.../acme/x`, never
`.../acme-evil/x`).

Pure: no I/O.
"""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import unquote

# git@host:path, the scp-like form (the URL grammar allows the user `git` only).
_SCP = re.compile(r"git@(?P<host>[^:/]+):(?P<path>.*)", re.DOTALL)
# The authority of https://, ssh:// and file:// URLs: an optional user (and password), host, port.
_AUTHORITY = re.compile(r"(?:[^@/]*@)?(?P<host>[^:@/]*)(?::(?P<port>[0-9]*))?")
_DEFAULT_PORTS: Final = {"https": "443", "ssh": "22"}


def repository_location(url: str) -> tuple[str, tuple[str, ...]]:
    """Where a git URL points, as (origin, path segments), so that a prefix is compared segment by
    segment: `https://github.com/acme` then covers `https://github.com/acme/x` and never
    `https://github.com/acme-evil/x`. The origin is `scheme://host[:port]` with the host lowercased,
    the user left out (it does not choose the code) and a default port dropped; the scp-like form keeps
    its own origin (`git@host:` reads its path from the login's home directory). Segments are
    percent-decoded, empty ones dropped and a last `.git` removed.

    A ValueError for anything else, and for a segment that is `.` or `..` or holds a `/` or `\\` once
    decoded: git, curl or the server would resolve those to a path outside the prefix.
    """
    scp = _SCP.fullmatch(url)
    if scp is not None:
        path = scp["path"]
        origin = f"git@{scp['host'].lower().rstrip('.')}:" + ("/" if path.startswith("/") else "")
    else:
        scheme, separator, rest = url.partition("://")
        scheme = scheme.lower()
        authority, _, path = rest.partition("/")
        parts = _AUTHORITY.fullmatch(authority)
        if not separator or scheme not in ("https", "ssh", "file") or parts is None:
            raise ValueError("expected a git URL: https://, ssh://, file:// or git@host:path")
        host, port = parts["host"].lower().rstrip("."), parts["port"]
        if port == _DEFAULT_PORTS.get(scheme):
            port = None
        origin = f"{scheme}://{host}" + (f":{port}" if port else "")
    segments = [unquote(s) for s in path.split("/") if s]
    for segment in segments:
        if segment in (".", "..") or "/" in segment or "\\" in segment:
            raise ValueError(f"the path segment {segment!r} could lead out of any prefix")
    if segments and segments[-1].endswith(".git"):
        segments[-1] = segments[-1].removesuffix(".git")
    return origin, tuple(s for s in segments if s)


def under(url: str, prefix: str) -> bool:
    """Whether repository `url` is `prefix` or lies below it, by whole path segments."""
    origin, segments = repository_location(url)
    prefix_origin, prefix_segments = repository_location(prefix)
    return origin == prefix_origin and segments[: len(prefix_segments)] == prefix_segments
