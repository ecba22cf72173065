"""A Kafka source for Spark Structured Streaming on the Python Data Source API.

Spark's own Kafka source is a JVM package that cannot be installed everywhere;
this one reads Kafka with librdkafka (the native edge, or confluent-kafka) and
offers the same output schema and the same option names, so the backup sink
works behind either (unless ``writeTo`` is given: then its tasks write the
files themselves)::

    spark.readStream.format("kbackup_kafka")
        .option("kafka.bootstrap.servers", "host:9092")
        .option("subscribe", "orders,payments")      # or subscribePattern
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
        .load()

Options (unknown ones are an error):

- ``kafka.<setting>``: passed to the Kafka client without the prefix
  (``kafka.bootstrap.servers`` is required). ``kafka.isolation.level``
  defaults to ``read_committed`` here (Kafka's default is read_uncommitted).
- ``subscribe`` / ``subscribePattern``: a comma-separated topic list or a
  regex that must match whole topic names. Topics and partitions that appear
  later are picked up at the next micro-batch, from their earliest offset.
- ``startingOffsets``: ``earliest`` (default), ``latest`` or JSON
  ``{"topic": {"0": 42, "1": -2}}`` (-2 earliest, -1 latest).
- ``maxOffsetsPerTrigger``: at most this many offsets per micro-batch, split
  across partitions in proportion to what each has available.
- ``includeHeaders``: add the ``headers`` column (default false, as in Spark).
- ``failOnDataLoss``: when offsets the query still needed were deleted by
  retention (before or while a task reads them: the task reading from where
  the query is finds them), fail (true, the default) or log a warning naming
  the topic, partition and lost range and go on (false).
- ``sourceGapsRoot``: a backup root (local path or ``s3://``) where each range
  deleted at the source before it was read is recorded
  (:mod:`spark_kafka_backup.catalog.source_gaps`), by the task that finds it, before it
  hands on any record after it; the warnings are then left to whoever reads
  that record (the backup job).
- ``readTimeoutSeconds``: how long a task waits without progress before it
  fails naming its partition (default 120).
- ``snapshotUnreachableSeconds``: how long a snapshot (``Trigger.AvailableNow``)
  waits for a cluster that stopped answering before it fails (default 300).
  A continuous query's planning waits as long as it takes: a trigger that
  cannot reach the cluster plans no new data and says so in a warning (tasks
  already reading still fail after ``readTimeoutSeconds`` without data).
- ``writeTo``: a JSON object of the ``kbackup_v1`` sink's options (``{"path": "/backups", "fsync": "true"}``):
  each task writes the records it reads into v1 files itself, as the sink would, and hands on one row per
  partition written instead of the records (``root``, ``topic``, ``partition``, ``first_offset``,
  ``last_offset``, ``written``, ``skipped``, ``bytes``, ``lock_wait``). Give the rows to the ``kbackup_v1`` sink
  with the same path: it commits and reports them. The records never cross to the JVM and into a second Python
  process. Headers are always read (``includeHeaders`` does not apply). The backup job reads this way; see
  :mod:`spark_kafka_backup.spark.backup_files`.
- ``minPartitions``: the number of tasks a micro-batch should have at least,
  when it reads that many Kafka partitions (default 1; the backup job passes
  Spark's default parallelism). See "Tasks" below.

Broker failures: a leader change or a node going down is handled by the
Kafka clients (metadata refresh, fetch from the new leader); connection and
leader events a task's consumer reports are not errors, and a task fails only
when it gets no data for ``readTimeoutSeconds``. On the driver side, a trigger
whose offset requests fail logs how long the cluster has not answered; see
``snapshotUnreachableSeconds`` for what happens next.

Where things run (see the PySpark notes): every method but ``read`` runs in
one long-lived driver-side process, where the reader hands planning to an
:class:`~spark_kafka_backup.spark.kafka_planning.OffsetPlanner`; ``read``
runs on executors with only the picklable :class:`KafkaTask` it is given,
and builds its own consumer (:mod:`spark_kafka_backup.spark.kafka_reader`).
The options and the offset JSON are in
:mod:`spark_kafka_backup.spark.source_options`.

Tasks: work is planned by records, not by partitions. A Kafka partition with
at least :data:`PACK_RECORDS` offsets to read is a task of its own; smaller
ones are packed together (at most :data:`PACK_RECORDS` offsets and
:data:`PACK_RANGES` partitions per task, but in at least ``minPartitions``
tasks when there are that many), and a task assigns all its partitions to one
consumer at once (one fetch brings records of many). Each Kafka partition is
read by one task, in offset order, and handed on (to the sink, or to the
task's own writer with ``writeTo``) in batches of that partition alone
(batches of different partitions may alternate), so a task of many small
partitions costs one consumer and one Spark task instead of one each per
partition.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from spark_kafka_backup.spark.backup_files import WRITES_SCHEMA
from spark_kafka_backup.spark.kafka_planning import OffsetPlanner
from spark_kafka_backup.spark.kafka_ranges import KafkaRange, KafkaTask
from spark_kafka_backup.spark.kafka_reader import read_range
from spark_kafka_backup.spark.kafka_schema import kafka_schema
from spark_kafka_backup.spark.kafka_task import read_task, write_task
from spark_kafka_backup.spark.runner_exit import quiet_closed_socket_on_exit
from spark_kafka_backup.spark.source_options import (
    SOURCE_NAME,
    SourceOptions,
    decode_offsets,
    encode_offsets,
    option_is_true,
)
from spark_kafka_backup.spark.worker_gc import freeze_loaded_objects

__all__ = [
    "SOURCE_NAME",
    "KafkaRange",
    "KafkaSource",
    "KafkaStreamReader",
    "KafkaTask",
    "SourceOptions",
    "decode_offsets",
    "encode_offsets",
    "read_range",
    "read_task",
]


class KafkaSource(DataSource):
    """``format("kbackup_kafka")``: see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        lowered = {k.lower(): v for k, v in self.options.items()}
        if "writeto" in lowered:
            return from_arrow_schema(WRITES_SCHEMA)
        return kafka_schema(option_is_true(lowered, "includeheaders", False))

    def streamReader(self, schema: StructType) -> KafkaStreamReader:
        return KafkaStreamReader(SourceOptions.parse(self.options))


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Spark's face of the source: the driver's methods hand over to :attr:`planner`; :meth:`read` runs on
    executors."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        #: Holds no client until it first plans (on the driver): the copy Spark sends to executors carries none.
        self.planner = OffsetPlanner(options)

    # -- driver side -------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        return self.planner.initial_offset()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.planner.prepare_snapshot()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        return self.planner.latest_offset(start, limit)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return self.planner.latest_seen()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[KafkaTask]:
        return self.planner.tasks(start, end)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: offsets live in Spark's checkpoint, never in Kafka."""

    def stop(self) -> None:
        """The query stops (the Python process of the driver that runs this reader ends after)."""
        quiet_closed_socket_on_exit()

    # -- executor side -----------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, KafkaTask):
            raise TypeError(f"expected a KafkaTask, got {type(partition).__name__}")
        freeze_loaded_objects()
        if self.options.write_to is not None:
            return write_task(partition, self.options.write_to)
        return read_task(partition)
