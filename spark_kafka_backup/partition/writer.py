"""Appending records of one Kafka partition to v1 segment files, crash-safely.

Placement is idempotent by offset: a record whose offset is already stored
is a no-op when its bytes are identical and an :class:`OffsetConflictError`
when they differ; an offset below the last stored one that is not stored (it
would fall inside a gap) is a :class:`PlacementError`. So replaying a batch
after a crash is harmless.

Lifecycle::

    writer = PartitionWriter(topic_dir, topic, partition)   # opens, locks, repairs the tail
    writer.append(record) ...                              # buffered in memory
    writer.append_batch(encoded)                           # the same for a columnar batch
    writer.flush()      # buffers -> OS page cache: survives kill -9 of this process
    writer.sync()       # flush + fsync: survives power loss; call before acknowledging
    writer.close()      # sync + unlock

Durability, in order of the bytes on disk:

1. A new segment is created whole before it is used: its index file and then
   its records file are each written as a temporary file holding the magic
   byte, fsynced and renamed into place; the directory is fsynced; then the
   segment's partition index entry is appended and fsynced. Only then does a
   record go into it.
2. ``flush`` writes a segment's buffered record bytes before the index entries
   that point at them. ``sync`` fsyncs the records file before the index file.
   A segment is synced completely before the next one is created.
3. An index entry is the commit of its record: readers only yield indexed
   records, and reopening keeps exactly the records that are indexed and
   verified, truncating everything else at the tail.

Reopening (the constructor) repairs what a crash at any instruction can leave:
a partial trailing partition index entry (truncated); empty segment files
that never got their partition index entry (removed); a partial trailing
index entry, index entries whose record bytes did not reach the disk, and
record bytes with no index entry, torn or whole (all truncated back to the
last record whose entry and bytes agree). The check costs a few reads at the
tail, not a scan: earlier entries were made durable by an earlier ``sync``
(:mod:`spark_kafka_backup.partition.tail_repair`). Replayed records are compared with what is stored by
:mod:`spark_kafka_backup.partition.replay`.

One writer per partition at a time: the partition index file is locked with
``flock`` while a writer is open (a second writer fails at once;
:mod:`spark_kafka_backup.partition.lock`). ``flock`` is reliable on local disks only.
"""

from __future__ import annotations

import bisect
import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import NoReturn

import crc32c
import numpy as np

from spark_kafka_backup.errors import FormatError, PlacementError, UsageError
from spark_kafka_backup.format.magic import MAGIC_V1, check_magic
from spark_kafka_backup.format.naming import INDEX_SUFFIX, RECORDS_SUFFIX
from spark_kafka_backup.format.partition_index import PartitionIndexEntry, decode_partition_index, encode_entry
from spark_kafka_backup.format.record import Record, append_record, encode_record
from spark_kafka_backup.format.record_columns import EncodedRecords, index_entries
from spark_kafka_backup.format.segment_index import ENTRY, ENTRY_SIZE
from spark_kafka_backup.fsutil import atomic_write, disk_error, fsync_dir
from spark_kafka_backup.partition.erased import ErasedOffsets
from spark_kafka_backup.partition.layout import (
    SegmentFiles,
    check_segment_names,
    list_segment_files,
    partition_index_path,
    segment_files,
)
from spark_kafka_backup.partition.ledger import SegmentLedger, TailEntry
from spark_kafka_backup.partition.lock import lock_partition_index
from spark_kafka_backup.partition.records_file import compress_records_file, key_ring, open_records
from spark_kafka_backup.partition.replay import check_replayed, first_mismatch, increasing_runs
from spark_kafka_backup.partition.segment_reader import SegmentIndexFile
from spark_kafka_backup.partition.tail_repair import (
    Coverage,
    LocalSegmentFiles,
    holds_data,
    is_framed_file,
    load_coverage,
    local_files,
    repair_tail,
)
from spark_kafka_backup.storage import ReadHandle, as_local, confine_root
from spark_kafka_backup.storage.local import check_inside

