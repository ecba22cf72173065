"""An Arrow ``large_binary`` column's bytes as numpy arrays, without a Python object per value.

A ``large_binary`` array of ``n`` values is three buffers: a validity bitmap (LSB first, absent when every value is
present), ``n + 1`` int64 offsets into the data buffer (value ``i`` is ``data[offsets[i]:offsets[i + 1]]``), and
the data. A sliced array starts ``array.offset`` entries into the bitmap and the offsets.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa

Int64s = npt.NDArray[np.int64]


@dataclass(frozen=True)
class BinaryParts:
    """Where each value of a binary column lies in its data buffer."""

    #: False where the value is null.
    valid: npt.NDArray[np.bool_]
    starts: Int64s
    #: -1 where the value is null.
    lengths: Int64s
    data: npt.NDArray[np.uint8]


def binary_parts(column: pa.Array) -> BinaryParts:
    """The parts of ``column`` (``large_binary``, or ``binary``), read in place."""
    if pa.types.is_binary(column.type):
        column = column.cast(pa.large_binary())
    n = len(column)
    validity, offsets, data = column.buffers()
    bounds = np.frombuffer(offsets, dtype=np.int64, count=column.offset + n + 1)[column.offset :]
    if validity is None or column.null_count == 0:
        valid = np.ones(n, dtype=np.bool_)
    else:
        bits = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), bitorder="little")
        valid = bits[column.offset : column.offset + n].astype(np.bool_)
    starts = bounds[:-1].astype(np.int64)
    lengths = np.where(valid, np.diff(bounds), -1).astype(np.int64)
    buffer = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, dtype=np.uint8)
    return BinaryParts(valid, starts, lengths, buffer)


def with_data(column: pa.Array, data: npt.NDArray[np.uint8]) -> pa.Array:
    """``column`` with its data buffer replaced by ``data`` (the same size: each value keeps its place)."""
    validity, offsets, _ = column.buffers()
    return pa.Array.from_buffers(
        column.type, len(column), [validity, offsets, pa.py_buffer(data)], null_count=column.null_count,
        offset=column.offset,
    )  # fmt: skip
