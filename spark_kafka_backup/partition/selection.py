"""Which records of a backed-up partition a read selects (a restore produces them; the data source gives them).

A record is **selected** when its offset lies in the partition's offset window
(``from_offset <= offset <= to_offset``, either end open) and, if a time
window is given, its timestamp lies in it (``from_time <= timestamp <=
to_time``; records without a timestamp are outside any time window).

Without a time window, counting and locating selected records needs only the
segment indexes (a binary search per segment); with one, the records are read.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from spark_kafka_backup.format.record import Record
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.segment_batches import RecordBatch
from spark_kafka_backup.partition.segment_reader import SegmentIndexFile, iter_segment


@dataclass(frozen=True)
class Window:
    """The offset and time bounds of a selection (``None``: open)."""

    from_offset: int | None = None
    to_offset: int | None = None
    from_time: int | None = None
    to_time: int | None = None
    #: Segments left out whole (damaged ones, with ``--skip-bad-segments``).
    skip_segments: frozenset[str] = frozenset()

    @property
    def by_time(self) -> bool:
        return self.from_time is not None or self.to_time is not None

    def selects(self, record: Record) -> bool:
        if self.from_offset is not None and record.offset < self.from_offset:
            return False
        if self.to_offset is not None and record.offset > self.to_offset:
            return False
        if self.by_time:
            if record.timestamp is None:
                return False
            if self.from_time is not None and record.timestamp < self.from_time:
                return False
            if self.to_time is not None and record.timestamp > self.to_time:
                return False
        return True


def selected_records(reader: PartitionReader, window: Window) -> Iterator[Record]:
    """The selected records, in offset order (decoded in columnar batches)."""
    batches = reader.record_batches(window.from_offset, window.to_offset, skip_segments=window.skip_segments)
    for batch in batches:
        for record in batch.records():
            if not window.by_time or window.selects(record):
                yield record


def selected_rows(stored: RecordBatch, window: Window) -> npt.NDArray[np.int64] | None:
    """The rows of a batch read within the offset window that the time window selects (``None``: all of them)."""
    if not window.by_time:
        return None
    c = stored.columns
    keep = (c.timestamp_types == 0) | (c.timestamp_types == 1)
    if window.from_time is not None:
        keep &= c.timestamps >= window.from_time
    if window.to_time is not None:
        keep &= c.timestamps <= window.to_time
    return None if keep.all() else np.flatnonzero(keep)


def count_selected(reader: PartitionReader, window: Window, *, below: int | None = None) -> int:
    """How many records are selected (with an offset ``< below`` when given)."""
    if window.by_time:
        return sum(1 for record in selected_records(reader, window) if below is None or record.offset < below)
    low = window.from_offset
    high = window.to_offset + 1 if window.to_offset is not None else None
    if below is not None:
        high = below if high is None else min(high, below)
    total = 0
    for segment in reader.segments:
        if segment.name in window.skip_segments:
            continue
        _, index_path = reader.segment_paths(segment)
        with SegmentIndexFile(index_path, legacy=reader.legacy) as index:
            first = index.bisect(low) if low is not None else 0
            last = index.bisect(high) if high is not None else index.count
            total += max(0, last - first)
    return total


def nth_selected(reader: PartitionReader, window: Window, n: int) -> Record | None:
    """The ``n``-th selected record (0-based), or ``None`` when there are not that many."""
    if window.by_time:
        for position, record in enumerate(selected_records(reader, window)):
            if position == n:
                return record
        return None
    remaining = n
    for segment in reader.segments:
        if segment.name in window.skip_segments:
            continue
        records_path, index_path = reader.segment_paths(segment)
        with SegmentIndexFile(index_path, legacy=reader.legacy) as index:
            first = index.bisect(window.from_offset) if window.from_offset is not None else 0
            last = index.bisect(window.to_offset + 1) if window.to_offset is not None else index.count
            available = max(0, last - first)
            if remaining < available:
                offset = index.entry(first + remaining).offset
                return next(iter_segment(records_path, index_path, from_offset=offset, legacy=reader.legacy))
            remaining -= available
    return None


class BelowCounter:
    """Counts, for each of a fixed set of offsets C, the selected records with an offset below C.

    Fed the selected records' offsets in one streaming pass; memory is one
    counter per distinct C, not per record.
    """

    def __init__(self, offsets: list[int]) -> None:
        self.offsets = sorted(set(offsets))
        self._steps = [0] * (len(self.offsets) + 1)

    def add(self, offset: int) -> None:
        # The record is below every C greater than its offset.
        self._steps[bisect.bisect_right(self.offsets, offset)] += 1

    def below(self) -> dict[int, int]:
        result = {}
        running = 0
        for index, offset in enumerate(self.offsets):
            running += self._steps[index]
            result[offset] = running
        return result


def same_record(stored: Record, produced: Record) -> bool:
    """Whether a record read from the target is the restored form of a stored one."""
    if (stored.key, stored.value, stored.headers) != (produced.key, produced.value, produced.headers):
        return False
    if stored.timestamp_type == 0 and produced.timestamp_type == 0:
        return stored.timestamp == produced.timestamp
    return True
