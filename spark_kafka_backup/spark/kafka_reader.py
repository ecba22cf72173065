"""The reference reader of a ``kbackup_kafka`` task (confluent-kafka, one message object per record).

Only a :class:`~spark_kafka_backup.spark.kafka_ranges.KafkaTask` (picklable) crosses from the driver;
:func:`~spark_kafka_backup.spark.kafka_task.read_task` builds its own consumer and reads with :func:`read_range` or
:func:`read_together` here, or with the native edge (:mod:`spark_kafka_backup.spark.columnar_reader`), each with the
checks of :mod:`spark_kafka_backup.spark.read_checks`. See :mod:`spark_kafka_backup.spark.kafka_source` for the
options and how work is planned and packed into tasks.

Offsets the source deletes under a task (retention, ``kafka-delete-records``)
are an event here, never a silent jump: the consumer runs with
``auto.offset.reset=error``, and a position the broker no longer has ends
the task (``failOnDataLoss=true``) or is recorded as lost at the source and
read on from the new log start (:func:`~spark_kafka_backup.spark.read_checks.deleted_under`).
"""

from __future__ import annotations

import bisect
import itertools
import logging
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema

from spark_kafka_backup.errors import ClusterError
from spark_kafka_backup.kafka.cluster import is_transient
from spark_kafka_backup.spark.kafka_ranges import KafkaRange
from spark_kafka_backup.spark.kafka_schema import kafka_schema
from spark_kafka_backup.spark.read_checks import AUTO_OFFSET_RESET, Incarnations, Stall, deleted_under, no_data
from spark_kafka_backup.text import count

log = logging.getLogger("spark_kafka_backup.source")

# confluent-kafka's timestamp types (0 none, 1 CreateTime, 2 LogAppendTime) -> Kafka's ids, as Spark reports them.
_TIMESTAMP_KINDS = np.array([-1, 0, 1], dtype=np.int32)


def read_together(
    ranges: tuple[KafkaRange, ...], consumer: Any, *, batch_rows: int, incarnations: Incarnations
) -> Iterator[pa.RecordBatch]:
    from confluent_kafka import KafkaError, TopicPartition

    schema = to_arrow_schema(kafka_schema(ranges[0].include_headers), timezone="UTC")
    pending = {(r.topic, r.partition): _Columns(r, schema) for r in ranges}
    consumer.incremental_assign([TopicPartition(r.topic, r.partition, r.start) for r in ranges])
    stall = Stall()
    while pending:
        messages = consumer.consume(num_messages=5000, timeout=1.0)
        if not messages:
            no_data(stall, pending[min(pending)].task, len(pending))
            continue
        stall.progressed()
        keys = [(message.topic(), message.partition()) for message in messages]
        cuts = [0, *(i for i in range(1, len(keys)) if keys[i] != keys[i - 1]), len(keys)]
        ready: list[pa.RecordBatch] = []  # handed on after one check of the topics' ids (see Incarnations)
        for start, stop in itertools.pairwise(cuts):
            columns = pending.get(keys[start])
            if columns is None:
                error = messages[start].error()
                if error is not None and error.code() != KafkaError._PARTITION_EOF and not is_transient(error):
                    raise ClusterError(f"reading {count(len(pending), 'partition')}: {error.str()}")
                continue  # a partition already complete: what was fetched past its range is not ours
            try:
                done = columns.add_all(messages[start:stop], columns.task.end, KafkaError._PARTITION_EOF)
            except _OffsetResetError as reset:
                resume = _deleted_under(consumer, columns.task, reset.position)
                done = resume >= columns.task.end
                item = columns.task
                consumer.incremental_unassign([TopicPartition(item.topic, item.partition)])
                if not done:
                    consumer.incremental_assign([TopicPartition(item.topic, item.partition, resume)])
                    continue
                if columns.rows:
                    ready.append(columns.batch())
                del pending[keys[start]]
                continue
            if columns.rows and (done or columns.rows >= batch_rows):
                ready.append(columns.batch())
            if done:
                del pending[keys[start]]
                item = columns.task
                consumer.incremental_unassign([TopicPartition(item.topic, item.partition)])
        yield from incarnations.confirmed(ready)
        stall.progressed()  # the time the batches' taker spent (writing them, waiting for a lock) is not a stall
        for key in [key for key in pending if key[0] in incarnations.refused]:
            del pending[key]
            consumer.incremental_unassign([TopicPartition(*key)])


def read_range(
    task: KafkaRange, consumer: Any, *, batch_rows: int = 10_000, incarnations: Incarnations | None = None
) -> Iterator[pa.RecordBatch]:
    """Read offsets ``[start, end)`` of one partition as Arrow batches, with ``consumer`` assigned to it alone."""
    check = incarnations if incarnations is not None else Incarnations((task,))
    from confluent_kafka import KafkaError, TopicPartition

    schema = to_arrow_schema(kafka_schema(task.include_headers), timezone="UTC")
    columns = _Columns(task, schema)
    consumer.assign([TopicPartition(task.topic, task.partition, task.start)])
    stall = Stall()
    done = False
    while not done:
        messages = consumer.consume(num_messages=5000, timeout=1.0)
        if not messages:
            no_data(stall, task)
            continue
        stall.progressed()
        try:
            done = columns.add_all(messages, task.end, KafkaError._PARTITION_EOF)
        except _OffsetResetError as reset:
            resume = _deleted_under(consumer, task, reset.position)
            done = resume >= task.end
            if not done:
                consumer.assign([TopicPartition(task.topic, task.partition, resume)])
        if columns.rows >= batch_rows:
            yield from check.confirmed([columns.batch()])
            stall.progressed()  # the time the batch's taker spent (writing it, waiting for a lock) is not a stall
            if task.topic in check.refused:
                return
    if columns.rows:
        yield from check.confirmed([columns.batch()])


