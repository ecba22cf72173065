"""Codec for a v1 segment index file (``segment_partition_PPP_from_offset_N_index``).

Byte layout, big-endian::

    magic                 1 byte   0x01
    then, per record of the segment's records file, in offset order:
      offset              int64    the record's offset
      recordFilePosition  int64    where the record starts in the records file
      recordByteLength    int64    its encoded length

Every entry is 24 bytes, so the file is ``1 + 24 * n`` bytes long. The
invariants spark-kafka-backup checks: offsets strictly increase; the first entry starts
at position 1 (just after the records file's magic byte); each entry starts
where the previous one ended; lengths are at least the smallest record
(24 bytes) when a records file is behind the index; the structural checks
here ask only for a positive length. This module works on bytes; it never
opens a file.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import NamedTuple

import numpy as np

from spark_kafka_backup.errors import FormatError, TruncatedError
from spark_kafka_backup.format.magic import MAGIC_V1, check_magic

ENTRY = struct.Struct(">qqq")
ENTRY_SIZE = ENTRY.size
#: The same entry for numpy: column readers and writers view whole runs of entries through it.
ENTRY_DTYPE = np.dtype([("offset", ">i8"), ("position", ">i8"), ("length", ">i8")])
if ENTRY_DTYPE.itemsize != ENTRY_SIZE:
    raise ImportError("the segment index entry's numpy layout differs from its struct layout")


class SegmentIndexEntry(NamedTuple):
    """Where one record lives in its records file."""

    offset: int
    position: int
    length: int

    @property
    def end(self) -> int:
        """The position just past the record."""
        return self.position + self.length


def encode_entry(entry: SegmentIndexEntry) -> bytes:
    """Return the 24 bytes of one entry."""
    return ENTRY.pack(*entry)


def encode_segment_index(entries: Iterable[SegmentIndexEntry]) -> bytes:
    """Return a whole segment index file: the magic byte and every entry."""
    out = bytearray(MAGIC_V1)
    pack = ENTRY.pack
    for entry in entries:
        out += pack(*entry)
    return bytes(out)


def decode_segment_index(
    data: bytes,
    *,
    file: str = "<bytes>",
    legacy: bool = False,
    allow_torn_tail: bool = False,
    check_contiguous: bool = True,
) -> list[SegmentIndexEntry]:
    """Decode and validate a whole segment index file.

    A length that is not ``1 + 24 * n`` is a :class:`TruncatedError` unless
    ``allow_torn_tail`` (crash repair), which ignores the partial last entry.
    ``check_contiguous`` requires each record to start where the previous
    ended, as every writer of the format does; the original's synthetic test
    index has gaps, so the structural checks can be limited to offsets.
    """
    start = check_magic(data[:1], file=file, legacy=legacy)
    body = len(data) - start
    torn = body % ENTRY_SIZE
    if torn and not allow_torn_tail:
        whole = body - torn
        raise TruncatedError(
            "segment index ends inside an entry",
            file=file,
            position=start + whole,
            expected=f"{ENTRY_SIZE}-byte entries",
            found=f"{torn} trailing bytes",
        )
    entries = [SegmentIndexEntry(*fields) for fields in ENTRY.iter_unpack(memoryview(data)[start : len(data) - torn])]
    validate_entries(entries, file=file, base=start, check_contiguous=check_contiguous)
    return entries


def validate_entries(
    entries: list[SegmentIndexEntry],
    *,
    file: str,
    base: int = 1,
    check_contiguous: bool = True,
    records_size: int | None = None,
) -> None:
    """Raise :class:`FormatError` at the first entry that breaks an invariant.

    ``records_size``, when given, also requires every entry to lie inside the
    records file of that many bytes.
    """
    previous_offset = -1
    # Records start right after the records file's magic byte; a legacy
    # index (base 0) belongs to a legacy records file without one.
    first_position = 1 if base else 0
    expected_position = first_position
    for index, (offset, position, length) in enumerate(entries):
        at = base + index * ENTRY_SIZE
        if offset <= previous_offset:
            raise FormatError(
                f"index entry {index}: offsets must increase",
                file=file,
                position=at,
                expected=f"an offset > {previous_offset}",
                found=str(offset),
            )
        if length <= 0 or position < first_position:
            raise FormatError(
                f"index entry {index} (offset {offset}): impossible record position or length",
                file=file,
                position=at + 8,
                expected=f"position >= {first_position} and length > 0",
                found=f"position {position}, length {length}",
            )
        if check_contiguous and position != expected_position:
            raise FormatError(
                f"index entry {index} (offset {offset}): record does not follow the previous one",
                file=file,
                position=at + 8,
                expected=f"position {expected_position}",
                found=f"position {position}",
            )
        if records_size is not None and position + length > records_size:
            raise FormatError(
                f"index entry {index} (offset {offset}) points outside its records file",
                file=file,
                position=at + 8,
                expected=f"position + length <= {records_size} (records file size)",
                found=f"{position} + {length} = {position + length}",
            )
        previous_offset = offset
        expected_position = position + length
