"""Writing one Kafka partition to an object store, where nothing is appended or renamed.

Each task's records for a partition are first written to a local spool (a
:class:`~spark_kafka_backup.partition.writer.PartitionWriter` in a temporary directory,
rolling segments at ``max_segment_size`` as on disk), then published at
:meth:`ObjectPartitionWriter.close`::

    1. upload each new segment's records object, then its index object (whole PUTs)
    2. replace the partition index object: the old entries plus the new segments
    3. tell the ledger (the backup's catalog): the old entries plus the new segments

So every segment on the store is written once and never changes, and a
micro-batch starts new segments rather than continuing old ones (choose a
trigger interval that makes batches worth a segment). The partition index
is the commit point, as on disk: readers only use segments it names.

Crash at any point: before step 2 the new objects are unreferenced orphans
(the batch is not committed, Spark replays it, and the next writer of the
partition deletes orphans above the last named segment before it writes);
between 2 and 3 the catalog lags the partition index, which ``verify`` reports
as a note and the next publish repairs (it adds every named segment the
catalog lacks). Replayed records (offset at or below the last stored one) are
compared with the stored bytes, as on disk.

There is no lock on an object store: run one backup per target, with Spark
speculation off.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from spark_kafka_backup.errors import PlacementError
from spark_kafka_backup.format.naming import INDEX_SUFFIX, RECORDS_SUFFIX
from spark_kafka_backup.format.partition_index import PartitionIndexEntry, encode_partition_index
from spark_kafka_backup.format.record import Record, encode_record
from spark_kafka_backup.format.record_columns import EncodedRecords
from spark_kafka_backup.partition.erased import ErasedOffsets
from spark_kafka_backup.partition.layout import list_segment_files, partition_index_path
from spark_kafka_backup.partition.ledger import SegmentLedger
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.records_file import compress_records_file, key_ring
from spark_kafka_backup.partition.replay import check_replayed, increasing_runs
from spark_kafka_backup.partition.writer import DEFAULT_MAX_SEGMENT_SIZE, ClosingWriter, PartitionWriter
from spark_kafka_backup.storage import Location, ObjectPath, exists, storage_for, write_whole

#: Where spools go (default: the system temporary directory).
SPOOL_DIR_ENV = "KBACKUP_SPOOL_DIR"


class ObjectPartitionWriter(ClosingWriter):
    """Appends one partition's records to v1 objects under ``topic_dir`` (see the module docstring).

    Same surface as :class:`PartitionWriter`: ``append``, ``ensure_segment``,
    ``close`` (publish) and ``abandon`` (drop the spool, publish nothing).
    """

    def __init__(
        self,
        topic_dir: ObjectPath,
        topic: str,
        partition: int,
        *,
        max_segment_size: int = DEFAULT_MAX_SEGMENT_SIZE,
        ledger: SegmentLedger | None = None,
        compression: str | None = None,
        encryption_key: bytes | None = None,
    ) -> None:
        self.topic_dir = topic_dir
        self._encryption_key = encryption_key
        #: What this writer reads back of its own objects (a sealed one is read with its key).
        self._keys = key_ring(encryption_key)
        #: Codec every uploaded records object is compressed with (``None``: plain, as the original).
        self._compression = compression
        self.topic = topic
        self.partition = partition
        self.max_segment_size = max_segment_size
        self._ledger = ledger
        self._storage = storage_for(topic_dir)
        self.appended_bytes = 0
        #: No lock on an object store (see the module docstring): never waits.
        self.lock_wait = 0.0
        self._segments: list[PartitionIndexEntry] = []
        self._stored_last: int | None = None
        if exists(partition_index_path(topic_dir, partition)):
            stored = PartitionReader(topic_dir, partition, keys=self._keys)
            self._segments, self._stored_last = stored.segments, stored.last_offset()
        self._last_offset = self._stored_last
        #: As :attr:`PartitionWriter.first_appended`.
        self.first_appended: int | None = None
        self._remove_orphans()
        if ledger is not None:
            ledger.opening(topic, partition, has_segments=bool(self._segments))
            ledger.sealing(topic_dir, partition, encryption_key)
        #: Offsets erased on purpose: records there are passed over (spark_kafka_backup.partition.erased).
        self._erased = ledger.erased(topic, partition) if ledger is not None else ErasedOffsets()
        self._erased_passed = 0
        self._spool_root: Path | None = None
        self._spool: PartitionWriter | None = None
        self._replay: Iterator[Record] | None = None
        self._replay_next: Record | None = None
        self._closed = False

    @property
    def last_offset(self) -> int | None:
        return self._last_offset

    def append(self, record: Record) -> bool:
        """Place ``record`` at its offset; return ``False`` if it was already stored (or erased on purpose)."""
        if self._erased and self._erased.meets(record.offset, record.offset):
            return False
        if self._stored_last is not None and record.offset <= self._stored_last:
            self._check_stored(record)
            return False
        if self._last_offset is not None and record.offset <= self._last_offset:
            raise PlacementError(
                f"offset is not above the last written offset {self._last_offset}",
                topic=self.topic,
                partition=self.partition,
                offset=record.offset,
            )
        spool = self._open_spool()
        before = spool.appended_bytes
        spool.append(record)
        self.appended_bytes += spool.appended_bytes - before
        self._last_offset = record.offset
        if self.first_appended is None:
            self.first_appended = record.offset
        return True

    def append_batch(self, batch: EncodedRecords) -> tuple[int, int]:
        """Place encoded records at their offsets; how many were written and how many already stored.

        New records go to the spool in one piece; replayed ones (at or below
        the last published offset, which only a batch replayed after a crash
        holds) are compared with the stored records one by one.
        """
        written = skipped = 0
        passed = self._erased_passed
        for run in self._kept_runs(batch):
            stored_last = self._stored_last
            replayed = 0 if stored_last is None else int(np.searchsorted(run.offsets, stored_last, side="right"))
            for row in range(replayed):
                self._check_stored_bytes(int(run.offsets[row]), bytes(run.slice(row, row + 1).data))
            skipped += replayed
            if replayed == len(run):
                continue
            fresh = run.slice(replayed, len(run))
            if self._last_offset is not None and fresh.offsets[0] <= self._last_offset:
                raise PlacementError(
                    f"offset is not above the last written offset {self._last_offset}",
                    topic=self.topic,
                    partition=self.partition,
                    offset=int(fresh.offsets[0]),
                )
            spool = self._open_spool()
            before = spool.appended_bytes
            spool.append_batch(fresh)
            self.appended_bytes += spool.appended_bytes - before
            self._last_offset = int(fresh.offsets[-1])
            if self.first_appended is None:
                self.first_appended = int(fresh.offsets[0])
            written += len(fresh)
        return written, skipped + self._erased_passed - passed

    def _kept_runs(self, batch: EncodedRecords) -> Iterator[EncodedRecords]:
        """The batch's increasing runs without records at erased offsets (counted as already stored)."""
        for whole in increasing_runs(batch):
            kept = 0
            for piece in self._erased.kept_pieces(whole):
                kept += len(piece)
                yield piece
            self._erased_passed += len(whole) - kept

    def ensure_segment(self, start_offset: int) -> None:
        """Give an empty partition its first (empty) segment; a no-op when it has one."""
        if not self._segments and self._spool is None:
            self._open_spool().ensure_segment(start_offset)

    def close(self) -> None:
        """Publish the spooled segments (see the module docstring), then remove the spool."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._spool is not None:
                self._spool.close()
                self._publish()
        finally:
            self._drop_spool()

    def abandon(self) -> None:
        """Publish nothing; uploaded but unnamed objects are removed by the next writer."""
        self._closed = True
        if self._spool is not None:
            self._spool.abandon()
        self._drop_spool()

    def __enter__(self) -> ObjectPartitionWriter:
        return self

    # -- steps --------------------------------------------------------------

    def _remove_orphans(self) -> None:
        """Delete segments above the last named one: uploads of a publish that never reached its commit point."""
        if self._storage.list_files(self.topic_dir) is None:
            return  # nothing of this topic on the store yet
        named = {segment.name for segment in self._segments}
        last_start = self._segments[-1].start_offset if self._segments else -1
        for files in list_segment_files(self.topic_dir, self.partition):
            name = files.records.name[: -len(RECORDS_SUFFIX)]
            if files.start_offset > last_start and name not in named:
                self._storage.delete(files.records)
                self._storage.delete(files.index)

    def _open_spool(self) -> PartitionWriter:
        if self._spool is None:
            self._spool_root = Path(
                tempfile.mkdtemp(prefix="spark-kafka-backup-spool-", dir=os.environ.get(SPOOL_DIR_ENV))
            )
            self._spool = PartitionWriter(
                self._spool_root / self.topic,
                self.topic,
                self.partition,
                max_segment_size=self.max_segment_size,
                fsync=False,  # the spool is a staging area: durability comes from the upload
            )
        return self._spool

    def _publish(self) -> None:
        assert self._spool_root is not None
        spool_dir = self._spool_root / self.topic
        spool_reader = PartitionReader(spool_dir, self.partition, keys=self._keys)
        spooled = spool_reader.segments
        for segment in spooled:
            if self._compression is not None or self._encryption_key is not None:  # objects are final once uploaded
                compress_records_file(spool_dir / (segment.name + RECORDS_SUFFIX), self._compression or "none",
                                      sync=False, encryption_key=self._encryption_key)  # fmt: skip
            for suffix in (RECORDS_SUFFIX, INDEX_SUFFIX):
                self._storage.upload(self.topic_dir / (segment.name + suffix), spool_dir / (segment.name + suffix))
        # Only an empty segment can share a name with a new one (every stored record is
        # below the new offsets): the placeholder a partition gets before its first
        # record. Its records object was replaced first, so a reader never sees an
        # index entry without its bytes.
        renamed = {segment.name for segment in spooled}
        kept = [segment for segment in self._segments if segment.name not in renamed]
        if kept and spooled and kept[-1].start_offset >= spooled[0].start_offset:
            raise PlacementError(
                f"new segment {spooled[0].name} would not follow {kept[-1].name}",
                topic=self.topic,
                partition=self.partition,
                offset=spooled[0].start_offset,
            )
        self._segments = [*kept, *spooled]
        write_whole(partition_index_path(self.topic_dir, self.partition), encode_partition_index(self._segments))
        self._stored_last = self._last_offset
        if self._ledger is not None:
            self._ledger.segments_published(
                self.topic_dir, self.partition, self._segments, spool_reader, read_from=self.first_appended
            )

    def _drop_spool(self) -> None:
        self._spool = None
        if self._spool_root is not None:
            shutil.rmtree(self._spool_root, ignore_errors=True)
            self._spool_root = None

    def _check_stored(self, record: Record) -> None:
        """Raise unless ``record`` is stored with identical bytes (a replayed batch)."""
        self._check_stored_bytes(record.offset, encode_record(record))

    def _check_stored_bytes(self, offset: int, encoded: bytes) -> None:
        if self._replay is None:
            self._replay = PartitionReader(self.topic_dir, self.partition, keys=self._keys).records(from_offset=offset)
            self._replay_next = next(self._replay, None)
        while self._replay_next is not None and self._replay_next.offset < offset:
            self._replay_next = next(self._replay, None)
        stored = self._replay_next
        found = encode_record(stored) if stored is not None and stored.offset == offset else None
        check_replayed(self.topic, self.partition, offset, encoded, found, self._stored_last)


def open_partition_writer(
    topic_dir: Location,
    topic: str,
    partition: int,
    *,
    max_segment_size: int = DEFAULT_MAX_SEGMENT_SIZE,
    fsync: bool = True,
    lock_timeout: float = 0,
    ledger: SegmentLedger | None = None,
    compression: str | None = None,
    encryption_key: bytes | None = None,
) -> PartitionWriter | ObjectPartitionWriter:
    """The writer for where ``topic_dir`` lives: appending on disk, whole objects on a store."""
    if isinstance(topic_dir, ObjectPath):
        return ObjectPartitionWriter(topic_dir, topic, partition, max_segment_size=max_segment_size, ledger=ledger,
                                     compression=compression, encryption_key=encryption_key)  # fmt: skip
    return PartitionWriter(
        topic_dir,
        topic,
        partition,
        max_segment_size=max_segment_size,
        fsync=fsync,
        lock_timeout=lock_timeout,
        ledger=ledger,
        compression=compression,
        encryption_key=encryption_key,
    )
