"""Reading Kafka ranges through the native edge (:mod:`spark_kafka_backup.kafka.columnar`), on an executor.

The same contract as :func:`spark_kafka_backup.spark.kafka_reader.read_range` (one range) and
:func:`~spark_kafka_backup.spark.kafka_reader.read_together` (a packed task's many small ranges, read at once) on
confluent-kafka, the references they are tested against: offsets ``[start, end)`` of each partition as Arrow
batches of one partition and up to ``batch_rows`` rows, a range complete at its last offset, at the first offset
past it, or at a partition EOF at or past ``end`` (the last offsets were transaction markers or aborted records);
offsets deleted under the task recorded as lost at the source (or failing it); a topic deleted and created again
refused. Only the records' way into Python differs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema

from spark_kafka_backup.errors import ClusterError
from spark_kafka_backup.kafka.cluster import is_transient_code
from spark_kafka_backup.kafka.columnar import PARTITION_EOF, ColumnarConsumer
from spark_kafka_backup.spark.kafka_ranges import KafkaRange
from spark_kafka_backup.spark.kafka_schema import kafka_schema
from spark_kafka_backup.spark.read_checks import AUTO_OFFSET_RESET, Incarnations, Stall, deleted_under, no_data
from spark_kafka_backup.text import count

log = logging.getLogger("spark_kafka_backup.source")

#: Records held before they are handed on as one batch: at most this many bytes (and ``batch_rows`` rows); a poll
#: brings no more than what is left of it. A task holds about four times this at once (the polled pieces, their
#: join, the encoded records and librdkafka's queue, :data:`~spark_kafka_backup.kafka.client_settings.QUEUE_KBYTES`):
#: at 64 MiB a backup of 10 KB records peaked at 650 MiB per Python worker, at 16 MiB 320 MiB, as fast.
HELD_BYTES = 16 << 20


def read_range_columnar(
    task: KafkaRange, settings: dict[str, str], *, batch_rows: int = 10_000
) -> Iterator[pa.RecordBatch]:
    """Read ``task``'s range with a native consumer made from ``settings`` (see the module docstring)."""
    check = Incarnations((task,))
    schema = to_arrow_schema(kafka_schema(task.include_headers), timezone="UTC")
    consumer = ColumnarConsumer(settings, schema)
    try:
        consumer.assign(task.topic, task.partition, task.start)
        stall = Stall()
        held: list[pa.RecordBatch] = []
        rows = held_bytes = 0
        done = False
        while not done:
            polled = consumer.poll(batch_rows - rows, 1.0, task.end, max_bytes=HELD_BYTES - held_bytes)
            if polled.batch is None and polled.event == 0 and not polled.reached_end:
                no_data(stall, task)
                continue
            stall.progressed()
            if polled.batch is not None:
                held.append(polled.batch)
                rows += polled.batch.num_rows
                held_bytes += polled.batch.nbytes
            done = polled.reached_end or _after_event(consumer, task, polled.event, polled.event_offset,
                                                      polled.event_text)  # fmt: skip
            if held and (done or rows >= batch_rows or held_bytes >= HELD_BYTES):
                yield from check.confirmed(_together(held))
                stall.progressed()  # time the batches' taker spent (writing, waiting for a lock) is no stall
                held, rows, held_bytes = [], 0, 0
                if task.topic in check.refused:
                    return
    finally:
        consumer.close()


