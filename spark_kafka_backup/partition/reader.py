"""Reading one partition of a v1 backup: sequentially, from an offset, or summarised.

The partition index names the segments in order; each segment is read
through its index (see :mod:`spark_kafka_backup.partition.segment_reader`). A segment's
start offset may be lower than its first record's offset (the original names
a partition's first segment ``from_offset_0000000000`` whatever it holds), so
a seek picks the last segment starting at or before the target and then
searches that segment's index.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from spark_kafka_backup.errors import BackupNotFoundError, FormatError
from spark_kafka_backup.format.encryption import KeyRing
from spark_kafka_backup.format.frames import CODEC_NAMES, is_framed
from spark_kafka_backup.format.naming import INDEX_SUFFIX, RECORDS_SUFFIX
from spark_kafka_backup.format.partition_index import PartitionIndexEntry, decode_partition_index
from spark_kafka_backup.format.record import Record
from spark_kafka_backup.partition.layout import check_segment_names, partition_index_path
from spark_kafka_backup.partition.records_file import NO_KEYS
from spark_kafka_backup.partition.segment_batches import Keep, RecordBatch, iter_segment_batches
from spark_kafka_backup.partition.segment_reader import SegmentIndexFile, iter_segment
from spark_kafka_backup.storage import Location, confine_root, storage_for

#: A partition index larger than this is refused before it is read.
MAX_PARTITION_INDEX_SIZE = 1 << 30


@dataclass(frozen=True)
class SegmentSummary:
    """What one segment holds, read from its index alone."""

    name: str
    start_offset: int
    record_count: int
    first_offset: int | None
    last_offset: int | None
    records_bytes: int
    index_bytes: int
    #: Set for a compressed records file: its codec (``records_bytes`` is then the stored size).
    compression: str | None = None


class PartitionReader:
    """Reads the records of one partition directory.

    ``legacy`` accepts files written before the v1 magic byte existed.
    """

    def __init__(self, topic_dir: Location, partition: int, *, legacy: bool = False, keys: KeyRing = NO_KEYS) -> None:
        self.topic_dir = topic_dir
        self.partition = partition
        self.legacy = legacy
        #: The keys its sealed segments are read with (those of the command line, the job or the task).
        self.keys = keys
        confine_root(topic_dir.parent)
        path = partition_index_path(topic_dir, partition)
        storage = storage_for(path)
        if not storage.exists(path):
            raise BackupNotFoundError(
                f"{path}: partition index does not exist "
                f"(rebuild it with: spark-kafka-backup index rebuild {topic_dir} --partition {partition})"
            )
        data = storage.read_limited(path, MAX_PARTITION_INDEX_SIZE)
        # A partial last entry is a segment being created right now: not yet part of the backup.
        self.segments: list[PartitionIndexEntry] = decode_partition_index(
            data, file=str(path), legacy=legacy, allow_torn_tail=True
        )[0]
        check_segment_names(self.segments, file=str(path))

    def segment_paths(self, segment: PartitionIndexEntry) -> tuple[Location, Location]:
        """The records and index file of a segment named in the partition index."""
        return (
            self.topic_dir / (segment.name + RECORDS_SUFFIX),
            self.topic_dir / (segment.name + INDEX_SUFFIX),
        )

    def segments_between(
        self, from_offset: int | None, to_offset: int | None, skip_segments: frozenset[str]
    ) -> Iterator[tuple[PartitionIndexEntry, Location, Location]]:
        """The segments that may hold offsets in ``from_offset..to_offset``, in order, less ``skip_segments``."""
        first = 0
        if from_offset is not None:
            starts = [segment.start_offset for segment in self.segments]
            first = max(bisect.bisect_right(starts, from_offset) - 1, 0)
        for segment in self.segments[first:]:
            if to_offset is not None and segment.start_offset > to_offset:
                return
            if segment.name not in skip_segments:
                yield (segment, *self.segment_paths(segment))

    def records(
        self,
        from_offset: int | None = None,
        to_offset: int | None = None,
        *,
        skip_segments: frozenset[str] = frozenset(),
    ) -> Iterator[Record]:
        """Yield records with ``from_offset <= offset <= to_offset``, in offset order.

        Segments named in ``skip_segments`` are passed over (a restore told to
        leave out damaged segments).
        """
        previous = -1
        for segment, records_path, index_path in self.segments_between(from_offset, to_offset, skip_segments):
            for record in iter_segment(
                records_path, index_path, from_offset=from_offset, legacy=self.legacy, keys=self.keys
            ):
                check_follows(segment, records_path, record.offset, previous)
                if to_offset is not None and record.offset > to_offset:
                    return
                previous = record.offset
                yield record

    def record_batches(
        self,
        from_offset: int | None = None,
        to_offset: int | None = None,
        *,
        skip_segments: frozenset[str] = frozenset(),
        keep: Keep | None = None,
    ) -> Iterator[RecordBatch]:
        """:meth:`records`, as columnar batches (see :mod:`spark_kafka_backup.partition.segment_batches`); with
        ``keep``, only the records whose offsets it holds for."""
        previous = -1
        for segment, records_path, index_path in self.segments_between(from_offset, to_offset, skip_segments):
            batches = iter_segment_batches(records_path, index_path, from_offset=from_offset, legacy=self.legacy,
                                           keep=keep, keys=self.keys)  # fmt: skip
            for batch in batches:
                check_follows(segment, records_path, int(batch.columns.offsets[0]), previous)
                if to_offset is not None and batch.columns.offsets[-1] > to_offset:
                    kept = int(np.searchsorted(batch.columns.offsets, to_offset, side="right"))
                    if kept:
                        yield batch.head(kept)
                    return
                previous = int(batch.columns.offsets[-1])
                yield batch

    def last_offset(self) -> int | None:
        """The offset of the partition's last stored record (``None``: none), from the newest indexes."""
        for segment in reversed(self.segments):
            _, index_path = self.segment_paths(segment)
            with SegmentIndexFile(index_path, legacy=self.legacy) as index:
                if index.count:
                    return index.entry(index.count - 1).offset
        return None

    def summaries(self) -> list[SegmentSummary]:
        """Per segment: record count, first and last offset and sizes, from indexes only."""
        result = []
        for segment in self.segments:
            records_path, index_path = self.segment_paths(segment)
            with SegmentIndexFile(index_path, legacy=self.legacy) as index:
                first = index.entry(0).offset if index.count else None
                last = index.entry(index.count - 1).offset if index.count else None
                count = index.count
            result.append(
                SegmentSummary(
                    name=segment.name,
                    start_offset=segment.start_offset,
                    record_count=count,
                    first_offset=first,
                    last_offset=last,
                    records_bytes=_size(records_path),
                    index_bytes=_size(index_path),
                    compression=_codec(records_path),
                )
            )
        return result


