"""Kafka records in Arrow batches into kafka-backup v1 files: the work of one backup task (executor side).

:class:`BatchFiles` takes batches of the Kafka source schema (``key``, ``value``, ``topic``, ``partition``,
``offset``, ``timestamp``, ``timestampType``, ``headers``), encodes each run of one partition's rows as a whole
and appends it to that partition's writer, placed by offset: a record already stored is skipped, not written again.
:meth:`BatchFiles.finish` syncs every partition it touched and says what it did, one :class:`PartitionWrite` each.

It runs in the ``kbackup_v1`` sink's tasks, and in the ``kbackup_kafka`` source's tasks when the source writes the
files itself (``writeTo``): what such a task hands on is not records but :data:`WRITES_SCHEMA`, one row per
partition written, which the sink turns back into :class:`PartitionWrite` (:func:`writes_batch`,
:func:`writes_from_batch`).
"""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from spark_kafka_backup.catalog.ledger import CatalogLedger
from spark_kafka_backup.errors import InvalidRecordError, UsageError
from spark_kafka_backup.format.record_columns import EncodedRecords, encode_columns
from spark_kafka_backup.partition.object_writer import ObjectPartitionWriter, open_partition_writer
from spark_kafka_backup.partition.writer import PartitionWriter
from spark_kafka_backup.schema_registry.wire_columns import wire_schema_ids
from spark_kafka_backup.spark.sink_options import SinkOptions
from spark_kafka_backup.storage import parse_location

AnyWriter = PartitionWriter | ObjectPartitionWriter

#: Partitions a task keeps open at once. A task packing hundreds of small partitions (see the source's "Tasks")
#: closes the least recently written one to open another: bounded descriptors and memory, and on an object store
#: a partition reopened in the same task publishes one more segment.
MAX_OPEN_PARTITIONS = 32


@dataclass
class PartitionWrite:
    """What one task did to one partition."""

    topic: str
    partition: int
    first_offset: int
    last_offset: int
    written: int = 0
    skipped: int = 0
    bytes: int = 0
    #: Seconds this task waited for the partition's lock (held by an earlier attempt, e.g. a lost executor's).
    lock_wait: float = 0.0
    #: The schema ids the keys and values written name (the sink's ``schemaIds`` option; ascending).
    schema_ids: tuple[int, ...] = ()


