"""Describing segments for the catalog: checksums, counts, offsets and time range."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import crc32c
import numpy as np

from spark_kafka_backup.catalog.model import PartitionCatalog, SegmentEntry
from spark_kafka_backup.catalog.store import read_catalog, write_catalog
from spark_kafka_backup.catalog.tail import prefix_crc32c
from spark_kafka_backup.errors import FormatError
from spark_kafka_backup.format.encryption import KeyRing
from spark_kafka_backup.format.frames import FramedReader, is_framed
from spark_kafka_backup.format.record import TYPE_AND_TIMESTAMP_AT, widen_time_range
from spark_kafka_backup.format.segment_index import ENTRY_DTYPE, ENTRY_SIZE
from spark_kafka_backup.partition.layout import list_partitions
from spark_kafka_backup.partition.ledger import TailEntry
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.records_file import NO_KEYS, FramedHandle, open_records
from spark_kafka_backup.partition.segment_reader import SegmentIndexFile, iter_segment
from spark_kafka_backup.progress import Progress
from spark_kafka_backup.storage import Location, storage_for

CHUNK = 1 << 20


def file_crc32c(path: Location) -> tuple[int, int]:
    """The CRC32C and size of a file, read in 1 MiB chunks."""
    value = 0
    size = 0
    handle = storage_for(path).open_read(path)
    try:
        while chunk := handle.stream.read(CHUNK):
            value = crc32c.crc32c(chunk, value)
            size += len(chunk)
    finally:
        handle.close()
    return value, size


def segment_time_range(
    records_path: Location, index_path: Location, *, legacy: bool = False, keys: KeyRing = NO_KEYS
) -> tuple[int | None, int | None]:
    """The smallest and largest record timestamp of a segment.

    On disk, read at fixed places rather than by decoding: each index entry
    gives a record's position; its timestamp type is the int32 at +8 and,
    for types 0 and 1, its timestamp the int64 at +12. Gathered with numpy
    in chunks from a memory map (about a second per GiB), or frame by frame
    from a compressed file (each frame decompressed once). Objects are read
    by streaming the segment's records.
    """
    if not isinstance(records_path, Path) or not isinstance(index_path, Path):
        return _streamed_time_range(records_path, index_path, legacy=legacy, keys=keys)
    with SegmentIndexFile(index_path, legacy=legacy) as index:
        count, start, shifted = index.count, index.data_start, bool(index.shifts)
    if shifted:  # entries off the 24-byte grid (the original's crash shape): follow the index entry by entry
        return _streamed_time_range(records_path, index_path, legacy=legacy, keys=keys)
    if count == 0:
        return None, None
    # Only whole entries: a partial last entry is not committed.
    entries = np.memmap(index_path, dtype=ENTRY_DTYPE, mode="r", offset=start, shape=(count,))
    positions_all = entries["position"]
    # One open: a backup compressing the segment meanwhile renames a new file in, this one stays whole.
    with open(records_path, "rb") as handle:
        if is_framed(handle.read(4)):
            fd = handle.fileno()
            frames = FramedReader(lambda length, at: os.pread(fd, length, at), os.fstat(fd).st_size,
                                  file=str(records_path), keys=keys)  # fmt: skip
            return _framed_time_range(frames, np.asarray(positions_all))
        records = np.memmap(handle, dtype=np.uint8, mode="r")
        low: int | None = None
        high: int | None = None
        for begin in range(0, len(positions_all), 1 << 20):
            positions = np.asarray(positions_all[begin : begin + (1 << 20)])
            low, high = widen_time_range(records[positions[:, None] + TYPE_AND_TIMESTAMP_AT], low, high)
    return low, high


def _framed_time_range(frames: FramedReader, positions: np.ndarray) -> tuple[int | None, int | None]:
    """The time range of a compressed segment: each frame decompressed once, fields gathered with numpy; the few
    records whose 12 bytes cross a frame boundary read one by one."""
    size = frames.table.frame_size
    starts = positions.astype(np.int64) + 8
    first = starts // size
    last = (starts + 11) // size
    low: int | None = None
    high: int | None = None
    for number in np.unique(first):
        lo, hi = np.searchsorted(first, number, "left"), np.searchsorted(first, number, "right")
        plain = np.frombuffer(frames.frame(int(number)), dtype=np.uint8)
        here = starts[lo:hi]
        inside = last[lo:hi] == number
        within = here[inside] - int(number) * size
        low, high = widen_time_range(plain[within[:, None] + np.arange(12)], low, high)
        for at in here[~inside]:
            fields = np.frombuffer(frames.pread(12, int(at)), dtype=np.uint8).reshape(1, 12)
            low, high = widen_time_range(fields, low, high)
    return low, high


def _streamed_time_range(
    records_path: Location, index_path: Location, *, legacy: bool, keys: KeyRing
) -> tuple[int | None, int | None]:
    low: int | None = None
    high: int | None = None
    for record in iter_segment(records_path, index_path, legacy=legacy, keys=keys):
        if record.timestamp_type in (0, 1) and record.timestamp is not None:
            low = record.timestamp if low is None else min(low, record.timestamp)
            high = record.timestamp if high is None else max(high, record.timestamp)
    return low, high


def describe_segment(reader: PartitionReader, index: int) -> SegmentEntry:
    """Describe segment ``index`` of a partition from its index, its bytes and their checksums."""
    segment = reader.segments[index]
    records_path, index_path = reader.segment_paths(segment)
    with SegmentIndexFile(index_path, legacy=reader.legacy) as segment_index:
        count = segment_index.count
        first = segment_index.entry(0).offset if count else None
        last = segment_index.entry(count - 1).offset if count else None
    low, high = (
        segment_time_range(records_path, index_path, legacy=reader.legacy, keys=reader.keys) if count else (None, None)
    )
    records_crc, records_size = file_crc32c(records_path)
    index_crc, index_size = file_crc32c(index_path)
    stored = open_records(records_path, reader.keys)
    try:
        framed = stored if isinstance(stored, FramedHandle) else None
        compression = (
            (framed.codec, framed.size, framed.frames.table.frames, framed.frames.key_id)
            if framed
            else (None, None, None, None)
        )
    finally:
        stored.close()
    return SegmentEntry(
        name=segment.name,
        start_offset=segment.start_offset,
        first_offset=first,
        last_offset=last,
        records=count,
        min_timestamp=low,
        max_timestamp=high,
        records_bytes=records_size,
        index_bytes=index_size,
        records_crc32c=records_crc,
        index_crc32c=index_crc,
        compression=compression[0],
        plain_bytes=compression[1],
        frames=compression[2],
        key_id=compression[3],
    )


def build_partition_catalog(
    topic_dir: Location, partition: int, *, legacy: bool = False, keys: KeyRing = NO_KEYS
) -> PartitionCatalog:
    """A catalog of the partition's finished segments: every segment but the last.

    The last segment is the one a backup still appends to; it joins the
    catalog when the next segment is started.
    """
    reader = PartitionReader(topic_dir, partition, legacy=legacy, keys=keys)
    entries = tuple(describe_segment(reader, i) for i in range(len(reader.segments) - 1))
    tail = describe_tail(reader) if reader.segments else None
    return PartitionCatalog(topic_dir.name, partition, entries, tail)


def describe_tail(reader: PartitionReader) -> TailEntry:
    """The last segment's indexed prefix as it is now: its records up to the last index entry, and their checksums."""
    segment = reader.segments[-1]
    records_path, index_path = reader.segment_paths(segment)
    with SegmentIndexFile(index_path, legacy=reader.legacy) as index:
        count = index.count
        first = index.entry(0).offset if count else None
        last = index.entry(count - 1).offset if count else None
        records_end = index.entry(count - 1).end if count else index.data_start
        index_end = index.data_start + count * ENTRY_SIZE
    records_crc, records_size = prefix_crc32c(records_path, records_end, reader.keys)
    index_crc, _ = prefix_crc32c(index_path, index_end)
    if records_size < records_end:
        raise FormatError(f"truncated: {records_size} bytes, its index needs {records_end}", file=str(records_path))
    return TailEntry(segment.name, first, last, count, records_end, index_end, records_crc, index_crc)


