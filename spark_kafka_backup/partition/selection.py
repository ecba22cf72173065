"""Which records of a backed-up partition a read selects (a restore produces them; the data source gives them).

A record is **selected** when its offset lies in the partition's offset window
(``from_offset <= offset <= to_offset``, either end open), if a time
window is given, its timestamp lies in it (``from_time <= timestamp <=
to_time``; records without a timestamp are outside any time window), and, if the
records were matched against a predicate (``restore --where``), it is among those that matched
(:class:`MatchedRuns`).

Without a time window or matches, counting and locating selected records needs only the
segment indexes (a binary search per segment); with one, the records are read.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from spark_kafka_backup.format.record import Record
from spark_kafka_backup.format.segment_index import ENTRY_DTYPE
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.segment_batches import RecordBatch
from spark_kafka_backup.partition.segment_reader import SegmentIndexFile, iter_segment
from spark_kafka_backup.storage import Location


@dataclass(frozen=True, eq=False)
class MatchedRuns:
    """The records of one backed-up partition that matched a predicate, as runs: run ``i`` is every stored record
    with an offset from ``firsts[i]`` to ``lasts[i]`` (they all matched, and they are consecutive in the backup: no
    record between them did not). Runs are in offset order and do not overlap. Memory: 16 bytes per run, however
    many records a run holds."""

    firsts: npt.NDArray[np.int64]
    lasts: npt.NDArray[np.int64]
    #: The predicate, as given: part of a restore's identity (the runs grow with a backup that goes on).
    where: str = ""
    #: How many records matched, as the scan that found the runs counted them.
    records: int = 0

    @classmethod
    def of(cls, runs: list[tuple[int, int]], where: str = "") -> MatchedRuns:
        ordered = sorted(runs)
        firsts = np.array([a for a, _ in ordered], dtype=np.int64)
        return cls(firsts, np.array([b for _, b in ordered], dtype=np.int64), where)

    def __len__(self) -> int:
        return len(self.firsts)

    def holds(self, offsets: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """Which of ``offsets`` lie in a run."""
        at = np.searchsorted(self.firsts, offsets, side="right") - 1
        if not len(self.firsts):
            return np.zeros(len(offsets), dtype=bool)
        return (at >= 0) & (offsets <= self.lasts[np.maximum(at, 0)])

    def __contains__(self, offset: int) -> bool:
        return bool(self.holds(np.array([offset], dtype=np.int64))[0])

    def without(self, ranges: list[tuple[int | None, int | None]]) -> MatchedRuns:
        """These runs less the offsets of ``ranges`` (inclusive; ``None``: open), each run cut around them."""
        firsts, lasts = self.firsts, self.lasts
        none = np.zeros(0, dtype=np.int64)
        for low, high in ranges:
            # The parts of each run below the range and above it (none below an open start, none above an open end).
            below_first, below_last = (none, none) if low is None else (firsts, np.minimum(lasts, low - 1))
            above_first, above_last = (none, none) if high is None else (np.maximum(firsts, high + 1), lasts)
            keep_below = below_first <= below_last
            keep_above = above_first <= above_last
            firsts = np.concatenate((below_first[keep_below], above_first[keep_above])).astype(np.int64)
            lasts = np.concatenate((below_last[keep_below], above_last[keep_above])).astype(np.int64)
            order = np.argsort(firsts, kind="stable")
            firsts, lasts = firsts[order], lasts[order]
        return MatchedRuns(firsts, lasts, self.where, self.records)

    def digest(self) -> str:
        runs = hashlib.sha256(self.firsts.tobytes() + b"|" + self.lasts.tobytes())
        runs.update(self.where.encode())
        return runs.hexdigest()[:16]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MatchedRuns) and self.digest() == other.digest()

    def __hash__(self) -> int:
        return hash(self.digest())


@dataclass(frozen=True)
class Window:
    """The offset and time bounds of a selection (``None``: open)."""

    from_offset: int | None = None
    to_offset: int | None = None
    from_time: int | None = None
    to_time: int | None = None
    #: Segments left out whole (damaged ones, with ``--skip-bad-segments``).
    skip_segments: frozenset[str] = frozenset()
    #: The records that matched a predicate (``None``: no predicate).
    matched: MatchedRuns | None = None

    @property
    def by_time(self) -> bool:
        return self.from_time is not None or self.to_time is not None

    @property
    def by_records(self) -> bool:
        """Whether selecting needs the records themselves (their times, or whether they matched), not only the
        indexes."""
        return self.by_time or self.matched is not None

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
        return self.matched is None or record.offset in self.matched


def selected_records(reader: PartitionReader, window: Window) -> Iterator[Record]:
    """The selected records, in offset order (decoded in columnar batches)."""
    batches = reader.record_batches(window.from_offset, window.to_offset, skip_segments=window.skip_segments)
    for batch in batches:
        rows = selected_rows(batch, window)
        if rows is None:
            yield from batch.records()
        elif len(rows):
            # The batch's records built column by column (one slice per record would cost more than the whole).
            keep = np.zeros(len(batch), dtype=bool)
            keep[rows] = True
            yield from itertools.compress(batch.records(), keep.tolist())


def selected_rows(stored: RecordBatch, window: Window) -> npt.NDArray[np.int64] | None:
    """The rows of a batch read within the offset window that the time window and the matches select (``None``: all
    of them)."""
    if not window.by_records:
        return None
    c = stored.columns
    keep = np.ones(len(c), dtype=bool)
    if window.by_time:
        keep &= (c.timestamp_types == 0) | (c.timestamp_types == 1)
    if window.from_time is not None:
        keep &= c.timestamps >= window.from_time
    if window.to_time is not None:
        keep &= c.timestamps <= window.to_time
    if window.matched is not None:
        keep &= window.matched.holds(np.asarray(c.offsets, dtype=np.int64))
    return None if keep.all() else np.flatnonzero(keep)


def count_selected(reader: PartitionReader, window: Window, *, below: int | None = None) -> int:
    """How many records are selected (with an offset ``< below`` when given)."""
    if window.by_time:
        return _counted_by_records(reader, window, below)
    if window.matched is not None:
        return sum(len(offsets) for _, _, offsets in _indexed_matches(reader, window, below))
    return sum(last - first for _, _, _, first, last in _indexed_spans(reader, window, below))


def nth_selected(reader: PartitionReader, window: Window, n: int) -> Record | None:
    """The ``n``-th selected record (0-based), or ``None`` when there are not that many."""
    if window.by_time:
        for position, record in enumerate(selected_records(reader, window)):
            if position == n:
                return record
        return None
    if window.matched is not None:
        remaining = n
        for records_path, index_path, offsets in _indexed_matches(reader, window, None):
            if remaining < len(offsets):
                at = int(offsets[remaining])
                return next(
                    iter_segment(records_path, index_path, from_offset=at, legacy=reader.legacy, keys=reader.keys)
                )
            remaining -= len(offsets)
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
                return next(
                    iter_segment(records_path, index_path, from_offset=offset, legacy=reader.legacy, keys=reader.keys)
                )
            remaining -= available
    return None


def _counted_by_records(reader: PartitionReader, window: Window, below: int | None) -> int:
    """:func:`count_selected` where the records are read (a time window): counted on the columns, no record built."""
    total = 0
    for batch in reader.record_batches(window.from_offset, window.to_offset, skip_segments=window.skip_segments):
        rows = selected_rows(batch, window)
        offsets = np.asarray(batch.columns.offsets, dtype=np.int64)
        chosen = offsets if rows is None else offsets[rows]
        total += len(chosen) if below is None else int(np.count_nonzero(chosen < below))
    return total


#: Index entries read at a time by :func:`_indexed_matches`.
_ENTRIES = 65_536


def _indexed_matches(
    reader: PartitionReader, window: Window, below: int | None
) -> Iterator[tuple[Location, Location, npt.NDArray[np.int64]]]:
    """Per stretch of a segment's index: its files and the offsets of its entries in the offset window (and below
    ``below``) that matched. From the indexes alone: no record is read (a window without times)."""
    assert window.matched is not None
    for records_path, index_path, index, first, last in _indexed_spans(reader, window, below):
        for start in range(first, last, _ENTRIES):
            entries = np.frombuffer(index.read_entries(start, min(_ENTRIES, last - start)), dtype=ENTRY_DTYPE)
            offsets = entries["offset"].astype(np.int64)
            yield records_path, index_path, offsets[window.matched.holds(offsets)]


def _indexed_spans(
    reader: PartitionReader, window: Window, below: int | None
) -> Iterator[tuple[Location, Location, SegmentIndexFile, int, int]]:
    """Per segment not skipped that may hold offsets in the window (by the segments' start offsets: the indexes of
    the others are not opened, which on an object store is a request or more each): its files, its open index, and
    the entries ``first .. last - 1`` in the offset window (and below ``below``)."""
    low = window.from_offset
    high = window.to_offset + 1 if window.to_offset is not None else None
    if below is not None:
        high = below if high is None else min(high, below)
    if high is not None and low is not None and high <= low:
        return
    for _segment, records_path, index_path in reader.segments_between(
        low, None if high is None else high - 1, window.skip_segments
    ):
        with SegmentIndexFile(index_path, legacy=reader.legacy) as index:
            first = index.bisect(low) if low is not None else 0
            last = index.bisect(high) if high is not None else index.count
            yield records_path, index_path, index, first, max(first, last)


def first_offset_from(reader: PartitionReader, offset: int) -> int | None:
    """The offset of the partition's first record at or after ``offset`` (``None``: none), from the indexes alone: the
    segment that may hold ``offset`` (and the next ones while they hold nothing at or after it)."""
    for _segment, _records_path, index_path in reader.segments_between(offset, None, frozenset()):
        with SegmentIndexFile(index_path, legacy=reader.legacy) as index:
            at = index.bisect(offset)
            if at < index.count:
                return int(index.entry(at).offset)
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