#: What a task that wrote the files itself hands on: one row per partition (a :class:`PartitionWrite`), and the
#: backup root it wrote to, which the sink checks against its own path.
WRITES_SCHEMA = pa.schema(
    [
        ("root", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("first_offset", pa.int64()),
        ("last_offset", pa.int64()),
        ("written", pa.int64()),
        ("skipped", pa.int64()),
        ("bytes", pa.int64()),
        ("lock_wait", pa.float64()),
        ("schema_ids", pa.list_(pa.int64())),
    ]
)


def writes_batch(root: str, writes: list[PartitionWrite]) -> pa.RecordBatch:
    """The rows of :data:`WRITES_SCHEMA` for what one task wrote under ``root``."""
    columns: dict[str, list[object]] = {"root": [root] * len(writes)}
    for name in WRITES_SCHEMA.names[1:]:
        columns[name] = [getattr(write, name) for write in writes]
    return pa.RecordBatch.from_pydict(columns, schema=WRITES_SCHEMA)


def writes_from_batch(batch: pa.RecordBatch, root: str) -> list[PartitionWrite]:
    """The :class:`PartitionWrite` rows of ``batch``; refused when they were written under another root."""
    rows = batch.to_pylist()
    for row in rows:
        if not _same_root(row["root"], root):
            raise UsageError(
                f"the source wrote {row['topic']}/{row['partition']} to {row['root']!r}, but the sink's path is "
                f"{root!r}: give the source's writeTo the sink's path"
            )
    return [
        PartitionWrite(**{name: row[name] for name in WRITES_SCHEMA.names[1:-1]}, schema_ids=tuple(row["schema_ids"]))
        for row in rows
    ]


def _same_root(written: str, root: str) -> bool:
    """Whether two spellings of a backup root are the same place (a local path as resolved here)."""
    if written == root:
        return True
    a, b = parse_location(written), parse_location(root)
    if isinstance(a, Path) and isinstance(b, Path):
        return a.resolve() == b.resolve()
    return str(a) == str(b)


class RunCheck(Protocol):
    """What is checked before a run of one partition's records is written (behind Spark's Kafka source)."""

    def new_batch(self) -> None: ...

    def same_incarnation(self, topic: str) -> bool: ...

    def gaps(self, topic: str, partition: int, stored: int | None, offsets: npt.NDArray[np.int64]) -> None: ...


class BatchFiles:
    """One task's writers: batches in (:meth:`write`), every partition synced and accounted (:meth:`finish`).

    On any failure call :meth:`abandon`: what was appended but not synced is repaired when the partition is next
    opened.
    """

    def __init__(self, options: SinkOptions, encryption_key: bytes | None, check: RunCheck | None = None) -> None:
        self.options = options
        self._encryption_key = encryption_key
        self._check = check
        self._writers: dict[tuple[str, int], AnyWriter] = {}
        self._stats: dict[tuple[str, int], PartitionWrite] = {}
        self._schema_ids: dict[tuple[str, int], set[int]] = {}

    def write(self, batch: pa.RecordBatch) -> None:
        """Encode each run of one partition's rows as a whole and hand it to that partition's writer."""
        n = batch.num_rows
        if not n:
            return
        if self._check is not None:
            self._check.new_batch()
        topics = batch.column("topic")
        partitions = batch.column("partition").to_numpy(zero_copy_only=False)
        offsets = batch.column("offset").to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        types, millis = v1_timestamps(batch.column("timestampType"), batch.column("timestamp"))
        keys, values, headers = batch.column("key"), batch.column("value"), batch.column("headers")
        runs = partition_runs(topics, partitions)
        whole: EncodedRecords | None = None
        if len(runs) > 1:
            # Many small runs (a packed task's partitions): Arrow's fixed cost paid once, not once per partition.
            with contextlib.suppress(InvalidRecordError):  # then each run alone, where its error names the record
                whole = encode_columns(offsets, types, millis, keys, values, headers)
        for start, stop in runs:
            key = (str(topics[start].as_py()), int(partitions[start]))
            writer = self._writer(key, int(offsets[start]))
            size = stop - start
            if self._check is not None:  # before the records are written
                if not self._check.same_incarnation(key[0]):
                    continue
                self._check.gaps(key[0], key[1], writer.last_offset, offsets[start:stop])
            try:
                encoded = whole.slice(start, stop) if whole is not None else encode_columns(
                    offsets[start:stop],
                    types[start:stop],
                    millis[start:stop],
                    keys.slice(start, size),
                    values.slice(start, size),
                    headers.slice(start, size),
                )  # fmt: skip
            except InvalidRecordError as error:  # the offset alone does not say which of a task's partitions
                raise InvalidRecordError(f"topic {key[0]!r} partition {key[1]}: {error}") from error
            written, skipped = writer.append_batch(encoded)
            if self.options.schema_ids:
                found = self._schema_ids.setdefault(key, set())
                found.update(wire_schema_ids(keys.slice(start, size)).tolist())
                found.update(wire_schema_ids(values.slice(start, size)).tolist())
            stat = self._stats[key]
            stat.written += written
            stat.skipped += skipped
            stat.last_offset = int(offsets[stop - 1])

    def finish(self) -> list[PartitionWrite]:
        """Sync, publish and close every open partition; what each partition of the task got, in order."""
        while self._writers:
            self._close(next(iter(self._writers)))
        for key, ids in self._schema_ids.items():
            self._stats[key].schema_ids = tuple(sorted(ids))
        return sorted(self._stats.values(), key=lambda s: (s.topic, s.partition))

    def abandon(self) -> None:
        """Close every writer without syncing (a failed task)."""
        for writer in self._writers.values():
            writer.abandon()
        self._writers.clear()

    def _writer(self, key: tuple[str, int], first_offset: int) -> AnyWriter:
        writer = self._writers.pop(key, None)
        if writer is None:
            while len(self._writers) >= MAX_OPEN_PARTITIONS:
                self._close(next(iter(self._writers)))  # the least recently written
            writer = open_partition_writer(
                self.options.target / key[0],
                key[0],
                key[1],
                max_segment_size=self.options.max_segment_size,
                fsync=self.options.fsync,
                lock_timeout=self.options.lock_timeout,
                ledger=CatalogLedger(self.options.target),
                compression=self.options.compression,
                encryption_key=self._encryption_key,
            )
            if key not in self._stats:
                self._stats[key] = PartitionWrite(key[0], key[1], first_offset, first_offset)
            self._stats[key].lock_wait += writer.lock_wait
        self._writers[key] = writer  # most recently written last
        return writer

    def _close(self, key: tuple[str, int]) -> None:
        """Sync, publish and close one partition's writer."""
        writer = self._writers.pop(key)
        writer.close()
        self._stats[key].bytes += writer.appended_bytes


def partition_runs(topics: pa.Array, partitions: npt.NDArray[np.int32]) -> list[tuple[int, int]]:
    """``(start, stop)`` of each run of consecutive rows of one topic partition."""
    n = len(partitions)
    changes = partitions[1:] != partitions[:-1]
    if n > 1:
        changes |= pc.not_equal(topics.slice(1), topics.slice(0, n - 1)).to_numpy(zero_copy_only=False)
    cuts = [0, *(np.flatnonzero(changes) + 1).tolist(), n]
    return list(itertools.pairwise(cuts))


def v1_timestamps(kafka_types: pa.Array, timestamps: pa.Array) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int64]]:
    """:func:`v1_timestamp` over columns: v1 types and milliseconds (0 where a type stores none)."""
    kinds = kafka_types.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int32)
    micros_column = timestamps.cast(pa.int64())
    present = micros_column.is_valid().to_numpy(zero_copy_only=False)
    micros = micros_column.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    create = (kinds == 0) & present & (micros != -1000)
    create_null = (kinds == 0) & ~create
    append = (kinds == 1) & present
    types = np.full(len(kinds), -1, dtype=np.int32)
    types[create] = 0
    types[create_null] = -2
    types[append] = 1
    millis = np.where(create | append, micros // 1000, 0)
    return types, millis


def v1_timestamp(kafka_type: int, micros: int | None) -> tuple[int, int | None]:
    """Kafka's timestamp type and Spark's timestamp (microseconds) -> v1 type and milliseconds.

    A CreateTime record without a timestamp (Kafka's -1) becomes type -2, as
    the original tool writes it.
    """
    if kafka_type == 0:
        if micros is None or micros == -1000:
            return -2, None
        return 0, micros // 1000
    if kafka_type == 1 and micros is not None:
        return 1, micros // 1000
    return -1, None
