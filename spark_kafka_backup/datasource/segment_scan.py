"""One task of the ``kbackup`` data source: whole segments of one backed-up partition, read on an executor.

The driver plans (:mod:`spark_kafka_backup.datasource.scan_plan`); a :class:`SegmentScan` carries, pickled, all a
task needs: the backup root as text, the partition, the segments in order, the offset and time window, and where the
decryption keys are (a key file's path or an environment variable's name: never the key). This module never imports
the driver's.

A task first checks its segments against the catalog's checksums (as ``cat`` and the restore do), so a damaged
segment is an error naming it before any of its rows is given, never wrong rows; with ``skipBadSegments`` it is left
out and said in the executor's log. On an object store the task copies its segments to a local spool once
(``KBACKUP_SPOOL_DIR``) and reads, checks and removes the copy. Memory: one reader batch (at most 10,000 records or
8 MiB) and its Arrow rows.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from spark_kafka_backup.catalog.integrity import bad_segments
from spark_kafka_backup.datasource.kafka_rows import kafka_rows, offset_rows
from spark_kafka_backup.errors import ChecksumError, FormatError, SparkKafkaBackupError
from spark_kafka_backup.format.encryption import KeyRing
from spark_kafka_backup.format.naming import INDEX_SUFFIX, RECORDS_SUFFIX
from spark_kafka_backup.format.partition_index import PartitionIndexEntry
from spark_kafka_backup.format.segment_index import ENTRY_DTYPE
from spark_kafka_backup.partition.reader import check_follows
from spark_kafka_backup.partition.records_file import load_keys
from spark_kafka_backup.partition.segment_batches import RecordBatch, iter_segment_batches
from spark_kafka_backup.partition.segment_reader import SegmentIndexFile
from spark_kafka_backup.partition.selection import Window, selected_rows
from spark_kafka_backup.partition.spool import staged_segments
from spark_kafka_backup.storage import Location, parse_location

log = logging.getLogger("spark_kafka_backup.datasource")


@dataclass(frozen=True)
class SegmentScan:
    """Whole segments of one partition, read in offset order (a ``pyspark`` ``InputPartition``: pickled to a task).

    ``segments`` are ``(name, start offset)`` pairs in the partition index's order; ``next_start`` the start offset of
    the segment after the last of them in the partition index (``None``: none follows), so that a task's records stay
    below the next task's as the partition reader checks across segments; ``window`` the offsets and times kept (its
    ``skip_segments`` are not read).
    """

    root: str
    topic: str
    partition: int
    segments: tuple[tuple[str, int], ...]
    next_start: int | None
    window: Window
    key_sources: tuple[tuple[str | None, str | None], ...] = ()
    verify: bool = True
    skip_bad_segments: bool = False
    legacy: bool = False
    #: The optional columns filled (``None``: all); see :func:`~spark_kafka_backup.datasource.kafka_rows.kafka_rows`.
    columns: frozenset[str] | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.segments)


def read_scan(scan: SegmentScan) -> Iterator[pa.RecordBatch]:
    """The scan's records as Kafka rows (:data:`~spark_kafka_backup.datasource.kafka_rows.KAFKA_ROWS_SCHEMA`)."""
    keys = load_keys(scan.key_sources)  # exactly this read's keys (none: none), read where the task runs
    root = parse_location(scan.root)
    topic_dir = root / scan.topic
    with staged_segments(topic_dir, scan.names) as files:
        try:
            yield from _read_staged(scan, files, topic_dir, keys)
        except SparkKafkaBackupError as exc:
            if files == topic_dir:
                raise
            # A local copy's path means nothing to the user: the error names the object it was copied from.
            renamed = _named_at_source(exc, str(files), str(topic_dir))
            if renamed is exc:
                raise
            raise renamed from exc


#: The columns that need a segment's records read (the others come from its index and the scan).
RECORD_COLUMNS = frozenset({"key", "value", "headers", "timestamp", "timestampType"})
#: Index entries read at a time by a scan that needs no record.
INDEX_ENTRIES = 65_536


def _read_staged(scan: SegmentScan, files: Location, topic_dir: Location, keys: KeyRing) -> Iterator[pa.RecordBatch]:
    window = scan.window
    skipped = _checked(scan, files, keys) if scan.verify else frozenset()
    if scan.columns is not None and not scan.columns & RECORD_COLUMNS and not window.by_time:
        # Topic, partition and offsets only (a predicate of offsets): the indexes say it all.
        yield from _offsets_only(scan, files, topic_dir, skipped)
        return
    previous = -1
    for name, start, following in _segments_read(scan, skipped):
        records_path = files / f"{name}{RECORDS_SUFFIX}"
        batches = iter_segment_batches(
            records_path,
            files / f"{name}{INDEX_SUFFIX}",
            from_offset=window.from_offset,
            legacy=scan.legacy,
            keys=keys,
        )
        for batch in batches:
            offsets = batch.columns.offsets
            check_follows(
                PartitionIndexEntry(name, start), topic_dir / f"{name}{RECORDS_SUFFIX}", int(offsets[0]), previous
            )
            _check_below(str(topic_dir / f"{name}{RECORDS_SUFFIX}"), following, int(offsets[-1]))
            previous = int(offsets[-1])
            if window.to_offset is not None and offsets[-1] > window.to_offset:
                kept = int(np.searchsorted(offsets, window.to_offset, side="right"))
                if kept:
                    yield from _rows(scan, batch.head(kept), window)
                return
            yield from _rows(scan, batch, window)


