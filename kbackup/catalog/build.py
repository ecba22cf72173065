"""Describing segments for the catalog: checksums, counts, offsets and time range."""

from __future__ import annotations

import os
from pathlib import Path

import crc32c

from kbackup.catalog.model import PartitionCatalog, SegmentEntry
from kbackup.catalog.store import write_catalog
from kbackup.partition.layout import list_partitions
from kbackup.partition.reader import PartitionReader
from kbackup.partition.segment_reader import iter_segment

CHUNK = 1 << 20


def file_crc32c(path: Path) -> tuple[int, int]:
    """The CRC32C and size of a file, read in 1 MiB chunks."""
    value = 0
    size = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            value = crc32c.crc32c(chunk, value)
            size += len(chunk)
    return value, size


def describe_segment(reader: PartitionReader, index: int) -> SegmentEntry:
    """Read segment ``index`` of a partition whole and describe it."""
    segment = reader.segments[index]
    records_path, index_path = reader.segment_paths(segment)
    first = last = low = high = None
    count = 0
    for record in iter_segment(records_path, index_path, legacy=reader.legacy):
        first = record.offset if first is None else first
        last = record.offset
        count += 1
        if record.timestamp is not None:
            low = record.timestamp if low is None else min(low, record.timestamp)
            high = record.timestamp if high is None else max(high, record.timestamp)
    records_crc, records_size = file_crc32c(records_path)
    index_crc, index_size = file_crc32c(index_path)
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
    )


def build_partition_catalog(topic_dir: Path, partition: int, *, legacy: bool = False) -> PartitionCatalog:
    """A catalog of the partition's finished segments: every segment but the last.

    The last segment is the one a backup still appends to; it joins the
    catalog when the next segment is started.
    """
    reader = PartitionReader(topic_dir, partition, legacy=legacy)
    entries = tuple(describe_segment(reader, i) for i in range(len(reader.segments) - 1))
    return PartitionCatalog(topic_dir.name, partition, entries)


def rebuild_catalog(root: Path, topics: list[str], *, legacy: bool = False) -> list[PartitionCatalog]:
    """Write the catalog of every partition of ``topics`` anew from the files."""
    written = []
    for topic in topics:
        for partition in list_partitions(root / topic):
            catalog = build_partition_catalog(root / topic, partition, legacy=legacy)
            write_catalog(root, catalog)
            written.append(catalog)
    return written


def file_size(path: Path) -> int | None:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return None
