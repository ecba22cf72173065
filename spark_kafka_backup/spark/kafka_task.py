"""One Kafka source task on an executor: its ranges read by one of the two
:class:`~spark_kafka_backup.spark.kafka_ranges.RangeReader` implementations.

A task reads through the native edge when it can be used (``columnar_reader.read_ranges_native``), else through
confluent-kafka (``kafka_reader.read_ranges_reference``): one range alone, or a packed task's many at once.
A source given ``writeTo`` writes what its task reads into v1 files in the same process (:func:`write_task`).
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from spark_kafka_backup.fsutil import restrict_new_files
from spark_kafka_backup.kafka.client_settings import consumer_settings
from spark_kafka_backup.kafka.columnar import native_edge
from spark_kafka_backup.logsetup import ensure_console_logging
from spark_kafka_backup.spark.backup_files import BatchFiles, writes_batch
from spark_kafka_backup.spark.columnar_reader import read_ranges_native
from spark_kafka_backup.spark.kafka_ranges import KafkaTask, RangeReader
from spark_kafka_backup.spark.kafka_reader import read_ranges_reference
from spark_kafka_backup.spark.sink_options import SinkOptions


def read_task(task: KafkaTask, *, batch_rows: int = 10_000) -> Iterator[pa.RecordBatch]:
    """Read the ranges of ``task`` with one consumer, as Arrow batches of one partition each (executor side).

    One range is read alone. Several (small partitions packed together) are
    assigned at once, so one fetch brings data of many of them: each
    partition's rows gather in its own columns, which become a batch when the
    range is complete or holds ``batch_rows`` rows, and a complete partition
    is unassigned.
    """
    if not task.ranges:
        return
    first = task.ranges[0]
    ensure_console_logging()  # a Python worker of Spark's: librdkafka's own log (a line per reconnect) stays quiet
    settings = consumer_settings(first.client, isolation_level=first.client.get("isolation.level", "read_committed"))
    # Offsets deleted under the task are an event it handles (read_checks.deleted_under), never a silent jump.
    settings["auto.offset.reset"] = "error"
    reader: RangeReader = read_ranges_native if native_edge() is not None else read_ranges_reference
    yield from reader(task.ranges, settings, batch_rows=batch_rows)


def write_task(task: KafkaTask, sink: SinkOptions) -> Iterator[pa.RecordBatch]:
    """Read the ranges of ``task`` and write them into v1 files under ``sink.target``; one batch of
    :data:`~spark_kafka_backup.spark.backup_files.WRITES_SCHEMA` rows says what was written (executor side).

    The same files as the ``kbackup_v1`` sink writes from the same records, with the same guarantee: every
    partition is synced before the task hands on its rows, so a micro-batch Spark commits is durable. The
    records never leave this process (no copy through the JVM to a writer's Python process).
    """
    restrict_new_files(sink.umask)
    files = BatchFiles(sink, sink.encryption_key())
    try:
        for batch in gathered(read_task(task)):
            files.write(batch)
        writes = files.finish()
    except BaseException:
        files.abandon()
        raise
    yield writes_batch(str(sink.target), writes)


#: A packed task's batches (one small partition each) are written together up to this many rows or bytes.
GATHER_ROWS = 10_000
GATHER_BYTES = 16 << 20


def gathered(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``batches`` with runs of small ones joined (up to :data:`GATHER_ROWS` rows or :data:`GATHER_BYTES`), in
    order: the writer encodes a batch once, whatever number of partitions it holds, and a packed task of one-record
    partitions otherwise pays Arrow's fixed cost per partition."""
    held: list[pa.RecordBatch] = []
    rows = size = 0
    for batch in batches:
        if held and (rows + batch.num_rows > GATHER_ROWS or size + batch.nbytes > GATHER_BYTES):
            yield _joined(held)
            held, rows, size = [], 0, 0
        held.append(batch)
        rows, size = rows + batch.num_rows, size + batch.nbytes
    if held:
        yield _joined(held)


def _joined(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    return batches[0] if len(batches) == 1 else pa.concat_batches(batches)
