"""Reopening a partition's newest segment after a crash: its files, the tail cut back to the last verified record,
and the running CRC32Cs of what is committed.

A crash at any instruction can leave, at the tail: a partial index entry, index entries whose record bytes did not
reach the disk, and record bytes with no index entry, torn or whole. :func:`repair_tail` truncates both files back
to the last record whose entry and bytes agree (a few reads at the tail: earlier entries were made durable by an
earlier sync). :func:`load_coverage` then extends the ledger's committed CRC32Cs over the bytes kept.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import crc32c
import numpy as np

from spark_kafka_backup.errors import FormatError
from spark_kafka_backup.format.frames import is_framed
from spark_kafka_backup.format.record import TYPE_AND_TIMESTAMP_AT, decode_record, widen_time_range
from spark_kafka_backup.format.segment_index import ENTRY, ENTRY_DTYPE, ENTRY_SIZE, SegmentIndexEntry
from spark_kafka_backup.partition.layout import SegmentFiles
from spark_kafka_backup.partition.ledger import TailEntry
from spark_kafka_backup.storage import as_local


@dataclass
class Coverage:
    """The newest segment's files as written so far: sizes and running CRC32Cs."""

    name: str
    records_crc32c: int
    records_bytes: int
    index_crc32c: int
    index_bytes: int
    first_offset: int | None
    #: The oldest and newest timestamp of the records covered, when ``times`` (see :class:`TailEntry`).
    min_timestamp: int | None = None
    max_timestamp: int | None = None
    times: bool = True

    def add(self, records: bytes | bytearray, index: bytes | bytearray) -> None:
        """Cover ``records`` (appended at byte ``records_bytes``) and their ``index`` entries."""
        if self.times:
            self.min_timestamp, self.max_timestamp = _times_of(
                records, index, self.records_bytes, self.min_timestamp, self.max_timestamp
            )
        self.records_crc32c = crc32c.crc32c(records, self.records_crc32c)
        self.records_bytes += len(records)
        self.index_crc32c = crc32c.crc32c(index, self.index_crc32c)
        self.index_bytes += len(index)


#: Index bytes read at a time when a writer reads the times of records past the recorded prefix.
_EXTEND = ENTRY_SIZE * 65_536


def _times_of(
    records: bytes | bytearray, index: bytes | bytearray, at: int, low: int | None, high: int | None
) -> tuple[int | None, int | None]:
    """``low``/``high`` widened by the timestamps of the records ``index`` names in ``records`` (which start at
    byte ``at`` of the records file)."""
    entries = np.frombuffer(index, dtype=ENTRY_DTYPE)
    if not len(entries):
        return low, high
    starts = entries["position"].astype(np.int64) - at
    fields = np.frombuffer(records, dtype=np.uint8)[starts[:, None] + TYPE_AND_TIMESTAMP_AT]
    return widen_time_range(fields, low, high)


def crc_range(fd: int, start: int, end: int, value: int) -> int:
    """Extend ``value`` (the CRC32C of a file's first ``start`` bytes) over bytes ``start..end``."""
    position = start
    while position < end:
        chunk = os.pread(fd, min(1 << 20, end - position), position)
        if not chunk:
            raise FormatError(f"file ended at byte {position} while reading up to {end}", file=f"fd {fd}")
        value = crc32c.crc32c(chunk, value)
        position += len(chunk)
    return value


@dataclass(frozen=True)
class LocalSegmentFiles:
    records: Path
    index: Path


def local_files(files: SegmentFiles) -> LocalSegmentFiles:
    return LocalSegmentFiles(as_local(files.records), as_local(files.index))


def is_framed_file(path: Path) -> bool:
    with open(path, "rb") as handle:
        return is_framed(handle.read(4))


def holds_data(path: Path) -> bool:
    """Whether a segment file holds more than its magic byte."""
    try:
        return os.stat(path).st_size > 1
    except FileNotFoundError:
        return False