class _OffsetResetError(Exception):
    """The broker does not have ``position`` of the partition being read (internal to the reading loops)."""

    def __init__(self, position: int) -> None:
        super().__init__(position)
        self.position = position


def _deleted_under(consumer: Any, task: KafkaRange, position: int) -> int:
    """:func:`deleted_under` with a confluent-kafka consumer."""
    from confluent_kafka import TopicPartition

    return deleted_under(
        lambda: consumer.get_watermark_offsets(TopicPartition(task.topic, task.partition), timeout=30), task, position
    )


class _Columns:
    """Column lists for one Arrow batch of Kafka messages.

    Each field is pulled from a whole ``consume`` result by one list
    comprehension and converted by Arrow in C++ (headers included), rather
    than handled message by message in a Python loop.
    """

    def __init__(self, task: KafkaRange, schema: pa.Schema) -> None:
        self.task = task
        self.schema = schema
        self._headers_type = schema.field("headers").type if task.include_headers else None
        self._reset()

    def _reset(self) -> None:
        self.rows = 0
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.timestamps: list[tuple[int, int]] = []
        self.headers: list[list[tuple[str, bytes | None]] | None] = []

    def add_all(self, messages: list[Any], end: int, eof_code: int) -> bool:
        """Add the messages below ``end``; return whether the range is complete.

        The range is complete at offset ``end - 1``, at the first offset
        ``>= end``, or at a partition-EOF event at or past ``end`` (committed
        data ends there; the last offsets were transaction markers).
        """
        if not messages:
            return False
        if any([message.error() is not None for message in messages]):
            return self._add_with_events(messages, end, eof_code)
        mine = (self.task.topic, self.task.partition)
        if (messages[0].topic(), messages[0].partition()) != mine or (
            messages[-1].topic(),
            messages[-1].partition(),
        ) != mine:
            # Left from the range this consumer read before (a new assignment drops them; never trust it).
            messages = [m for m in messages if (m.topic(), m.partition()) == mine]
            if not messages:
                return False
        offsets = [message.offset() for message in messages]
        cut = bisect.bisect_left(offsets, end)  # one partition's messages come in offset order
        complete = cut < len(offsets) or (cut > 0 and offsets[cut - 1] >= end - 1)
        if cut < len(messages):
            messages, offsets = messages[:cut], offsets[:cut]
        self.offsets += offsets
        self.keys += [message.key() for message in messages]
        self.values += [message.value() for message in messages]
        self.timestamps += [message.timestamp() for message in messages]
        if self._headers_type is not None:
            self.headers += [message.headers() for message in messages]
        self.rows += len(messages)
        return complete

    def _add_with_events(self, messages: list[Any], end: int, eof_code: int) -> bool:
        """:meth:`add_all` for a result holding events (partition EOF) or errors, message by message."""
        for at, message in enumerate(messages):
            error = message.error()
            if error is None:
                continue
            if is_transient(error):
                # A connection or leader event: the client recovers by itself; readTimeoutSeconds bounds the wait.
                log.info(
                    "topic %r partition %d: %s (the client retries)", self.task.topic, self.task.partition, error.str()
                )
                return self.add_all([*messages[:at], *messages[at + 1 :]], end, eof_code)
            if error.code() == AUTO_OFFSET_RESET:
                if self.add_all(messages[:at], end, eof_code) or message.offset() >= end:
                    # The range was read whole before the fetch ahead of it (librdkafka prefetches past the range)
                    # met offsets the broker no longer has: the range that holds them meets the gap.
                    return True
                raise _OffsetResetError(message.offset())
            if error.code() != eof_code:
                raise ClusterError(f"topic {self.task.topic!r} partition {self.task.partition}: {error.str()}")
            if self.add_all(messages[:at], end, eof_code):
                return True
            if message.offset() >= end:
                return True
            return self.add_all(messages[at + 1 :], end, eof_code)
        return self.add_all(messages, end, eof_code)

    def batch(self) -> pa.RecordBatch:
        n = self.rows
        times = np.array(self.timestamps, dtype=np.int64).reshape(n, 2)
        kinds = _TIMESTAMP_KINDS[np.clip(times[:, 0], 0, 2)]
        arrays = [
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            pa.array([self.task.topic] * n, pa.string()),
            pa.array(np.full(n, self.task.partition, dtype=np.int32)),
            pa.array(np.array(self.offsets, dtype=np.int64)),
            pa.array(times[:, 1] * 1000, pa.timestamp("us", tz="UTC")),
            pa.array(kinds),
        ]
        if self._headers_type is not None:
            arrays.append(pa.array(self.headers, self._headers_type))
        batch = pa.RecordBatch.from_arrays(arrays, schema=self.schema)
        self._reset()
        return batch


def read_ranges_reference(
    ranges: tuple[KafkaRange, ...], settings: dict[str, str], *, batch_rows: int = 10_000
) -> Iterator[pa.RecordBatch]:
    """confluent-kafka's :class:`~spark_kafka_backup.spark.kafka_ranges.RangeReader`: one consumer, one range alone
    or several assigned together."""
    from confluent_kafka import Consumer

    consumer = Consumer(settings, logger=logging.getLogger("spark_kafka_backup.librdkafka"))
    incarnations = Incarnations(ranges)
    try:
        if len(ranges) == 1:
            yield from read_range(ranges[0], consumer, batch_rows=batch_rows, incarnations=incarnations)
        else:
            yield from read_together(ranges, consumer, batch_rows=batch_rows, incarnations=incarnations)
    finally:
        consumer.close()
