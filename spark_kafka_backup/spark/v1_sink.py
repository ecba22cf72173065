"""The backup sink: a Spark streaming writer into kafka-backup v1 files.

::

    df.writeStream.format("kbackup_v1").option("checkpointLocation", ...).start("/backups/prod")

It takes the Kafka source schema (``key``, ``value``, ``topic``, ``partition``,
``offset``, ``timestamp``, ``timestampType``, ``headers``), from this
project's source or Spark's own (with ``includeHeaders=true``), and writes
each record to ``<path>/<topic>/`` with one partition writer per Kafka
partition. ``path`` is a local directory or ``s3://bucket/prefix``; on an
object store each task publishes whole new segments when it finishes (see
:mod:`spark_kafka_backup.partition.object_writer`).

Exactly once in the files: every record is placed by its offset, so a
micro-batch replayed after a crash finds its records already stored and skips
them (an error names topic, partition and offset if the bytes differ). A task
syncs its partitions (fsync) before it returns its commit message, so when
Spark records the batch as committed, its records are durable. A failed or
killed attempt leaves at most an unsynced tail, which the next writer of the
partition repairs when it opens it: there is nothing for ``abort`` to delete.
Two attempts of the same task cannot write a partition at once: the second
waits for the first's lock.

Options: ``path`` (the backup root, required), ``maxSegmentSize`` (bytes,
default 1 GiB), ``lockTimeoutSeconds`` (default 600), ``fsync`` (default true),
``umask`` (octal), ``logFormat`` (``text`` or ``json``), ``statsDir`` (see
:func:`write_batch_stats`), ``compression`` (``none``, ``zstd``, ``lz4`` or ``gzip``: how finished segments'
records files are stored, see ``formats/compressed-records.md``), ``encryptionKeyFile`` or ``encryptionKeyEnv``
(where each task reads the key-encryption key finished segments are sealed with: a file on every executor's machine,
or a variable in every executor's environment; never the key itself, which Spark would show in its UI),
``checkSource`` (``true`` behind Spark's Kafka source, with ``kafka.*`` client settings for librdkafka: see below).

Behind Spark's Kafka source (``checkSource``), the sink does what spark-kafka-backup's own source does while reading:

- Offsets lost at the source: Spark (``failOnDataLoss=false``) skips offsets the source deleted before they were
  read. The sink looks at every gap in a partition's offsets (between its last stored record and the next, and
  between consecutive records): a gap that starts below the partition's log start now is recorded as lost at the
  source (:mod:`spark_kafka_backup.catalog.source_gaps`, ``how: inferred``) before the records after it are written.
  Transaction markers and aborted records that retention deleted after they were read may be counted among them;
  spark-kafka-backup's own source reports exactly instead.
- A topic deleted and created again: Spark reads on at the old incarnation's offsets. Before writing a run of
  records, the sink checks that the topic still has the id the backup recorded for it (``topic.json``); records
  of another incarnation are not written (an error line says so; the job refuses the topic).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSource, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from spark_kafka_backup.catalog.ledger import CatalogLedger
from spark_kafka_backup.catalog.source_gaps import INFERRED, record_gap
from spark_kafka_backup.catalog.topics import read_topic_record
from spark_kafka_backup.errors import ClusterError, FormatError, StorageError, UsageError
from spark_kafka_backup.format.json_document import parse_document
from spark_kafka_backup.format.record_columns import encode_columns
from spark_kafka_backup.fsutil import atomic_write, parse_umask, restrict_new_files
from spark_kafka_backup.kafka.client_settings import consumer_settings
from spark_kafka_backup.kafka.cluster import TopicIdAsker
from spark_kafka_backup.logsetup import ensure_console_logging
from spark_kafka_backup.partition.object_writer import ObjectPartitionWriter, open_partition_writer
from spark_kafka_backup.partition.records_file import COMPRESSIONS, load_key
from spark_kafka_backup.partition.writer import DEFAULT_MAX_SEGMENT_SIZE, PartitionWriter
from spark_kafka_backup.spark.worker_gc import freeze_loaded_objects
from spark_kafka_backup.storage import Location, parse_location

AnyWriter = PartitionWriter | ObjectPartitionWriter

log = logging.getLogger("spark_kafka_backup.sink")

SINK_NAME = "kbackup_v1"

#: Partitions a task keeps open at once. A task packing hundreds of small partitions (see the source's "Tasks")
#: closes the least recently written one to open another: bounded descriptors and memory, and on an object store
#: a partition reopened in the same task publishes one more segment.
MAX_OPEN_PARTITIONS = 32
REQUIRED_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers")


@dataclass(frozen=True)
class SinkOptions:
    target: Location
    max_segment_size: int = DEFAULT_MAX_SEGMENT_SIZE
    lock_timeout: float = 600
    fsync: bool = True
    #: The umask of the files the tasks create (None: the executor's own plus spark-kafka-backup's default).
    umask: int | None = None
    #: The job's ``--log-format`` for the batch lines the sink logs on the driver (None: text).
    log_format: str | None = None
    #: A directory on the driver's machine where each committed batch leaves ``batch-N.json`` (records and bytes
    #: written per topic) for the job's metrics (:mod:`spark_kafka_backup.backup.metrics`), which consumes them.
    stats_dir: Path | None = None
    #: Codec of finished segments' records files (None: plain v1, readable by the original tool).
    compression: str | None = None
    encryption_key_file: str | None = None
    encryption_key_env: str | None = None
    #: Behind Spark's Kafka source: record gaps below the log start as lost at the source and refuse another
    #: incarnation of a topic, asking the cluster these client settings reach (``kafka.*`` options).
    check_source: bool = False
    client: dict[str, str] = field(default_factory=dict)

    def encryption_key(self) -> bytes | None:
        """The key-encryption key, read where this runs (an executor), or ``None`` without encryption."""
        if self.encryption_key_file is None and self.encryption_key_env is None:
            return None
        return load_key(file=self.encryption_key_file, env=self.encryption_key_env)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        known = {
            "path", "maxsegmentsize", "locktimeoutseconds", "fsync", "umask", "checkpointlocation", "queryname",
            "logformat", "statsdir", "compression", "encryptionkeyfile", "encryptionkeyenv",
        }  # fmt: skip
        known.add("checksource")
        lowered = {key.lower(): value for key, value in options.items()}
        client = {key[len("kafka.") :]: value for key, value in options.items() if key.lower().startswith("kafka.")}
        for key in options:
            if key.lower() not in known and not key.lower().startswith("kafka."):
                raise UsageError(f"unknown option {key!r} for the {SINK_NAME} sink")
        if not lowered.get("path"):
            raise UsageError(f"the {SINK_NAME} sink needs a path: writeStream...start(PATH)")
        compression = lowered.get("compression", "none").lower()
        if compression not in COMPRESSIONS:
            codecs = ", ".join(COMPRESSIONS)
            raise UsageError(f"the {SINK_NAME} sink's compression is one of {codecs}, not {compression!r}")
        try:
            return cls(
                target=parse_location(lowered["path"]),
                max_segment_size=int(lowered.get("maxsegmentsize", DEFAULT_MAX_SEGMENT_SIZE)),
                lock_timeout=float(lowered.get("locktimeoutseconds", 600)),
                fsync=lowered.get("fsync", "true").lower() != "false",
                umask=parse_umask(lowered["umask"]) if "umask" in lowered else None,
                log_format=lowered.get("logformat"),
                stats_dir=Path(lowered["statsdir"]) if lowered.get("statsdir") else None,
                compression=None if compression == "none" else compression,
                encryption_key_file=lowered.get("encryptionkeyfile") or None,
                encryption_key_env=lowered.get("encryptionkeyenv") or None,
                check_source=lowered.get("checksource", "false").lower() == "true",
                client=client,
            )
        except ValueError as exc:
            raise UsageError(f"invalid option for the {SINK_NAME} sink: {exc}") from exc


#: A lock wait shorter than this is not reported (one poll of the lock: it was free, or freed at once).
LOCK_WAIT_REPORTED = 0.05


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


@dataclass
class BackupCommitMessage(WriterCommitMessage):
    partitions: list[PartitionWrite] = field(default_factory=list)


class V1Sink(DataSource):
    """``format("kbackup_v1")``: see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return SINK_NAME

    def streamWriter(self, schema: StructType, overwrite: bool) -> V1StreamWriter:
        freeze_loaded_objects()  # asked once a micro-batch, in a reused Python worker of Spark's
        missing = [name for name in REQUIRED_COLUMNS if name not in schema.fieldNames()]
        if missing:
            hint = " (set includeHeaders=true on the Kafka source)" if missing == ["headers"] else ""
            raise UsageError(f"the {SINK_NAME} sink needs the Kafka columns {', '.join(missing)}{hint}")
        return V1StreamWriter(SinkOptions.parse(self.options))