def repair_tail(
    records_fd: int, index_fd: int, records_file: Path, *, fsync: Callable[[int], None]
) -> tuple[int, int, int | None]:
    """Truncate a segment's files to its last verified record; the number of entries kept, the records file's new
    end and the last kept offset. Changed files are synced through ``fsync``, the index first (it must never point
    past the records file)."""
    records_size = os.fstat(records_fd).st_size
    index_size = os.fstat(index_fd).st_size
    count = (index_size - 1) // ENTRY_SIZE
    kept = count
    last: SegmentIndexEntry | None = None
    while kept > 0:
        entry = SegmentIndexEntry(*ENTRY.unpack(os.pread(index_fd, ENTRY_SIZE, 1 + (kept - 1) * ENTRY_SIZE)))
        before = (
            SegmentIndexEntry(*ENTRY.unpack(os.pread(index_fd, ENTRY_SIZE, 1 + (kept - 2) * ENTRY_SIZE)))
            if kept > 1
            else None
        )
        if entry_verified(records_fd, entry, before, records_size, records_file):
            last = entry
            break
        kept -= 1
    records_end = last.end if last is not None else 1
    changed = False
    if index_size != 1 + kept * ENTRY_SIZE:
        os.ftruncate(index_fd, 1 + kept * ENTRY_SIZE)
        changed = True
    if records_size != records_end:
        os.ftruncate(records_fd, records_end)
        changed = True
    if changed:
        fsync(index_fd)
        fsync(records_fd)
    return kept, records_end, None if last is None else last.offset


def entry_verified(
    records_fd: int, entry: SegmentIndexEntry, before: SegmentIndexEntry | None, records_size: int, records_file: Path
) -> bool:
    """Whether ``entry`` (after ``before``) points at a whole record of its own offset inside the records file."""
    # Bytes between two records (a partial record or an unindexed copy the original tool left
    # after a crash) stay: the index, not adjacency, says which bytes are records.
    expected_position = before.end if before is not None else 1
    if entry.position < expected_position or entry.length <= 0 or entry.end > records_size:
        return False
    if before is not None and entry.offset <= before.offset:
        return False
    raw = os.pread(records_fd, entry.length, entry.position)
    try:
        record, end = decode_record(raw, file=str(records_file), base=entry.position)
    except FormatError:
        return False
    return record.offset == entry.offset and end == entry.length


def load_coverage(
    records_fd: int,
    index_fd: int,
    name: str,
    *,
    records_end: int,
    index_end: int,
    tail: TailEntry | None,
    records_file: Path,
) -> Coverage:
    """The newest segment's CRC32Cs as committed: from the ledger's ``tail``, extended over the newer bytes up to
    ``records_end`` and ``index_end``; without a tail the files are read whole once."""
    if tail is not None and (tail.records_bytes > records_end or tail.index_bytes > index_end):
        raise FormatError(
            f"the catalog says {tail.records_bytes} bytes of records were committed in this segment, "
            f"{records_end} verified bytes are left (committed records are lost; spark-kafka-backup verify names "
            "them)",
            file=str(records_file),
        )
    records_crc = crc_range(
        records_fd, tail.records_bytes if tail else 0, records_end, tail.records_crc32c if tail else 0
    )
    index_crc = crc_range(index_fd, tail.index_bytes if tail else 0, index_end, tail.index_crc32c if tail else 0)
    first = SegmentIndexEntry(*ENTRY.unpack(os.pread(index_fd, ENTRY_SIZE, 1))).offset if index_end > 1 else None
    coverage = Coverage(name, records_crc, records_end, index_crc, index_end, first, times=False)
    if tail is not None and tail.times:
        coverage.min_timestamp, coverage.max_timestamp, coverage.times = tail.min_timestamp, tail.max_timestamp, True
        # Synced bytes past the recorded prefix (a writer killed before it recorded them): their times read once.
        for begin in range(tail.index_bytes, index_end - (index_end - tail.index_bytes) % ENTRY_SIZE, _EXTEND):
            index = os.pread(index_fd, min(_EXTEND, index_end - begin) // ENTRY_SIZE * ENTRY_SIZE, begin)
            entries = np.frombuffer(index, dtype=ENTRY_DTYPE)
            if not len(entries):
                break
            at = int(entries["position"][0])
            end = int(entries["position"][-1]) + int(entries["length"][-1])
            coverage.min_timestamp, coverage.max_timestamp = _times_of(
                os.pread(records_fd, end - at, at), index, at, coverage.min_timestamp, coverage.max_timestamp
            )
    return coverage