def rebuild_catalog(
    root: Location, topics: list[str], *, legacy: bool = False, progress: bool = False, keys: KeyRing = NO_KEYS
) -> list[PartitionCatalog]:
    """Write the catalog of every partition of ``topics`` anew from the files."""
    written = []
    partitions = [(topic, partition) for topic in topics for partition in list_partitions(root / topic)]
    with Progress("catalog rebuild", len(partitions), "partitions", enabled=progress) as shown:
        for topic, partition in partitions:
            catalog = build_partition_catalog(root / topic, partition, legacy=legacy, keys=keys)
            write_catalog(root, catalog)
            written.append(catalog)
            shown.advance(note=f"{topic}/{partition}")
    return written


def file_size(path: Location) -> int | None:
    return storage_for(path).size(path)


def catch_up_catalog(
    root: Location,
    topic_dir: Location,
    partition: int,
    *,
    newest_too: bool = False,
    read_from: int | None = None,
    keys: KeyRing = NO_KEYS,
) -> int:
    """Add every finished segment the partition's catalog does not name yet; return how many.

    Called by the backup's writer after it starts a new segment, so the
    segments it adds are synced and will not change (see formats/catalog.md);
    ``newest_too`` after it sealed the newest one (whose recorded prefix then goes); ``keys``: the writer's, which
    its sealed segments are described with.
    """
    reader = PartitionReader(topic_dir, partition, keys=keys)
    topic = topic_dir.name
    catalog = read_catalog(root, topic, partition, expected=True) or PartitionCatalog(topic, partition)
    named = {entry.name for entry in catalog.segments}
    finished = len(reader.segments) if newest_too else len(reader.segments) - 1
    added = [describe_segment(reader, i) for i in range(finished) if reader.segments[i].name not in named]
    stale_tail = bool(newest_too and reader.segments and catalog.tail and catalog.tail.name == reader.segments[-1].name)
    known = catalog.read_from if catalog.read_from is not None else read_from  # see PartitionCatalog.read_from
    if added or stale_tail or known != catalog.read_from:
        entries = sorted((*catalog.segments, *added), key=lambda entry: entry.start_offset)
        tail = None if stale_tail else catalog.tail
        write_catalog(root, replace(catalog, segments=tuple(entries), tail=tail, read_from=known))
    return len(added)
