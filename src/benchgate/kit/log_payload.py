"""A file carried through a process's log: printed between marker lines by one process, read back
byte for byte from the log by another.

A multi-node bench (measure/node.py) runs in pods on several nodes that share no volume, and a pod's
termination message is capped at 4 KiB; rank 0's log is what its launcher can always read. The file
travels gzipped and base64-encoded, one short line at a time (container runtimes split long lines), each
line with the marker prefix so that lines other processes print in between are told apart. The opening
line carries the file's name, size and SHA-256: a log cut short or mangled is an error, never a wrong file.

    BENCHGATE-METRICS-BEGIN metrics-ws16.json 6031 sha256=<hex>
    BENCHGATE-METRICS H4sIAAAAAAAC/+1YS2/bRhC+...
    BENCHGATE-METRICS-END
"""

from __future__ import annotations

import base64
import binascii
import gzip
import hashlib
import re
from dataclasses import dataclass

from benchgate.errors import RunFailedError

PREFIX = "BENCHGATE-METRICS"
BEGIN = f"{PREFIX}-BEGIN"
END = f"{PREFIX}-END"
LINE_CHARS = 76  # base64 characters per line, as MIME wraps them
_BEGIN_LINE = re.compile(rf"{BEGIN} (?P<name>\S+) (?P<size>\d+) sha256=(?P<sha>[0-9a-f]{{64}})$")


@dataclass(frozen=True)
class Payload:
    name: str  # the file's name (no directory), as the sender wrote it
    data: bytes


def encode(name: str, data: bytes) -> str:
    """The marker block for file `name` holding `data`: print it as it is (it ends with a newline)."""
    if not name or any(c.isspace() for c in name) or "/" in name:
        raise ValueError(f"a log payload's name must be a plain file name, got {name!r}")
    packed = base64.b64encode(gzip.compress(data, mtime=0)).decode("ascii")
    lines = [f"{BEGIN} {name} {len(data)} sha256={hashlib.sha256(data).hexdigest()}"]
    lines += [f"{PREFIX} {packed[i : i + LINE_CHARS]}" for i in range(0, len(packed), LINE_CHARS)]
    lines.append(END)
    return "\n".join(lines) + "\n"


def decode(log: str, where: str) -> Payload:
    """The file of the last complete marker block in `log` (a retried process prints a later one).

    `where` names the log in errors (e.g. the pod). Raises RunFailedError when there is no block, when
    the last block is cut short, or when its bytes are not the ones the sender announced.
    """
    header: re.Match[str] | None = None
    chunks: list[str] = []
    found: tuple[re.Match[str], list[str]] | None = None
    for raw in log.splitlines():
        line = raw.rstrip("\r")
        # Some runtimes prefix each line (a timestamp, a rank tag): the marker may follow such a prefix.
        at = line.find(PREFIX)
        if at < 0:
            continue
        line = line[at:]
        if line.startswith(BEGIN):
            header, chunks = _BEGIN_LINE.match(line), []
            if header is None:
                raise RunFailedError(f"{where}: malformed {BEGIN} line in the log: {line[:120]!r}")
        elif line == END:
            if header is not None:
                found = (header, chunks)
            header = None
        elif header is not None and line.startswith(f"{PREFIX} "):
            chunks.append(line[len(PREFIX) + 1 :].strip())
    if found is None:
        cut = " (its block starts but never ends: the log was cut short)" if header is not None else ""
        raise RunFailedError(f"{where}: no {BEGIN} ... {END} block in the log{cut}")
    header, chunks = found
    try:
        data = gzip.decompress(base64.b64decode("".join(chunks), validate=True))
    except (binascii.Error, OSError, EOFError) as e:
        raise RunFailedError(f"{where}: the {header['name']} block in the log is corrupt: {e}") from None
    if len(data) != int(header["size"]) or hashlib.sha256(data).hexdigest() != header["sha"]:
        raise RunFailedError(
            f"{where}: the {header['name']} block in the log decodes to {len(data)} bytes that are not the "
            f"{header['size']} bytes (sha256 {header['sha'][:12]}...) its sender printed"
        )
    return Payload(header["name"], data)