class V1StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: SinkOptions) -> None:
        self.options = options
        self._encryption_key: bytes | None = None
        self._check: SourceCheck | None = None

    def write(self, iterator: Iterator[pa.RecordBatch]) -> BackupCommitMessage:
        """Executor side: append every record, then sync each partition it touched."""
        freeze_loaded_objects()
        restrict_new_files(self.options.umask)
        self._encryption_key = self.options.encryption_key()
        if self.options.check_source:
            self._check = SourceCheck(self.options.target, self.options.client)
        writers: dict[tuple[str, int], AnyWriter] = {}
        stats: dict[tuple[str, int], PartitionWrite] = {}
        try:
            for batch in iterator:
                self._write_batch(batch, writers, stats)
            while writers:
                self._close(writers, stats, next(iter(writers)))
        except BaseException:
            for writer in writers.values():
                writer.abandon()
            raise
        finally:
            if self._check is not None:
                self._check.close()
        return BackupCommitMessage(sorted(stats.values(), key=lambda s: (s.topic, s.partition)))

    def _write_batch(
        self,
        batch: pa.RecordBatch,
        writers: dict[tuple[str, int], AnyWriter],
        stats: dict[tuple[str, int], PartitionWrite],
    ) -> None:
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
        for start, stop in partition_runs(topics, partitions):
            key = (str(topics[start].as_py()), int(partitions[start]))
            writer = writers.pop(key, None)
            if writer is None:
                while len(writers) >= MAX_OPEN_PARTITIONS:
                    self._close(writers, stats, next(iter(writers)))  # the least recently written
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
                if key not in stats:
                    stats[key] = PartitionWrite(key[0], key[1], int(offsets[start]), int(offsets[start]))
                stats[key].lock_wait += writer.lock_wait
            writers[key] = writer  # most recently written last
            size = stop - start
            if self._check is not None:  # before the records are written (see the module docstring)
                if not self._check.same_incarnation(key[0]):
                    continue
                self._check.gaps(key[0], key[1], writer.last_offset, offsets[start:stop])
            encoded = encode_columns(
                offsets[start:stop],
                types[start:stop],
                millis[start:stop],
                keys.slice(start, size),
                values.slice(start, size),
                headers.slice(start, size),
            )
            written, skipped = writer.append_batch(encoded)
            stat = stats[key]
            stat.written += written
            stat.skipped += skipped
            stat.last_offset = int(offsets[stop - 1])

    @staticmethod
    def _close(
        writers: dict[tuple[str, int], AnyWriter], stats: dict[tuple[str, int], PartitionWrite], key: tuple[str, int]
    ) -> None:
        """Sync, publish and close one partition's writer."""
        writer = writers.pop(key)
        writer.close()
        stats[key].bytes += writer.appended_bytes

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Driver side: report what the batch wrote, in one line (and one per topic at debug level)."""
        freeze_loaded_objects()  # a reused Python worker of Spark's, as on executors
        ensure_console_logging(log_format=self.options.log_format)
        per_topic: dict[str, list[int]] = {}
        partitions = 0
        longest: PartitionWrite | None = None
        for message in messages:
            for write in message.partitions if isinstance(message, BackupCommitMessage) else ():
                if write.lock_wait > (longest.lock_wait if longest else LOCK_WAIT_REPORTED):
                    longest = write
                totals = per_topic.setdefault(write.topic, [0, 0, 0])
                totals[0] += write.written
                totals[1] += write.bytes
                totals[2] += write.skipped
                partitions += 1
        for topic, (written, size, skipped) in sorted(per_topic.items()):
            log.debug("batch %d: %s: %d records, %d bytes written, %d already in the backup",
                      batchId, topic, written, size, skipped)  # fmt: skip
        written = sum(totals[0] for totals in per_topic.values())
        size = sum(totals[1] for totals in per_topic.values())
        skipped = sum(totals[2] for totals in per_topic.values())
        if per_topic:
            extra = f", {skipped:,} already in the backup" if skipped else ""
            where = f"{partitions:,} partition{'s' if partitions != 1 else ''} of {len(per_topic):,} topic" + (
                "s" if len(per_topic) != 1 else ""
            )
            log.info(
                "batch %d: %s records, %s bytes written to %s%s", batchId, f"{written:,}", f"{size:,}", where, extra
            )
        if self.options.stats_dir is not None:
            write_batch_stats(self.options.stats_dir, batchId, per_topic)
        if longest is not None:
            log.info(
                "batch %d: waited %.1f s for the lock of %s/%d, held by an earlier attempt (a lost or slow task)",
                batchId, longest.lock_wait, longest.topic, longest.partition,
            )  # fmt: skip

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        ensure_console_logging(log_format=self.options.log_format)  # a Python worker of Spark's, not the job's
        log.warning(
            "batch %d failed; what its tasks wrote but did not sync is repaired when the partition is next opened",
            batchId,
        )


#: How long the sink asks a cluster that stopped answering for a topic's id before its task fails.
SOURCE_CHECK_PATIENCE = 120.0


class SourceCheck:
    """Behind Spark's Kafka source: gaps below the log start, and topics of another incarnation (module docstring)."""

    def __init__(self, root: Location, client: Mapping[str, str]) -> None:
        self._root = root
        self._client = dict(client)
        self._consumer: Any = None
        self._ids = TopicIdAsker(client, patience=SOURCE_CHECK_PATIENCE)
        self._recorded: dict[str, str | None] = {}
        self._refused: set[str] = set()
        #: Topics confirmed since the batch being written arrived: one answer covers all its runs of a topic.
        self._confirmed: set[str] = set()

    def new_batch(self) -> None:
        """A batch arrived: its records were fetched before now, so an id asked from here on covers them all."""
        self._confirmed.clear()

    def same_incarnation(self, topic: str) -> bool:
        """Whether ``topic`` still has the id the backup recorded (asked after its records were fetched)."""
        if topic in self._refused:
            return False
        if topic in self._confirmed:
            return True
        if topic not in self._recorded:
            record = read_topic_record(self._root, topic)
            self._recorded[topic] = record.topic_id if record is not None else None
        recorded = self._recorded[topic]
        if recorded is None:
            return True  # nothing recorded yet (a topic new to the backup): the job records it and checks it
        now = self._ids.ask([topic]).get(topic)
        if now == recorded:
            self._confirmed.add(topic)
            return True
        self._refused.add(topic)
        log.error(
            "topic %r is not the one backed up here: the backup holds topic id %s, the cluster %s; its records are "
            "not written (it was deleted and created again)",
            topic, recorded, f"now has {now}" if now else "no longer has it",
        )  # fmt: skip
        return False

    def gaps(self, topic: str, partition: int, stored: int | None, offsets: npt.NDArray[np.int64]) -> None:
        """Look at the gaps before and between ``offsets`` (a partition's next records; ``stored``: its last)."""
        fresh = offsets[offsets > stored] if stored is not None else offsets
        if not len(fresh):
            return
        ends = np.flatnonzero(np.diff(fresh) > 1)
        gaps = [(int(fresh[i]) + 1, int(fresh[i + 1]) - 1) for i in ends]
        if stored is not None and fresh[0] > stored + 1:
            gaps.insert(0, (stored + 1, int(fresh[0]) - 1))
        if not gaps:
            return
        start = self._log_start(topic, partition)
        for first, last in gaps:
            if first < start:
                gap = record_gap(self._root, topic, partition, first, min(last, start - 1), how=INFERRED)
                log.info("%s: lost at the source (below its log start %d when read)", gap.describe(), start)

    def _log_start(self, topic: str, partition: int) -> int:
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        if self._consumer is None:
            self._consumer = Consumer(
                consumer_settings(self._client), logger=logging.getLogger("spark_kafka_backup.librdkafka")
            )
        try:
            low, _ = self._consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
        except KafkaException as exc:
            raise ClusterError(
                f"topic {topic!r} partition {partition}: the log start offset cannot be read to tell a gap in the "
                f"offsets read from records lost at the source: {exc}"
            ) from exc
        return int(low)

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


