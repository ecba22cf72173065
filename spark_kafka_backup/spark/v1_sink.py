"""The backup sink: a Spark streaming writer into kafka-backup v1 files.

::

    df.writeStream.format("kbackup_v1").option("checkpointLocation", ...).start("/backups/prod")

It takes the Kafka source schema (``key``, ``value``, ``topic``, ``partition``,
``offset``, ``timestamp``, ``timestampType``, ``headers``), from this
project's source or Spark's own (with ``includeHeaders=true``), and writes
each record to ``<path>/<topic>/`` with one partition writer per Kafka
partition. ``path`` is a local directory or ``s3://bucket/prefix``; on an
object store each task publishes whole new segments when it finishes (see
:mod:`spark_kafka_backup.partition.object_writer`). The writing itself is
:class:`~spark_kafka_backup.spark.backup_files.BatchFiles`.

Behind this project's source given ``writeTo`` (what the backup job does), the
source's tasks have written the files already and hand on one row per
partition written (:data:`~spark_kafka_backup.spark.backup_files.WRITES_SCHEMA`):
the sink only commits and reports them. Its path must then be the source's
``writeTo`` path (another is refused when its task ends); its writing options
(segment size, compression, encryption, ``fsync``, ``umask``) are not used:
the source's are.

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
``checkSource`` (``true`` behind Spark's Kafka source, with ``kafka.*`` client settings for librdkafka: see below),
``schemaIds`` (``true``: the tasks report the schema registry ids their keys and values name, and the commit adds
new ones to ``ROOT/kbackup~state/schema-ids.json`` before Spark records the batch: see
:mod:`spark_kafka_backup.schema_registry.seen_ids`).

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
import json
import logging
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from spark_kafka_backup.errors import FormatError, StorageError, UsageError
from spark_kafka_backup.format.json_document import parse_document
from spark_kafka_backup.fsutil import atomic_write, restrict_new_files
from spark_kafka_backup.logsetup import ensure_console_logging
from spark_kafka_backup.schema_registry.seen_ids import MAX_SEEN_IDS, record_seen_ids, seen_ids_capped
from spark_kafka_backup.spark.backup_files import (
    MAX_OPEN_PARTITIONS,
    WRITES_SCHEMA,
    BatchFiles,
    PartitionWrite,
    partition_runs,
    v1_timestamp,
    v1_timestamps,
    writes_from_batch,
)
from spark_kafka_backup.spark.sink_options import SINK_NAME, SinkOptions
from spark_kafka_backup.spark.source_check import SourceCheck
from spark_kafka_backup.spark.worker_gc import freeze_loaded_objects
from spark_kafka_backup.storage import Location

__all__ = [
    "MAX_OPEN_PARTITIONS",
    "SINK_NAME",
    "BackupCommitMessage",
    "BatchStats",
    "PartitionWrite",
    "SinkOptions",
    "V1Sink",
    "V1StreamWriter",
    "partition_runs",
    "read_batch_stats",
    "report_batch",
    "v1_timestamp",
    "v1_timestamps",
    "write_batch_stats",
]

log = logging.getLogger("spark_kafka_backup.sink")

REQUIRED_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers")


#: A lock wait shorter than this is not reported (one poll of the lock: it was free, or freed at once).
LOCK_WAIT_REPORTED = 0.05


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
        options = SinkOptions.parse(self.options)
        if schema.fieldNames() == WRITES_SCHEMA.names:
            return V1StreamWriter(options, written_by_source=True)
        missing = [name for name in REQUIRED_COLUMNS if name not in schema.fieldNames()]
        if missing:
            hint = " (set includeHeaders=true on the Kafka source)" if missing == ["headers"] else ""
            raise UsageError(f"the {SINK_NAME} sink needs the Kafka columns {', '.join(missing)}{hint}")
        return V1StreamWriter(options)


class V1StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: SinkOptions, *, written_by_source: bool = False) -> None:
        self.options = options
        #: The batches are :data:`WRITES_SCHEMA` rows of a source that wrote the files itself (its ``writeTo``).
        self.written_by_source = written_by_source

    def write(self, iterator: Iterator[pa.RecordBatch]) -> BackupCommitMessage:
        """Executor side: append every record, then sync each partition it touched (or, behind a source that
        wrote them, take its rows)."""
        freeze_loaded_objects()
        if self.written_by_source:
            root = str(self.options.target)
            return BackupCommitMessage([write for batch in iterator for write in writes_from_batch(batch, root)])
        restrict_new_files(self.options.umask)
        check = SourceCheck(self.options.target, self.options.client) if self.options.check_source else None
        files = BatchFiles(self.options, self.options.encryption_key(), check)
        try:
            for batch in iterator:
                files.write(batch)
            return BackupCommitMessage(files.finish())
        except BaseException:
            files.abandon()
            raise
        finally:
            if check is not None:
                check.close()

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Driver side: report what the batch wrote, in one line (and one per topic at debug level)."""
        freeze_loaded_objects()  # a reused Python worker of Spark's, as on executors
        ensure_console_logging(log_format=self.options.log_format)
        writes = [
            write
            for message in messages
            for write in (message.partitions if isinstance(message, BackupCommitMessage) else ())
        ]
        report_batch(batchId, writes, self.options.stats_dir)
        if self.options.schema_ids:
            record_schema_ids(self.options.target, writes)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        ensure_console_logging(log_format=self.options.log_format)  # a Python worker of Spark's, not the job's
        log.warning(
            "batch %d failed; what its tasks wrote but did not sync is repaired when the partition is next opened",
            batchId,
        )


