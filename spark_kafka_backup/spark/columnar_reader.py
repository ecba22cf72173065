"""Reading one Kafka range through the native edge (:mod:`spark_kafka_backup.kafka.columnar`), on an executor.

The same contract as :func:`spark_kafka_backup.spark.kafka_reader.read_range` on confluent-kafka, the reference it
is tested against: offsets ``[start, end)`` of one partition as Arrow batches of up to ``batch_rows`` rows, complete
at the range's last offset, at the first offset past it, or at a partition EOF at or past ``end`` (the last offsets
were transaction markers or aborted records); offsets deleted under the task recorded as lost at the source
(or failing it); a topic deleted and created again refused. Only the records' way into Python differs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from types import ModuleType

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema

from spark_kafka_backup.errors import ClusterError
from spark_kafka_backup.kafka.client_settings import redact
from spark_kafka_backup.kafka.cluster import is_transient_code
from spark_kafka_backup.kafka.columnar import PARTITION_EOF, ColumnarConsumer
from spark_kafka_backup.spark.kafka_reader import (
    AUTO_OFFSET_RESET,
    Incarnations,
    KafkaRange,
    Stall,
    deleted_under,
    kafka_schema,
)

log = logging.getLogger("spark_kafka_backup.source")

#: Records held before they are handed on as one batch: at most this many bytes (and ``batch_rows`` rows).
HELD_BYTES = 64 << 20


def read_range_columnar(
    task: KafkaRange, native: ModuleType, settings: dict[str, str], *, batch_rows: int = 10_000
) -> Iterator[pa.RecordBatch]:
    """Read ``task``'s range with a native consumer made from ``settings`` (see the module docstring)."""
    check = Incarnations((task,))
    schema = to_arrow_schema(kafka_schema(task.include_headers), timezone="UTC")
    consumer = ColumnarConsumer(native, settings, schema)
    try:
        consumer.assign(task.topic, task.partition, task.start)
        stall = Stall()
        held: list[pa.RecordBatch] = []
        rows = held_bytes = 0
        done = False
        while not done:
            polled = consumer.poll(batch_rows - rows, 1.0, task.end)
            if polled.batch is None and polled.event == 0 and not polled.reached_end:
                where = f"topic {task.topic!r} partition {task.partition}"
                if stall.waited(where, task.read_timeout) > task.read_timeout:
                    raise ClusterError(
                        f"{where}: no data for {task.read_timeout:.0f} s while reading offsets "
                        f"{task.start}..{task.end - 1} from {redact(task.client).get('bootstrap.servers')}"
                    )
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


def _after_event(consumer: ColumnarConsumer, task: KafkaRange, event: int, offset: int, text: str) -> bool:
    """Handle an event met while reading; whether the range is complete."""
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
