"""JSON documents read from a backup or a cluster: bounded in size and nesting before they are parsed.

Every JSON file kbackup reads from a backup root (catalogs, checkpoints, topic records, source gaps, intents,
leases, consumer offsets, the registry copy, restore state) and every JSON value it reads from a cluster (restore
markers) goes through :func:`parse_document`, so a tampered file is one :class:`~kbackup.errors.FormatError`
naming it, never a ``RecursionError`` or an allocation the size of a forged length:

* the caller bounds the size (``read_limited``; :func:`kbackup.storage.read_document` does both);
* the nesting is measured before parsing, without recursion: strings are cut out (a bracket inside one is text),
  the remaining brackets are counted as +1/-1 and their running sum is the depth. No kbackup document nests deeper
  than a handful of levels; :data:`MAX_DEPTH` leaves room and stays far below Python's recursion limit.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

from kbackup.errors import FormatError

#: The deepest nesting any document may have (kbackup's own nest at most 5 levels).
MAX_DEPTH = 32

# A JSON string: a quote, runs of plain characters and escapes, a quote (the unrolled form, linear time).
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_OPEN = np.frombuffer(b"[{", dtype=np.uint8)
_CLOSE = np.frombuffer(b"]}", dtype=np.uint8)


def nesting_depth(data: bytes) -> int:
    """The deepest nesting of arrays and objects in ``data`` (0 for a scalar); brackets inside strings are text."""
    skeleton = np.frombuffer(_STRING.sub(b'""', data), dtype=np.uint8)
    opening = np.isin(skeleton, _OPEN)
    brackets = opening | np.isin(skeleton, _CLOSE)
    if not brackets.any():
        return 0
    steps = np.where(opening[brackets], 1, -1).astype(np.int64)
    return int(np.cumsum(steps).max())


def parse_document(data: bytes | str, *, file: str, what: str = "JSON document", max_depth: int = MAX_DEPTH) -> Any:
    """``data`` parsed as JSON, refused in one :class:`FormatError` naming ``file`` when it is not JSON or nests
    deeper than ``max_depth``."""
    raw = data.encode() if isinstance(data, str) else bytes(data)
    depth = nesting_depth(raw)
    if depth > max_depth:
        raise FormatError(
            f"not a valid {what}: nested too deeply", file=file, expected=f"at most {max_depth} levels",
            found=f"{depth} levels",
        )  # fmt: skip
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
        raise FormatError(f"not a valid {what} ({reason})", file=file) from None
