"""Rebuilding a segment index or a partition index from the records files.

The counterpart of the original's ``segment-index.sh --restore-index`` and
``partition-index.sh --restore-index``. Both are non-destructive to record
data: they read records files and replace only index files, atomically, so a
crash during a rebuild leaves the old index or the new one.

A records file whose tail cannot be decoded (a torn last record, garbage)
gets an index covering the records before it; the report says where the
undecodable bytes start so the operator can decide what to do with them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from kbackup.errors import FormatError
from kbackup.format.magic import MAGIC_V1, check_magic
from kbackup.format.partition_index import PartitionIndexEntry, encode_partition_index
from kbackup.format.segment_index import ENTRY
from kbackup.fsutil import TMP_SUFFIX, atomic_write, fsync_dir
from kbackup.partition.layout import list_segment_files, partition_index_path
from kbackup.partition.segment_reader import stream_records
from kbackup.storage import as_local


@dataclass(frozen=True)
class SegmentRebuild:
    """What a segment index rebuild found."""

    index_path: Path
    record_count: int
    first_offset: int | None
    last_offset: int | None
    #: Where undecodable bytes start in the records file, or ``None``.
    bad_tail_position: int | None
    bad_tail_reason: str | None


def rebuild_segment_index(records_path: Path, index_path: Path, *, legacy: bool = False) -> SegmentRebuild:
    """Write ``index_path`` anew from the records in ``records_path``."""
    with open(records_path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        start = check_magic(handle.read(1), file=str(records_path), legacy=legacy)
        tmp = index_path.with_name(f".{index_path.name}.{os.getpid()}{TMP_SUFFIX}")
        count = 0
        first = last = None
        bad_at: int | None = None
        reason: str | None = None
        end = start
        with open(tmp, "wb") as out:
            if start:
                out.write(MAGIC_V1)
            pending = bytearray()
            try:
                for record, position, length in stream_records(handle, start, size, file=str(records_path)):
                    if last is not None and record.offset <= last:
                        raise FormatError(
                            "record offsets must increase",
                            file=str(records_path),
                            position=position,
                            expected=f"an offset > {last}",
                            found=str(record.offset),
                        )
                    pending += ENTRY.pack(record.offset, position, length)
                    if len(pending) >= 1 << 20:
                        out.write(pending)
                        pending.clear()
                    first = record.offset if first is None else first
                    last = record.offset
                    count += 1
                    end = position + length
            except FormatError as exc:
                bad_at = end
                reason = str(exc)
            out.write(pending)
            out.flush()
            os.fsync(out.fileno())
    os.replace(tmp, index_path)
    fsync_dir(index_path.parent)
    return SegmentRebuild(index_path, count, first, last, bad_at, reason)


def rebuild_partition_index(topic_dir: Path, partition: int) -> list[PartitionIndexEntry]:
    """Write the partition index anew from the segment records files present.

    Each segment's start offset is the one in its file name, as the original
    does; a segment whose records file is missing is left out.
    """
    entries = [
        PartitionIndexEntry(files.records.name[: -len("_records")], files.start_offset)
        for files in list_segment_files(topic_dir, partition)
        if as_local(files.records).exists()
    ]
    atomic_write(as_local(partition_index_path(topic_dir, partition)), encode_partition_index(entries))
    return entries