#: spark-kafka-backup's default segment size. The original documents 1 GiB but its code
#: says ``1024 ^ 3`` (XOR in Java), which is 1027 bytes.
DEFAULT_MAX_SEGMENT_SIZE = 1 << 30

#: Buffered record bytes that trigger a write to the OS.
DEFAULT_BUFFER_SIZE = 1 << 20


class ClosingWriter:
    """``with writer:`` closes (publishes) on success and abandons on an exception."""

    def close(self) -> None:
        raise NotImplementedError

    def abandon(self) -> None:
        raise NotImplementedError

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if kind is None:
            self.close()
        else:
            self.abandon()


class PartitionWriter(ClosingWriter):
    """Appends one partition's records to v1 files under ``topic_dir``.

    ``max_segment_size`` works like the original's ``max.segment.size.bytes``:
    before each append, if the current records file (magic byte included) is
    larger than it, a new segment starts with this record. ``fsync=False``
    skips fsync calls (tests and throwaway output only). ``lock_timeout``
    is how long to wait for another writer of the partition to finish.
    ``ledger`` (the backup's catalog) is told of each segment the writer
    finishes and of the newest one's committed prefix (see
    :mod:`spark_kafka_backup.partition.ledger` and ``formats/catalog.md``).
    """

    def __init__(
        self,
        topic_dir: Path,
        topic: str,
        partition: int,
        *,
        max_segment_size: int = DEFAULT_MAX_SEGMENT_SIZE,
        fsync: bool = True,
        buffer_size: int = DEFAULT_BUFFER_SIZE,
        lock_timeout: float = 0,
        ledger: SegmentLedger | None = None,
        compression: str | None = None,
        encryption_key: bytes | None = None,
    ) -> None:
        if max_segment_size <= 0:
            raise UsageError(f"the maximum segment size must be positive, not {max_segment_size}")
        confine_root(topic_dir.parent)
        check_inside(topic_dir)  # a planted link in place of the topic directory is never written through
        self.topic_dir = topic_dir
        self.topic = topic
        self.partition = partition
        self.max_segment_size = max_segment_size
        self._ledger = ledger
        self._fsync = fsync
        #: Codec finished segments' records files are compressed with (``None``: kept plain, as the original).
        self._compression = compression
        #: Key-encryption key finished segments' records files are sealed with (``None``: not encrypted).
        self._encryption_key = encryption_key
        #: What this writer reads back of its own segments (a sealed one is read with its key).
        self._keys = key_ring(encryption_key)
        self._buffer_size = buffer_size
        self._records_buffer = bytearray()
        self._index_buffer = bytearray()
        self._records_fd: int | None = None
        self._index_fd: int | None = None
        self._records_size = 0  # logical: on disk plus buffered
        self._last_offset: int | None = None
        #: Bytes of records appended (not skipped) since opening.
        self.appended_bytes = 0
        #: The offset of the first record appended (not skipped) since opening: from there on, what this writer did
        #: not store the source skipped (READ_THROUGH in :mod:`spark_kafka_backup.partition.ledger`).
        self.first_appended: int | None = None
        self._lookup: tuple[str, SegmentIndexFile, ReadHandle, bool] | None = None
        self._replay_hint = -2  # index position of the last replayed record in the cached segment
        self._closed = False
        #: CRC32Cs of the newest segment's files as written (with a ``ledger``: recorded at close).
        self._coverage: Coverage | None = None

        created = not topic_dir.exists()
        topic_dir.mkdir(parents=True, exist_ok=True)
        if created and fsync:
            fsync_dir(topic_dir.parent)
        self._pi_path = as_local(partition_index_path(topic_dir, partition))
        if not self._pi_path.exists():
            atomic_write(self._pi_path, MAGIC_V1, sync=fsync)
        asked = time.monotonic()
        self._pi_fd = lock_partition_index(self._pi_path, timeout=lock_timeout, topic=topic, partition=partition)
        #: Seconds spent waiting for another holder of the partition's lock (0 when it was free).
        self.lock_wait = time.monotonic() - asked
        try:
            self.segments = self._load_partition_index()
            self._starts = [segment.start_offset for segment in self.segments]
            self._reconcile_segment_files()
            if ledger is not None and not self.segments:
                ledger.opening(topic, partition, has_segments=False)
            if self.segments:
                self._open_tail_segment()
                if ledger is not None and self._records_fd is not None:
                    self._coverage = self._load_coverage(ledger)
                elif ledger is not None:
                    # A sealed newest segment (seal_newest, or a backup copied from an object store): finished;
                    # cataloged again in case a kill came between sealing it and cataloging it.
                    ledger.newest_sealed(self.topic_dir, self.partition, self._keys)
                self._seal_left_plain()
            if ledger is not None:
                ledger.sealing(self.topic_dir, self.partition, encryption_key)
            #: Offsets erased on purpose: records there are passed over (spark_kafka_backup.partition.erased).
            self._erased = ledger.erased(topic, partition) if ledger is not None else ErasedOffsets()
        except BaseException:
            self._release()
            raise

    # -- public API -------------------------------------------------------

    @property
    def last_offset(self) -> int | None:
        """The highest stored (or buffered) offset, ``None`` for an empty partition."""
        return self._last_offset

    def append(self, record: Record) -> bool:
        """Place ``record`` at its offset; return ``False`` if it was already stored."""
        self._check_open()
        if self._erased and self._erased.meets(record.offset, record.offset):
            return False
        last = self._last_offset
        if last is not None and record.offset <= last:
            self._check_stored(record)
            return False
        if self._records_fd is None or self._records_size > self.max_segment_size:
            self._start_segment(record.offset)
        elif record.offset < self.segments[-1].start_offset:
            raise PlacementError(
                f"offset is below the start offset {self.segments[-1].start_offset} of the segment it would go to",
                topic=self.topic,
                partition=self.partition,
                offset=record.offset,
            )
        if self._coverage is not None and self._coverage.first_offset is None:
            self._coverage.first_offset = record.offset
        length = append_record(self._records_buffer, record)
        self._index_buffer += ENTRY.pack(record.offset, self._records_size, length)
        self._records_size += length
        self.appended_bytes += length
        self._last_offset = record.offset
        if self.first_appended is None:
            self.first_appended = record.offset
        if len(self._records_buffer) >= self._buffer_size:
            self.flush()
        return True

    def append_batch(self, batch: EncodedRecords) -> tuple[int, int]:
        """Place encoded records at their offsets, as :meth:`append` would one by one.

        Returns how many were written and how many were already stored
        (compared, byte for byte, not written again). The work is per run of
        records, not per record: the stored copies of replayed records are
        read and compared in one piece per segment, and new records go into
        the buffer in one copy per segment they land in.
        """
        self._check_open()
        written = skipped = 0
        for whole in increasing_runs(batch):
            pieces = list(self._erased.kept_pieces(whole))
            skipped += len(whole) - sum(len(piece) for piece in pieces)  # erased on purpose: not stored again
            for run in pieces:
                last = self._last_offset
                replayed = 0 if last is None else int(np.searchsorted(run.offsets, last, side="right"))
                if replayed:
                    self._check_stored_run(run.slice(0, replayed))
                    skipped += replayed
                if replayed < len(run):
                    self._append_new(run.slice(replayed, len(run)))
                    written += len(run) - replayed
        return written, skipped

    def _append_new(self, run: EncodedRecords) -> None:
        """Append records whose offsets all lie above the last stored one."""
        offsets, bounds, n = run.offsets, run.bounds, len(run)
        if self.first_appended is None and n:
            self.first_appended = int(offsets[0])
        i = 0
        while i < n:
            first = int(offsets[i])
            if self._records_fd is None or self._records_size > self.max_segment_size:
                self._start_segment(first)
            elif first < self.segments[-1].start_offset:
                raise PlacementError(
                    f"offset is below the start offset {self.segments[-1].start_offset} of the segment it would go to",
                    topic=self.topic,
                    partition=self.partition,
                    offset=first,
                )
            # Record j joins this segment while the file before it is at most max_segment_size.
            limit = self.max_segment_size - self._records_size + int(bounds[i])
            stop = i + max(1, int(np.searchsorted(bounds[i:n], limit, side="right")))
            stop = min(stop, n)
            if self._coverage is not None and self._coverage.first_offset is None:
                self._coverage.first_offset = first
            start_byte, end_byte = int(bounds[i]), int(bounds[stop])
            positions = bounds[i:stop] - start_byte + self._records_size
            self._index_buffer += index_entries(offsets[i:stop], positions, np.diff(bounds[i : stop + 1]))
            self._records_buffer += run.data[start_byte:end_byte]
            self._records_size += end_byte - start_byte
            self.appended_bytes += end_byte - start_byte
            self._last_offset = int(offsets[stop - 1])
            if len(self._records_buffer) >= self._buffer_size:
                self.flush()
            i = stop

    def _check_stored_run(self, run: EncodedRecords) -> None:
        """Raise unless every record of ``run`` (offsets at or below the last stored) is stored identically."""
        self.flush()
        offsets = run.offsets
        owners = np.searchsorted(np.asarray(self._starts, dtype=np.int64), offsets, side="right") - 1
        if owners[0] < 0:
            self._replay_mismatch(run, 0, None)
        for owner in np.unique(owners):
            rows = np.flatnonzero(owners == owner)
            self._check_in_segment(run.slice(int(rows[0]), int(rows[-1]) + 1), self.segments[int(owner)])

    def _check_in_segment(self, run: EncodedRecords, segment: PartitionIndexEntry) -> None:
        """Compare a replayed run with the stored records of one segment; raise for the first record that differs."""
        index, records = self._lookup_handles(segment)
        mismatch = first_mismatch(run, index, records)
        if mismatch is not None:
            self._replay_mismatch(run, *mismatch)

    def _replay_mismatch(self, run: EncodedRecords, row: int, stored: bytes | None) -> NoReturn:
        """Raise the error the scalar path raises for replayed record ``row`` (``stored`` None: not stored)."""
        check_replayed(
            self.topic,
            self.partition,
            int(run.offsets[row]),
            bytes(run.slice(row, row + 1).data),
            stored,
            self._last_offset,
        )
        raise AssertionError("a replay mismatch was reported for a matching record")

    def seal_newest(self) -> bool:
        """Compress (and encrypt) the newest segment as well, which ends it: a record appended later starts a new
        segment. For the end of a snapshot and a stopped continuous backup, so that no record stays plain at rest.

        A no-op (``False``) without ``compression`` or ``encryption_key``, and for a newest segment that holds no record
        or is sealed already. The segment is synced, replaced by its sealed form (temporary file fsynced, renamed,
        directory fsynced), then cataloged as finished; a kill before the catalog is caught up by the partition's next
        writer.
        """
        self._check_open()
        if (self._compression is None and self._encryption_key is None) or self._records_fd is None:
            return False
        self.sync()
        if self._records_size <= 1:
            return False
        newest = self.segments[-1]
        if self._lookup is not None and self._lookup[0] == newest.name:
            self._drop_lookup()
        self._close_segment_files()
        self._coverage = None
        compress_records_file(self.topic_dir / (newest.name + RECORDS_SUFFIX), self._compression or "none",
                              sync=self._fsync, encryption_key=self._encryption_key)  # fmt: skip
        if self._ledger is not None:
            self._ledger.newest_sealed(self.topic_dir, self.partition, self._keys, read_from=self.first_appended)
        return True

    def ensure_segment(self, start_offset: int) -> None:
        """Give an empty partition its first (empty) segment, named ``start_offset``.

        The original's reader cannot read a partition without a segment; the
        backup calls this with the partition's log-start offset. A no-op when
        the partition already has a segment.
        """
        self._check_open()
        if not self.segments:
            self._start_segment(start_offset)

    def flush(self) -> None:
        """Hand buffered bytes to the OS: records first, then their index entries."""
        self._check_open()
        if self._records_buffer:
            assert self._records_fd is not None
            assert self._index_fd is not None
            if self._coverage is not None:
                self._coverage.add(self._records_buffer, self._index_buffer)
            # A failed write (a full disk) leaves a torn tail the next writer repairs; this one is done.
            with _disk_errors(self._tail_path(RECORDS_SUFFIX), len(self._records_buffer)):
                _write_all(self._records_fd, self._records_buffer)
            self._records_buffer.clear()
            with _disk_errors(self._tail_path(INDEX_SUFFIX), len(self._index_buffer)):
                _write_all(self._index_fd, self._index_buffer)
            self._index_buffer.clear()

    def sync(self) -> None:
        """Flush, then fsync the records file and then the index file."""
        self.flush()
        if self._fsync and self._records_fd is not None and self._index_fd is not None:
            with _disk_errors(self._tail_path(RECORDS_SUFFIX), None):
                os.fsync(self._records_fd)
                os.fsync(self._index_fd)

    def close(self) -> None:
        """Sync, record the newest segment's committed prefix in the catalog, release. Idempotent."""
        if self._closed:
            return
        try:
            self.sync()
            self._record_tail()
        finally:
            self._release()

    def abandon(self) -> None:
        """Release the partition without writing what is still buffered."""
        if not self._closed:
            self._records_buffer.clear()
            self._index_buffer.clear()
            self._release()

    def __enter__(self) -> PartitionWriter:
        return self

    # -- opening and repair ------------------------------------------------

    def _load_partition_index(self) -> list[PartitionIndexEntry]:
        size = os.fstat(self._pi_fd).st_size
        data = os.pread(self._pi_fd, size, 0)
        if not data:
            # Only a hand-made empty file can be empty: spark-kafka-backup creates it atomically.
            os.pwrite(self._pi_fd, MAGIC_V1, 0)
            self._fsync_fd(self._pi_fd)
            return []
        entries, valid = decode_partition_index(data, file=str(self._pi_path), allow_torn_tail=True)
        check_segment_names(entries, file=str(self._pi_path))
        if valid < size:
            os.ftruncate(self._pi_fd, valid)
            self._fsync_fd(self._pi_fd)
        return entries

    def _reconcile_segment_files(self) -> None:
        """Match segment files on disk with the partition index after a crash."""
        last_start = self.segments[-1].start_offset if self.segments else -1
        for found in list_segment_files(self.topic_dir, self.partition):
            if found.start_offset <= last_start:
                continue
            files = local_files(found)
            # Newer than the last indexed segment: a crash during segment
            # creation. Such a segment never received a record.
            if holds_data(files.records) or holds_data(files.index):
                raise FormatError(
                    "segment holds data but is missing from the partition index "
                    f"(rebuild it with: spark-kafka-backup index rebuild {self.topic_dir} --partition "
                    f"{self.partition})",
                    file=str(files.records),
                )
            for path in (files.records, files.index):
                path.unlink(missing_ok=True)
            if self._fsync:
                fsync_dir(self.topic_dir)

    def _open_tail_segment(self) -> None:
        tail = self.segments[-1]
        files = local_files(
            SegmentFiles(
                self.partition,
                tail.start_offset,
                self.topic_dir / (tail.name + RECORDS_SUFFIX),
                self.topic_dir / (tail.name + INDEX_SUFFIX),
            )
        )
        if files.records.exists() and files.index.exists() and is_framed_file(files.records):
            last = self._last_offset_of(tail)
            if last is not None:
                # Sealed (compressed or encrypted) whole: never appended to again; the next record starts a segment.
                self._last_offset = last
                return
            # A sealed segment without records (an object store's placeholder of an empty partition, copied down):
            # plain again, to be appended to. Out of the catalog first: a kill between the two leaves a sealed
            # uncataloged placeholder, which this repeats.
            if self._ledger is not None:
                self._ledger.segment_reopened(self.topic, self.partition, tail.name)
            atomic_write(files.records, MAGIC_V1, sync=self._fsync)
        if not files.records.exists() or not files.index.exists():
            present = files.index if files.index.exists() else files.records
            if present.exists() and holds_data(present):
                missing = files.records if present == files.index else files.index
                raise FormatError(
                    "segment file is missing "
                    f"(rebuild the index with: spark-kafka-backup index rebuild {self.topic_dir} --partition "
                    f"{self.partition})",
                    file=str(missing),
                )
            # Crash between creating the segment's two files: finish creating it.
            for path in (files.index, files.records):
                if not path.exists():
                    atomic_write(path, MAGIC_V1, sync=self._fsync)
        check_inside(files.records)
        check_inside(files.index)
        self._records_fd = os.open(files.records, os.O_RDWR | os.O_NOFOLLOW)
        self._index_fd = os.open(files.index, os.O_RDWR | os.O_NOFOLLOW)
        for fd, path in ((self._records_fd, files.records), (self._index_fd, files.index)):
            head = os.pread(fd, 1, 0)
            if not head:
                os.pwrite(fd, MAGIC_V1, 0)
            else:
                check_magic(head, file=str(path))
        with SegmentIndexFile(files.index) as index:
            if index.shifts:
                start, end = index.shifts[0]
                raise FormatError(
                    f"bytes {start}..{end - 1} are a partial entry followed by more entries (the original tool's "
                    "shape after a crash); appending would misplace them: rewrite the index with "
                    f"spark-kafka-backup index rebuild {self.topic_dir} --partition {self.partition}",
                    file=str(files.index),
                )
        kept, records_end, last = self._repair_tail(files)
        os.lseek(self._records_fd, records_end, os.SEEK_SET)
        os.lseek(self._index_fd, 1 + kept * ENTRY_SIZE, os.SEEK_SET)
        self._records_size = records_end
        self._last_offset = last if last is not None else self._last_offset_before_tail()

    def _last_offset_before_tail(self) -> int | None:
        return self._last_offset_of(self.segments[-2]) if len(self.segments) > 1 else None

    def _repair_tail(self, files: LocalSegmentFiles) -> tuple[int, int, int | None]:
        """Truncate the tail segment to its last verified record (see :func:`repair_tail`)."""
        assert self._records_fd is not None
        assert self._index_fd is not None
        return repair_tail(self._records_fd, self._index_fd, files.records, fsync=self._fsync_fd)

    def _load_coverage(self, ledger: SegmentLedger) -> Coverage:
        """The newest segment's CRC32Cs as committed: from the ledger's tail, extended over newer synced bytes.

        Without a recorded tail (a segment the ledger has not seen), the files are read whole once.
        """
        assert self._records_fd is not None
        assert self._index_fd is not None
        name = self.segments[-1].name
        tail = self._ledger_tail(ledger, name)
        return load_coverage(
            self._records_fd,
            self._index_fd,
            name,
            records_end=self._records_size,
            index_end=os.lseek(self._index_fd, 0, os.SEEK_CUR),
            tail=tail,
            records_file=self.topic_dir / (name + RECORDS_SUFFIX),
        )

    def _ledger_tail(self, ledger: SegmentLedger, name: str) -> TailEntry | None:
        return ledger.committed_tail(self.topic, self.partition, name, present=[s.name for s in self.segments])

    def _record_tail(self) -> None:
        coverage = self._coverage
        if coverage is None or self._ledger is None:
            return
        records = (coverage.index_bytes - 1) // ENTRY_SIZE
        tail = TailEntry(
            name=coverage.name,
            first_offset=coverage.first_offset if records else None,
            last_offset=self._last_offset if records else None,
            records=records,
            records_bytes=coverage.records_bytes,
            index_bytes=coverage.index_bytes,
            records_crc32c=coverage.records_crc32c,
            index_crc32c=coverage.index_crc32c,
            min_timestamp=coverage.min_timestamp if coverage.times else None,
            max_timestamp=coverage.max_timestamp if coverage.times else None,
            times=coverage.times,
        )
        # The ledger syncs the catalog unless it was made for placeholders prepared many at once (then their
        # preparer syncs the file system once and marks them after; see catalog.store.write_catalog).
        self._ledger.record_tail(self.topic, self.partition, tail, read_from=self.first_appended)

    def _last_offset_of(self, segment: PartitionIndexEntry) -> int | None:
        with SegmentIndexFile(self.topic_dir / (segment.name + INDEX_SUFFIX)) as index:
            return index.entry(index.count - 1).offset if index.count else None

    # -- appending ----------------------------------------------------------

    def _start_segment(self, start_offset: int) -> None:
        if self.segments and start_offset <= self.segments[-1].start_offset:
            raise PlacementError(
                f"a new segment must start after the last one ({self.segments[-1].start_offset})",
                topic=self.topic,
                partition=self.partition,
                offset=start_offset,
            )
        self.sync()
        self._close_segment_files()
        files = local_files(segment_files(self.topic_dir, self.partition, start_offset))
        atomic_write(files.index, MAGIC_V1, sync=self._fsync)
        atomic_write(files.records, MAGIC_V1, sync=self._fsync)
        entry = PartitionIndexEntry(files.records.name[: -len(RECORDS_SUFFIX)], start_offset)
        os.lseek(self._pi_fd, 0, os.SEEK_END)
        with _disk_errors(self._pi_path, len(encode_entry(entry))):
            _write_all(self._pi_fd, encode_entry(entry))
            self._fsync_fd(self._pi_fd)
        self.segments.append(entry)
        self._starts.append(start_offset)
        self._records_fd = os.open(files.records, os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW)
        self._index_fd = os.open(files.index, os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW)
        self._records_size = 1
        if self._ledger is not None:
            magic_crc = crc32c.crc32c(MAGIC_V1)
            self._coverage = Coverage(entry.name, magic_crc, 1, magic_crc, 1, None)
        if (self._compression is not None or self._encryption_key is not None) and len(self.segments) > 1:
            # The previous segment is synced and no longer the newest (a reopened writer never appends to it):
            # its records file is replaced by its compressed form, whole, before the ledger describes it.
            self._seal_previous()
        if self._ledger is not None and len(self.segments) > 1:
            # The previous segment is synced and, now that a newer one exists,
            # finished: the ledger may account for it (and any it missed after a crash).
            self._ledger.segments_finished(self.topic_dir, self.partition, self._keys, read_from=self.first_appended)

    def _seal_previous(self) -> None:
        """Compress (and seal) the segment before the newest one: synced and no longer appended to."""
        previous = self.segments[-2]
        if self._lookup is not None and self._lookup[0] == previous.name:
            self._drop_lookup()
        compress_records_file(self.topic_dir / (previous.name + RECORDS_SUFFIX), self._compression or "none",
                              sync=self._fsync, encryption_key=self._encryption_key)  # fmt: skip

    def _seal_left_plain(self) -> None:
        """A writer killed between starting a segment and sealing the one before leaves that one plain: sealed now,
        unless the catalog already accounts for it plain (a backup switched to compression or encryption keeps its older
        plain segments)."""
        if (self._compression is None and self._encryption_key is None) or len(self.segments) < 2:
            return
        previous = self.segments[-2]
        if self._ledger is not None and previous.name in self._ledger.accounted(self.topic, self.partition):
            return
        if is_framed_file(self.topic_dir / (previous.name + RECORDS_SUFFIX)):
            return
        self._seal_previous()
        if self._ledger is not None:
            self._ledger.segments_finished(self.topic_dir, self.partition, self._keys, read_from=self.first_appended)

    def _check_stored(self, record: Record) -> None:
        """Raise unless ``record`` is stored with identical bytes."""
        self.flush()
        at = bisect.bisect_right(self._starts, record.offset) - 1
        stored: bytes | None = None
        if at >= 0:
            index, records = self._lookup_handles(self.segments[at])
            # A replay is sequential: try the entry after the last one found before searching.
            position = self._replay_hint + 1
            if not (0 <= position < index.count and index.entry(position).offset == record.offset):
                position = index.bisect(record.offset)
            if position < index.count:
                entry = index.entry(position)
                if entry.offset == record.offset:
                    self._replay_hint = position
                    size = records.refresh_size()
                    inside = entry.position >= 0 and 0 < entry.length <= size - entry.position
                    # An entry pointing outside the records file (a damaged index) matches no record.
                    stored = records.pread(entry.length, entry.position) if inside else b""
        check_replayed(self.topic, self.partition, record.offset, encode_record(record), stored, self._last_offset)

    def _lookup_handles(self, segment: PartitionIndexEntry) -> tuple[SegmentIndexFile, ReadHandle]:
        """Open (or reuse) read handles on a segment for replay checks.

        The tail segment keeps growing, so its entry count is refreshed on reuse; so is a segment that was the tail
        when it was opened here (it took records after that, then a roll made it finished).
        """
        cached = self._lookup
        if cached is not None and cached[0] == segment.name:
            if segment is self.segments[-1] or cached[3]:
                cached[1].refresh()
                self._lookup = (*cached[:3], segment is self.segments[-1])
            return cached[1], cached[2]
        self._drop_lookup()
        self._replay_hint = -2
        index = SegmentIndexFile(self.topic_dir / (segment.name + INDEX_SUFFIX))
        records = open_records(self.topic_dir / (segment.name + RECORDS_SUFFIX), self._keys)  # plain or compressed
        self._lookup = (segment.name, index, records, segment is self.segments[-1])
        return index, records

    def _drop_lookup(self) -> None:
        if self._lookup is not None:
            self._lookup[1].close()
            self._lookup[2].close()
            self._lookup = None

    # -- plumbing -----------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"writer for {self.topic}/{self.partition} is closed")

    def _tail_path(self, suffix: str) -> Path:
        return self.topic_dir / f"{self.segments[-1].name}{suffix}"

    def _fsync_fd(self, fd: int) -> None:
        if self._fsync:
            os.fsync(fd)

    def _close_segment_files(self) -> None:
        for fd in (self._records_fd, self._index_fd):
            if fd is not None:
                os.close(fd)
        self._records_fd = self._index_fd = None

    def _release(self) -> None:
        self._closed = True
        self._drop_lookup()
        self._close_segment_files()
        try:
            fcntl.flock(self._pi_fd, fcntl.LOCK_UN)
        finally:
            os.close(self._pi_fd)


@contextlib.contextmanager
def _disk_errors(path: Path, writing: int | None) -> Iterator[None]:
    """Turn an I/O error on ``path`` into the one-line :class:`~spark_kafka_backup.errors.StorageError`."""
    try:
        yield
    except OSError as exc:
        raise disk_error(exc, path, writing=writing) from exc


def _write_all(fd: int, data: bytes | bytearray) -> None:
    # Views are released even when a write fails: the buffer is cleared afterwards, which an export would forbid.
    with memoryview(data) as whole:
        done = 0
        while done < len(whole):
            with whole[done:] as rest:
                done += os.write(fd, rest)