def record_schema_ids(root: Location, writes: Iterable[PartitionWrite]) -> None:
    """Add the schema ids a committed batch's records name to the backup's list (before the batch is recorded)."""
    found: dict[str, set[int]] = {}
    for write in writes:
        if write.schema_ids:
            found.setdefault(write.topic, set()).update(write.schema_ids)
    if found and record_seen_ids(root, found):
        log.info("records name schema ids not seen before: %s", ", ".join(
            f"{topic}: {', '.join(map(str, sorted(ids)[:10]))}{', ...' if len(ids) > 10 else ''}"
            for topic, ids in sorted(found.items())))  # fmt: skip
        if seen_ids_capped(root):
            log.warning(
                "records name %s distinct schema ids or more: most are data that only looks like the schema "
                "registry's wire format; no more ids are listed, and ids seen from now on are fetched only if a "
                "subject lists them", f"{MAX_SEEN_IDS:,}",
            )  # fmt: skip


def report_batch(batch_id: int, writes: Iterable[PartitionWrite], stats_dir: Path | None) -> None:
    """Say what a committed batch wrote, in one line (and one per topic at debug level), and leave its
    ``batch-N.json`` in ``stats_dir`` (see :func:`write_batch_stats`)."""
    per_topic: dict[str, list[int]] = {}
    partitions = 0
    longest: PartitionWrite | None = None
    for write in writes:
        if write.lock_wait > (longest.lock_wait if longest else LOCK_WAIT_REPORTED):
            longest = write
        totals = per_topic.setdefault(write.topic, [0, 0, 0])
        totals[0] += write.written
        totals[1] += write.bytes
        totals[2] += write.skipped
        partitions += 1
    for topic, (written, size, skipped) in sorted(per_topic.items()):
        log.debug("batch %d: %s: %d records, %d bytes written, %d already in the backup",
                  batch_id, topic, written, size, skipped)  # fmt: skip
    written = sum(totals[0] for totals in per_topic.values())
    size = sum(totals[1] for totals in per_topic.values())
    skipped = sum(totals[2] for totals in per_topic.values())
    if per_topic:
        extra = f", {skipped:,} already in the backup" if skipped else ""
        where = f"{partitions:,} partition{'s' if partitions != 1 else ''} of {len(per_topic):,} topic" + (
            "s" if len(per_topic) != 1 else ""
        )
        log.info("batch %d: %s records, %s bytes written to %s%s", batch_id, f"{written:,}", f"{size:,}", where, extra)
    if stats_dir is not None:
        write_batch_stats(stats_dir, batch_id, per_topic)
    if longest is not None:
        log.info(
            "batch %d: waited %.1f s for the lock of %s/%d, held by an earlier attempt (a lost or slow task)",
            batch_id, longest.lock_wait, longest.topic, longest.partition,
        )  # fmt: skip


class BatchStats(NamedTuple):
    """What one committed batch did, as :func:`read_batch_stats` finds it."""

    batch: int
    #: When it was committed (UNIX time).
    at: float
    #: Records and bytes written, per topic.
    topics: dict[str, tuple[int, int]]
    #: Records read: those written and those found already in the backup (a batch replayed).
    read: int


def write_batch_stats(directory: Path, batch_id: int, per_topic: Mapping[str, list[int]]) -> None:
    """Leave ``batch-N.json`` (``{"batch": N, "at": UNIX_TIME, "topics": {topic: [records, bytes]}, "read":
    RECORDS}``) for the job; ``per_topic``: records written, bytes written and records skipped of each topic.

    A missing directory (the job ended) or a full disk costs the job's report one batch, never the backup.
    """
    document = {
        "batch": batch_id,
        "at": time.time(),
        "topics": {t: totals[:2] for t, totals in per_topic.items()},
        "read": sum(totals[0] + totals[2] for totals in per_topic.values()),
    }
    with contextlib.suppress(OSError, StorageError):
        atomic_write(directory / f"batch-{batch_id}.json", json.dumps(document).encode(), sync=False)


def read_batch_stats(directory: Path) -> list[BatchStats]:
    """Consume the ``batch-N.json`` files :func:`write_batch_stats` left, in batch order.

    A file that cannot be read or understood is removed and left out: the job's report loses one batch.
    """
    found = []
    for path in directory.glob("batch-*.json"):
        try:
            document = parse_document(path.read_bytes(), file=str(path), floats=True)
            topics = {str(topic): (int(totals[0]), int(totals[1])) for topic, totals in document["topics"].items()}
            read = int(document["read"])
            found.append(BatchStats(int(document["batch"]), float(document["at"]), topics, read))
        except (OSError, FormatError, ValueError, KeyError, TypeError, IndexError, AttributeError):
            pass
        with contextlib.suppress(OSError):
            path.unlink()
    return sorted(found, key=lambda item: item.batch)