def check_follows(segment: PartitionIndexEntry, records_path: Location, offset: int, previous: int) -> None:
    """A segment's records come after the previous segment's and at or above the segment's start offset (also the
    data source's check, :mod:`spark_kafka_backup.datasource.segment_scan`)."""
    if offset <= previous:
        raise FormatError(
            f"segment {segment.name} repeats or goes back in offsets",
            file=str(records_path),
            expected=f"offsets > {previous} (the previous segment's last)",
            found=str(offset),
        )
    if offset < segment.start_offset:
        raise FormatError(
            f"record offset below its segment's start offset {segment.start_offset}",
            file=str(records_path),
            expected=f"offsets >= {segment.start_offset}",
            found=str(offset),
        )


def _codec(records_path: Location) -> str | None:
    """The codec a compressed records file's header names (``None`` for a plain or missing one): its first six
    bytes only, so that a listing neither fails on a damaged frame table nor reads it."""
    storage = storage_for(records_path)
    if not storage.exists(records_path):
        return None
    handle = storage.open_read(records_path)
    try:
        head = handle.pread(6, 0)
    finally:
        handle.close()
    return CODEC_NAMES.get(head[5], f"unknown codec {head[5]}") if len(head) == 6 and is_framed(head) else None


def _size(path: Location) -> int:
    size = storage_for(path).size(path)
    if size is None:
        raise BackupNotFoundError(f"{path}: file does not exist")
    return size
