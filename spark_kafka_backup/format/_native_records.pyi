# The records' compiled scanner (_native/records.c): where each field of v1 records lies. Both functions answer -1
# for a batch with any record that is not valid; the numpy decoding then names what is wrong.

from typing import Any

_Buffer = Any  # an object with the buffer protocol (bytes, a contiguous numpy array); "out" ones writable

def scan(data: _Buffer, starts: _Buffer, ends: _Buffer, offsets: _Buffer, fixed: _Buffer) -> int:
    """Fill ``fixed`` (8 columns of n int64: type, timestamp, key start, key length, value start, value length,
    header count, first header slot); the header count of all records, or -1."""

def headers(data: _Buffer, starts: _Buffer, ends: _Buffer, fixed: _Buffer, out: _Buffer) -> int:
    """Fill ``out`` (4 columns of the header count int64: key start, key length, value start, value length) from
    ``fixed`` as :func:`scan` filled it; 0, or -1."""