def write_batch_stats(directory: Path, batch_id: int, per_topic: Mapping[str, list[int]]) -> None:
    """Leave ``batch-N.json`` (``{"batch": N, "at": UNIX_TIME, "topics": {topic: [records, bytes]}}``) for the job's
    metrics.

    A missing directory (the job ended) or a full disk costs the metrics one batch, never the backup.
    """
    document = {"batch": batch_id, "at": time.time(), "topics": {t: totals[:2] for t, totals in per_topic.items()}}
    with contextlib.suppress(OSError, StorageError):
        atomic_write(directory / f"batch-{batch_id}.json", json.dumps(document).encode(), sync=False)


def read_batch_stats(directory: Path) -> list[tuple[int, float, dict[str, tuple[int, int]]]]:
    """Consume the ``batch-N.json`` files :func:`write_batch_stats` left, in batch order: (batch, time, topics).

    A file that cannot be read or understood is removed and left out: the metrics lose one batch.
    """
    found = []
    for path in directory.glob("batch-*.json"):
        try:
            document = parse_document(path.read_bytes(), file=str(path), floats=True)
            topics = {str(topic): (int(totals[0]), int(totals[1])) for topic, totals in document["topics"].items()}
            found.append((int(document["batch"]), float(document["at"]), topics))
        except (OSError, FormatError, ValueError, KeyError, TypeError, IndexError, AttributeError):
            pass
        with contextlib.suppress(OSError):
            path.unlink()
    return sorted(found, key=lambda item: item[0])


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
