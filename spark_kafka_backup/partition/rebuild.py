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

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from spark_kafka_backup.errors import FormatError, UsageError
from spark_kafka_backup.format.encryption import KeyRing
from spark_kafka_backup.format.magic import MAGIC_V1, check_magic
from spark_kafka_backup.format.partition_index import PartitionIndexEntry, encode_partition_index
from spark_kafka_backup.format.record import Record
from spark_kafka_backup.format.segment_index import ENTRY
from spark_kafka_backup.fsutil import TMP_SUFFIX, atomic_write, disk_error, fsync_dir, open_new_file
from spark_kafka_backup.partition.layout import list_segment_files, partition_index_path
from spark_kafka_backup.partition.merge_intent import erase_intent_path, pending_intent
from spark_kafka_backup.partition.records_file import NO_KEYS, open_records
from spark_kafka_backup.partition.segment_reader import iter_segment_entries, stream_records
from spark_kafka_backup.storage import as_local, confine_root, exists


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


def rebuild_segment_index(
    records_path: Path, index_path: Path, *, legacy: bool = False, keys: KeyRing = NO_KEYS
) -> SegmentRebuild:
    """Write ``index_path`` anew from the records in ``records_path``.

    When an index is there, it guides the rebuild as it guides every reader:
    the records it lists (each checked against its entry) are kept, bytes
    between them (a partial record, or an unindexed copy of a record, that
    the original tool left after a crash) are left out, and entries shifted
    by a partial entry come out aligned. Records after its last entry (or all
    of them, without a usable index) are found by decoding the file in order;
    a record stored twice in a row with the same bytes is indexed once, at
    its later copy (where the original indexed it).
    """
    confine_root(records_path.parent.parent)  # a records file linked out of the backup is never read
    records = open_records(records_path, keys)  # plain or compressed: its plain bytes
    with contextlib.closing(records):
        handle = records.stream
        size = records.size
        start = check_magic(handle.read(1), file=str(records_path), legacy=legacy)
        tmp = index_path.with_name(f".{index_path.name}.{os.getpid()}{TMP_SUFFIX}")
        entries = _Entries(str(records_path))
        bad_at: int | None = None
        reason: str | None = None
        end = start
        try:
            with open_new_file(tmp) as out:
                if start:
                    out.write(MAGIC_V1)
                if index_path.exists():
                    try:
                        for record, position, length in iter_segment_entries(
                            records_path, index_path, legacy=legacy, keys=keys
                        ):
                            entries.add(out, record, position, length)
                            end = position + length
                    except FormatError:
                        pass  # the old index is damaged from here on: decode the rest in order
                try:
                    for record, position, length in stream_records(handle, end, size, file=str(records_path)):
                        entries.add(out, record, position, length)
                        end = position + length
                except FormatError as exc:
                    bad_at = end
                    reason = str(exc)
                entries.flush(out)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, index_path)
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)  # no temporary file left behind (a full disk, an interrupt)
            if isinstance(exc, OSError):
                raise disk_error(exc, index_path) from exc
            raise
    fsync_dir(index_path.parent)
    return SegmentRebuild(index_path, entries.count, entries.first, entries.last_offset, bad_at, reason)


class _Entries:
    """Index entries being written, the last one held back (a repeated record replaces it)."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.count = 0
        self.first: int | None = None
        self.last: tuple[Record, int, int] | None = None
        self._pending = bytearray()

    @property
    def last_offset(self) -> int | None:
        return None if self.last is None else self.last[0].offset

    def add(self, out: BinaryIO, record: Record, position: int, length: int) -> None:
        if self.last is not None and record.offset <= self.last[0].offset:
            if record == self.last[0]:
                self.last = (record, position, length)  # the same record again: index the later copy
                return
            raise FormatError(
                "record offsets must increase",
                file=self.file,
                position=position,
                expected=f"an offset > {self.last[0].offset}",
                found=str(record.offset),
            )
        if self.last is not None:
            held, held_position, held_length = self.last
            self._pending += ENTRY.pack(held.offset, held_position, held_length)
            if len(self._pending) >= 1 << 20:
                out.write(self._pending)
                self._pending.clear()
        self.first = record.offset if self.first is None else self.first
        self.last = (record, position, length)
        self.count += 1

    def flush(self, out: BinaryIO) -> None:
        if self.last is not None:
            held, held_position, held_length = self.last
            self._pending += ENTRY.pack(held.offset, held_position, held_length)
        out.write(self._pending)
        self._pending.clear()


def rebuild_partition_index(topic_dir: Path, partition: int) -> list[PartitionIndexEntry]:
    """Write the partition index anew from the segment records files present.

    Each segment's start offset is the one in its file name, as the original
    does; a segment whose records file is missing is left out.
    """
    confine_root(topic_dir.parent)
    if exists(erase_intent_path(topic_dir.parent)):
        # Its replacements share their start offsets with the segments they replace: an index of both would be wrong.
        raise UsageError(
            f"an erase in {topic_dir.parent} did not finish: finish it first (spark-kafka-backup erase "
            f"{topic_dir.parent} --finish), then rebuild"
        )
    present = [files for files in list_segment_files(topic_dir, partition) if as_local(files.records).exists()]
    # A merge killed after writing its segment leaves it beside the segments it replaces (its records file has its
    # final name only once complete): the merged one is kept, the replaced ones named in the intent are not.
    replaced = _replaced_by_merge(topic_dir, partition, {files.name for files in present})
    entries = [PartitionIndexEntry(files.name, files.start_offset) for files in present if files.name not in replaced]
    atomic_write(as_local(partition_index_path(topic_dir, partition)), encode_partition_index(entries))
    return entries


def _replaced_by_merge(topic_dir: Path, partition: int, present: set[str]) -> set[str]:
    """The segments an unfinished merge of this partition replaces, once its merged segment is complete."""
    intent = pending_intent(topic_dir.parent)
    if (
        intent is None
        or (intent.topic, intent.partition) != (topic_dir.name, partition)
        or intent.merged not in present
    ):
        return set()
    return set(intent.segments)