def read_ranges_columnar(
    ranges: tuple[KafkaRange, ...], settings: dict[str, str], *, batch_rows: int = 10_000
) -> Iterator[pa.RecordBatch]:
    """Read a packed task's ranges with one native consumer, all assigned at once (see the module docstring).

    Each poll brings records of one partition, cut at its range's end; they gather per partition and become
    batches when its range is complete or holds ``batch_rows`` rows (or :data:`HELD_BYTES`), and a complete
    partition is no longer read. The batches ready are handed on after one check of their topics' ids, when nothing
    more is fetched at once or ``batch_rows`` rows or :data:`HELD_BYTES` are ready. The records held of all the
    partitions together are bounded too: at :data:`HELD_BYTES` each partition's become a batch.
    """
    check = Incarnations(ranges)
    schema = to_arrow_schema(kafka_schema(ranges[0].include_headers), timezone="UTC")
    consumer = ColumnarConsumer(settings, schema)
    pending = {(r.topic, r.partition): _Held(r) for r in ranges}
    try:
        consumer.add([(item.topic, item.partition, item.start, item.end) for item in ranges])
        stall = Stall()
        ready: list[pa.RecordBatch] = []
        ready_rows = ready_bytes = 0
        held_bytes = 0  # of every partition's held records: librdkafka fetches them in turn, so they fill together

        def make_ready(partition: _Held) -> None:
            nonlocal ready_rows, ready_bytes, held_bytes
            ready_rows, ready_bytes = ready_rows + partition.rows, ready_bytes + partition.bytes
            held_bytes -= partition.bytes
            ready.extend(partition.hand_on())

        while pending:
            polled = consumer.poll(batch_rows, 0 if ready else 1.0, max_bytes=HELD_BYTES)
            if polled.batch is None and polled.event == 0 and not polled.reached_end:
                if ready:  # nothing more at once: hand on what is ready
                    yield from _hand_on(check, ready, pending, consumer)
                    ready, ready_rows, ready_bytes = [], 0, 0
                    stall.progressed()
                    continue
                no_data(stall, pending[min(pending)].task, len(pending))
                continue
            stall.progressed()
            held = pending.get((polled.topic, polled.partition))
            if held is None:  # an event of no partition (the consumer drops what partitions no longer read bring)
                if polled.event and polled.event != PARTITION_EOF and not is_transient_code(polled.event):
                    raise ClusterError(f"reading {count(len(pending), 'partition')}: {polled.event_text}")
                continue
            if polled.batch is not None and held.batches and held.bytes + polled.batch.nbytes > HELD_BYTES:
                make_ready(held)  # no batch above the bound
            held.take(polled.batch)
            held_bytes += polled.batch.nbytes if polled.batch is not None else 0
            done = polled.reached_end or _after_event(consumer, held.task, polled.event, polled.event_offset,
                                                      polled.event_text, several=True)  # fmt: skip
            if held.batches and (done or held.rows >= batch_rows or held.bytes >= HELD_BYTES):
                make_ready(held)
            if held_bytes + ready_bytes >= HELD_BYTES:  # the task's bound, whatever the number of its partitions
                for partial in pending.values():
                    if partial.batches:
                        make_ready(partial)
                held_bytes = 0  # a refused topic's partitions were dropped with what they held
            if done:
                del pending[(held.task.topic, held.task.partition)]
                consumer.remove(held.task.topic, held.task.partition)
            if not pending or ready_rows >= batch_rows or ready_bytes >= HELD_BYTES:
                yield from _hand_on(check, ready, pending, consumer)
                ready, ready_rows, ready_bytes = [], 0, 0
                stall.progressed()
        yield from _hand_on(check, ready, pending, consumer)
    finally:
        consumer.close()


class _Held:
    """One range of a packed task: its records fetched and not handed on yet."""

    def __init__(self, task: KafkaRange) -> None:
        self.task = task
        self.batches: list[pa.RecordBatch] = []
        self.rows = self.bytes = 0

    def take(self, batch: pa.RecordBatch | None) -> None:
        """Keep polled records of the range (the consumer cut them at its end)."""
        if batch is not None:
            self.batches.append(batch)
            self.rows += batch.num_rows
            self.bytes += batch.nbytes

    def hand_on(self) -> list[pa.RecordBatch]:
        batches = _together(self.batches)
        self.batches, self.rows, self.bytes = [], 0, 0
        return batches


def _hand_on(
    check: Incarnations, ready: list[pa.RecordBatch], pending: dict[tuple[str, int], _Held], consumer: ColumnarConsumer
) -> Iterator[pa.RecordBatch]:
    """The ready batches whose topics still have their planned ids; a refused topic's ranges are read no more."""
    yield from check.confirmed(ready)
    for key in [key for key in pending if key[0] in check.refused]:
        del pending[key]
        consumer.remove(*key)


def _after_event(
    consumer: ColumnarConsumer, task: KafkaRange, event: int, offset: int, text: str, *, several: bool = False
) -> bool:
    """Handle an event met while reading ``task``'s range (``several``: among others); whether it is complete."""
    if event == 0:
        return False
    if event == PARTITION_EOF:
        return offset >= task.end  # committed data ends there: the last offsets were markers or aborted records
    if event == AUTO_OFFSET_RESET:
        if offset >= task.end:
            return True  # the fetch ahead of the range met offsets gone: the range that holds them meets the gap
        resume = deleted_under(lambda: consumer.watermarks(task.topic, task.partition, 30), task, offset)
        if resume >= task.end:
            return True
        if several:
            consumer.remove(task.topic, task.partition)
            consumer.add([(task.topic, task.partition, resume, task.end)])
        else:
            consumer.assign(task.topic, task.partition, resume)
        return False
    if is_transient_code(event):
        log.info("topic %r partition %d: %s (the client retries)", task.topic, task.partition, text)
        return False
    raise ClusterError(f"topic {task.topic!r} partition {task.partition}: {text}")


def _together(batches: list[pa.RecordBatch]) -> list[pa.RecordBatch]:
    """The polled batches as few batches (Arrow splits a column of 2 GiB or more; every piece is kept)."""
    if len(batches) == 1:
        return batches
    return list(pa.Table.from_batches(batches).combine_chunks().to_batches())


def read_ranges_native(
    ranges: tuple[KafkaRange, ...], settings: dict[str, str], *, batch_rows: int = 10_000
) -> Iterator[pa.RecordBatch]:
    """The native edge's :class:`~spark_kafka_backup.spark.kafka_ranges.RangeReader`: one range alone, several at
    once."""
    if len(ranges) == 1:
        yield from read_range_columnar(ranges[0], settings, batch_rows=batch_rows)
    else:
        yield from read_ranges_columnar(ranges, settings, batch_rows=batch_rows)
