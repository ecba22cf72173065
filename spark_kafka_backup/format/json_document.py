"""JSON documents read from a backup or a cluster: bounded in size and nesting before they are parsed.

Every JSON file spark-kafka-backup reads from a backup root (catalogs, checkpoints, topic records, source gaps, intents,
leases, consumer offsets, the registry copy, restore state) and every JSON value it reads from a cluster (restore
markers) goes through :func:`parse_document`, so a tampered file is one :class:`~spark_kafka_backup.errors.FormatError`
naming it, never a ``RecursionError`` or an allocation the size of a forged length:

* the caller bounds the size (``read_limited``; :func:`spark_kafka_backup.storage.read_document` does both);
* the nesting is measured before parsing, without recursion: strings are cut out (a bracket inside one is text),
  the remaining brackets are counted as +1/-1 and their running sum is the depth. No spark-kafka-backup document nests
  deeper than a handful of levels; :data:`MAX_DEPTH` leaves room and stays far below Python's recursion limit.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import typing
from typing import Any

import numpy as np

from spark_kafka_backup.errors import FormatError

#: The deepest nesting any document may have (spark-kafka-backup's own nest at most 5 levels).
MAX_DEPTH = 32

# A JSON string: a quote, runs of plain characters and escapes, a quote (the unrolled form, linear time).
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_OPEN = np.frombuffer(b"[{", dtype=np.uint8)
_CLOSE = np.frombuffer(b"]}", dtype=np.uint8)


#: Bytes measured at a time: the measure's memory stays a few times this, whatever the document's size.
_CHUNK = 4 << 20


def nesting_depth(data: bytes) -> int:
    """The deepest nesting of arrays and objects in ``data`` (0 for a scalar); brackets inside strings are text."""
    skeleton = np.frombuffer(_STRING.sub(b'""', data), dtype=np.uint8)
    deepest = depth = 0
    for start in range(0, len(skeleton), _CHUNK):
        piece = skeleton[start : start + _CHUNK]
        opening = np.isin(piece, _OPEN)
        brackets = opening | np.isin(piece, _CLOSE)
        if not brackets.any():
            continue
        running = np.cumsum(np.where(opening[brackets], 1, -1).astype(np.int32)) + depth
        deepest = max(deepest, int(running.max()))
        depth = int(running[-1])
    return deepest


#: The latest time a document may name, in epoch ms (the year 10000: beyond it no calendar prints it).
MAX_TIME_MS = 253_402_300_800_000


class _NumberError(ValueError):
    pass


def _integer(text: str) -> int:
    value = int(text)
    if not -(2**63) <= value < 2**63:
        raise _NumberError(f"the integer {text[:30]} is beyond 64 bits")
    return value


def _no_float(text: str) -> float:
    raise _NumberError(f"{text[:30]} where an integer is expected")


def _no_constant(text: str) -> float:
    raise _NumberError(f"{text} where a number is expected")


def parse_document(
    data: bytes | str, *, file: str, what: str = "JSON document", max_depth: int = MAX_DEPTH, floats: bool = False
) -> Any:
    """``data`` parsed as JSON, refused in one :class:`FormatError` naming ``file`` when it is not JSON, nests deeper
    than ``max_depth``, or holds an integer beyond 64 bits, ``NaN``/``Infinity``, or (unless ``floats``) a number
    with a fraction or an exponent: spark-kafka-backup's documents hold integers, and a forged ``1e400`` is not one."""
    raw = data.encode() if isinstance(data, str) else bytes(data)
    # No deeper than its opening brackets are many (a small catalog: no measure needed).
    depth = 0 if raw.count(b"[") + raw.count(b"{") <= max_depth else nesting_depth(raw)
    if depth > max_depth:
        raise FormatError(
            f"not a valid {what}: nested too deeply", file=file, expected=f"at most {max_depth} levels",
            found=f"{depth} levels",
        )  # fmt: skip
    try:
        return json.loads(raw, parse_int=_integer, parse_float=float if floats else _no_float,
                          parse_constant=_no_constant)  # fmt: skip
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        if isinstance(exc, json.JSONDecodeError):
            reason = exc.msg
        elif isinstance(exc, _NumberError):
            reason = str(exc)
        else:
            reason = type(exc).__name__
        raise FormatError(f"not a valid {what} ({reason})", file=file) from exc


def check_fields(cls: type, values: dict[str, Any], *, file: str, what: str) -> dict[str, Any]:
    """``values`` for the dataclass ``cls``, each of the type its field declares (``int``, ``str``, ``bool``, or
    one of them or ``None``; a boolean is not an integer), else a FormatError naming ``file`` and the field."""
    for name, allowed in _field_kinds(cls):
        if name not in values:
            continue
        value = values[name]
        if value is None and type(None) in allowed:
            continue
        if type(value) not in allowed:  # exact: bool is not int
            kinds = " or ".join("null" if kind is type(None) else kind.__name__ for kind in allowed)
            raise FormatError(f"not a valid {what}: {name} is not {kinds}", file=file, found=repr(value)[:80])
    return values


@functools.cache
def _field_kinds(cls: type) -> tuple[tuple[str, tuple[type, ...]], ...]:
    """Each field of the dataclass ``cls`` with the types its value may have (resolved once per class: a writer
    checks a catalog's fields at every open of a partition)."""
    hints = typing.get_type_hints(cls)
    return tuple(
        (item.name, typing.get_args(hints[item.name]) or (hints[item.name],)) for item in dataclasses.fields(cls)
    )
