"""Codec for a v1 partition index file (``index_partition_PPP``).

Byte layout, big-endian::

    magic              1 byte   0x01
    then, per segment of the partition, in start-offset order:
      filenameLength   int32    byte length of the name (>= 0)
      filename         UTF-8    the segment's file prefix, e.g.
                                ``segment_partition_000_from_offset_0000000000``
                                (the ``_records`` / ``_index`` suffixes are not stored)
      startOffset      int64    the segment's start offset; strictly increasing

The start offset is the number in the segment's name, which is not always
the offset of its first record: the original names a partition's first
segment ``..._from_offset_0000000000`` with start 0 whatever it holds.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import NamedTuple

from spark_kafka_backup.errors import FormatError, TruncatedError
from spark_kafka_backup.format.magic import MAGIC_V1, check_magic

_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")

#: No segment name is longer than this; a larger length field is corruption.
MAX_NAME_LENGTH = 4096


class PartitionIndexEntry(NamedTuple):
    """One segment of a partition: its file prefix and start offset."""

    name: str
    start_offset: int


def encode_entry(entry: PartitionIndexEntry) -> bytes:
    """Return the bytes of one entry."""
    name = entry.name.encode()
    return _INT32.pack(len(name)) + name + _INT64.pack(entry.start_offset)


def encode_partition_index(entries: Iterable[PartitionIndexEntry]) -> bytes:
    """Return a whole partition index file: the magic byte and every entry."""
    return MAGIC_V1 + b"".join(encode_entry(e) for e in entries)


def decode_partition_index(
    data: bytes,
    *,
    file: str = "<bytes>",
    legacy: bool = False,
    allow_torn_tail: bool = False,
) -> tuple[list[PartitionIndexEntry], int]:
    """Decode a whole partition index; return its entries and the bytes they fill.

    The second value is the length of the valid prefix: with
    ``allow_torn_tail`` a partial last entry is left out and the caller can
    truncate the file to it; otherwise it raises :class:`TruncatedError`.
    """
    p = check_magic(data[:1], file=file, legacy=legacy)
    end = len(data)
    entries: list[PartitionIndexEntry] = []
    previous = -1
    valid_end = p
    while p < end:
        if end - p < 4:
            if allow_torn_tail:
                break
            raise TruncatedError(
                "partition index entry cut short",
                file=file,
                position=p,
                expected="a 4-byte name length",
                found=f"{end - p} bytes",
            )
        (n,) = _INT32.unpack_from(data, p)
        if n < 0 or n > MAX_NAME_LENGTH:
            raise FormatError(
                "invalid segment name length",
                file=file,
                position=p,
                expected=f"0 to {MAX_NAME_LENGTH}",
                found=str(n),
            )
        p += 4
        if end - p < n + 8:
            if allow_torn_tail:
                break
            raise TruncatedError(
                "partition index entry cut short",
                file=file,
                position=p,
                expected=f"{n} name bytes and an 8-byte start offset",
                found=f"{end - p} bytes",
            )
        try:
            name = data[p : p + n].decode()
        except UnicodeDecodeError as exc:
            raise FormatError(
                "segment name is not valid UTF-8",
                file=file,
                position=p,
                expected="UTF-8 text",
                found=repr(data[p : p + n][:40]),
            ) from exc
        p += n
        (start_offset,) = _INT64.unpack_from(data, p)
        if start_offset <= previous:
            raise FormatError(
                f"partition index entry for {name!r}: start offsets must increase",
                file=file,
                position=p,
                expected=f"a start offset > {previous}",
                found=str(start_offset),
            )
        p += 8
        previous = start_offset
        entries.append(PartitionIndexEntry(name, start_offset))
        valid_end = p
    return entries, valid_end