def _segments_read(scan: SegmentScan, skipped: frozenset[str]) -> Iterator[tuple[str, int, int | None]]:
    """Each segment read (name, start offset) and the start offset of the one after it (``None``: none)."""
    for number, (name, start) in enumerate(scan.segments):
        if name not in skipped and name not in scan.window.skip_segments:
            following = scan.segments[number + 1][1] if number + 1 < len(scan.segments) else scan.next_start
            yield name, start, following


def _offsets_only(
    scan: SegmentScan, files: Location, topic_dir: Location, skipped: frozenset[str]
) -> Iterator[pa.RecordBatch]:
    """The scan's rows from the segments' indexes (offsets increasing, checked as the records' reader checks them),
    no record read: :func:`~spark_kafka_backup.datasource.kafka_rows.offset_rows`."""
    window = scan.window
    previous = -1
    for name, start, following in _segments_read(scan, skipped):
        records_path = topic_dir / f"{name}{RECORDS_SUFFIX}"
        with SegmentIndexFile(files / f"{name}{INDEX_SUFFIX}", legacy=scan.legacy) as index:
            first = index.bisect(window.from_offset) if window.from_offset is not None else 0
            last = index.bisect(window.to_offset + 1) if window.to_offset is not None else index.count
            for at in range(first, last, INDEX_ENTRIES):
                entries = np.frombuffer(index.read_entries(at, min(INDEX_ENTRIES, last - at)), dtype=ENTRY_DTYPE)
                offsets = entries["offset"].astype(np.int64)
                if bool(np.any(offsets[1:] <= offsets[:-1])):
                    row = int(np.flatnonzero(offsets[1:] <= offsets[:-1])[0]) + 1
                    raise FormatError(f"index entry {at + row}: offset {int(offsets[row])} does not follow "
                                      f"{int(offsets[row - 1])}", file=str(index.path))  # fmt: skip
                check_follows(PartitionIndexEntry(name, start), records_path, int(offsets[0]), previous)
                _check_below(str(records_path), following, int(offsets[-1]))
                previous = int(offsets[-1])
                yield offset_rows(offsets, scan.topic, scan.partition)


def _named_at_source(exc: SparkKafkaBackupError, local: str, source: str) -> SparkKafkaBackupError:
    """``exc`` with the local copy's directory ``local`` replaced by the object prefix ``source`` it came from."""
    if isinstance(exc, FormatError):
        exc.file = None if exc.file is None else exc.file.replace(local, source)
        exc.args = (exc._render(),)
        return exc
    try:
        return type(exc)(str(exc).replace(local, source))
    except TypeError:
        return exc


def _rows(scan: SegmentScan, batch: RecordBatch, window: Window) -> Iterator[pa.RecordBatch]:
    rows = selected_rows(batch, window)
    if rows is None or len(rows):
        yield kafka_rows(batch, scan.topic, scan.partition, rows, scan.columns)


def _checked(scan: SegmentScan, files: Location, keys: KeyRing) -> frozenset[str]:
    """The scan's segments that fail the catalog's checksums, when ``skipBadSegments`` lets them be left out;
    otherwise the first one is an error naming it."""
    root = parse_location(scan.root)
    found = bad_segments(root, scan.topic, scan.partition, files=files, only=scan.names, legacy=scan.legacy, keys=keys)
    for bad in found:
        text = f"topic {scan.topic!r} partition {scan.partition}: segment {bad.name} ({bad.offsets}) is damaged: "
        if not scan.skip_bad_segments:
            raise ChecksumError(
                f"{text}{bad.reason} (in {root / scan.topic}); no row of it was read (the option skipBadSegments "
                "reads the rest and leaves it out)"
            )
        log.warning("%s%s; left out (skipBadSegments)", text, bad.reason)
    return frozenset(bad.name for bad in found)


def _check_below(records_file: str, following: int | None, last: int) -> None:
    """A segment's records come before the next segment's start offset (the next task's first records)."""
    if following is not None and last >= following:
        raise FormatError(
            "segment reaches into the next segment's offsets",
            file=records_file,
            expected=f"offsets < {following} (the next segment's start offset)",
            found=str(last),
        )
