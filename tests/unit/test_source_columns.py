"""How spark-kafka-backup's Kafka source turns consumed messages into Arrow batches (pure logic, stand-in messages)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import KafkaError
from pyspark.sql.pandas.types import to_arrow_schema

from spark_kafka_backup.errors import ClusterError
from spark_kafka_backup.spark.kafka_ranges import KafkaRange
from spark_kafka_backup.spark.kafka_reader import _Columns
from spark_kafka_backup.spark.kafka_schema import kafka_schema

EOF_CODE = KafkaError._PARTITION_EOF


@dataclass
class Message:
    """The confluent-kafka ``Message`` methods the source calls."""

    offset_: int
    key_: bytes | None = None
    value_: bytes | None = b"v"
    timestamp_: tuple[int, int] = (1, 1_700_000_000_000)
    headers_: list[tuple[str, bytes | None]] | None = None
    error_: KafkaError | None = None
    topic_: str = "orders"
    partition_: int = 3

    def topic(self) -> str:
        return self.topic_

    def partition(self) -> int:
        return self.partition_

    def offset(self) -> int:
        return self.offset_

    def key(self) -> bytes | None:
        return self.key_

    def value(self) -> bytes | None:
        return self.value_

    def timestamp(self) -> tuple[int, int]:
        return self.timestamp_

    def headers(self) -> list[tuple[str, bytes | None]] | None:
        return self.headers_

    def error(self) -> KafkaError | None:
        return self.error_


def columns(end: int = 100) -> _Columns:
    task = KafkaRange("orders", 3, 0, end, {"bootstrap.servers": "k:1"}, True, 10)
    return _Columns(task, to_arrow_schema(kafka_schema(True), timezone="UTC"))


def eof(offset: int) -> Message:
    return Message(offset, error_=KafkaError(EOF_CODE))


def test_fields_become_the_kafka_schema_columns() -> None:
    cols = columns()
    messages: list[Any] = [
        Message(5, b"k", b"v1", (1, 1000), [("a", b"1"), ("a", None)]),
        Message(6, None, None, (2, 2000), None),
        Message(9, b"", b"", (0, -1), []),
    ]
    assert not cols.add_all(messages, 100, EOF_CODE)
    batch = cols.batch()
    assert batch.schema == cols.schema
    assert batch.column("offset").to_pylist() == [5, 6, 9]
    assert batch.column("key").to_pylist() == [b"k", None, b""]
    assert batch.column("value").to_pylist() == [b"v1", None, b""]
    assert batch.column("timestampType").to_pylist() == [0, 1, -1]
    assert batch.column("timestamp").cast(pa.int64()).to_pylist() == [1_000_000, 2_000_000, -1000]
    assert batch.column("topic").to_pylist() == ["orders"] * 3
    assert batch.column("partition").to_pylist() == [3] * 3
    assert batch.column("headers").to_pylist() == [
        [{"key": "a", "value": b"1"}, {"key": "a", "value": None}],
        None,
        [],
    ]
    assert cols.rows == 0  # reset for the next batch


def test_the_range_ends_at_its_last_offset_or_beyond() -> None:
    cols = columns()
    assert cols.add_all([Message(97), Message(98), Message(99), Message(100)], 100, EOF_CODE)
    assert cols.batch().column("offset").to_pylist() == [97, 98, 99]
    cols = columns()
    assert cols.add_all([Message(97), Message(101)], 100, EOF_CODE)  # 98..100 were markers or aborted
    assert cols.batch().column("offset").to_pylist() == [97]
    cols = columns()
    assert not cols.add_all([Message(97), Message(98)], 100, EOF_CODE)


def test_partition_eof_events_between_messages() -> None:
    cols = columns()
    # An EOF below the range's end is a pause; one at or past it ends the range (markers after the data).
    assert not cols.add_all([Message(1), eof(2), Message(2)], 100, EOF_CODE)
    assert cols.add_all([Message(50), eof(100), Message(101)], 100, EOF_CODE)
    assert cols.batch().column("offset").to_pylist() == [1, 2, 50]


def test_other_errors_name_the_partition() -> None:
    cols = columns()
    with pytest.raises(ClusterError, match="topic 'orders' partition 3: Broker: Offset out of range"):
        cols.add_all([Message(1), Message(2, error_=KafkaError(KafkaError.OFFSET_OUT_OF_RANGE))], 100, EOF_CODE)


@pytest.mark.parametrize(
    "code", [KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError.NOT_LEADER_FOR_PARTITION]
)
def test_connection_and_leader_events_are_not_errors(code: int) -> None:
    """A broker going down mid-read: the client reconnects and fetches from the new leader; nothing is lost."""
    cols = columns()
    event = Message(-1, error_=KafkaError(code))
    assert not cols.add_all([Message(1), event, Message(2), event], 100, EOF_CODE)
    assert cols.add_all([event, Message(3), eof(100)], 100, EOF_CODE)
    assert cols.batch().column("offset").to_pylist() == [1, 2, 3]


def test_messages_of_another_partition_are_left_out() -> None:
    """A consumer reused across a task's ranges: nothing of the range before may slip into this one."""
    cols = columns()
    assert not cols.add_all([Message(4, partition_=2), Message(5), Message(6, topic_="other")], 100, EOF_CODE)
    assert not cols.add_all([Message(9, partition_=1)], 100, EOF_CODE)
    assert cols.batch().column("offset").to_pylist() == [5]


def range_of(topic: str, partition: int, size: int) -> KafkaRange:
    return KafkaRange(topic, partition, 10, 10 + size, {"bootstrap.servers": "k:1"}, True, 10)


def test_large_partitions_are_tasks_of_their_own_small_ones_are_packed() -> None:
    from spark_kafka_backup.spark.kafka_ranges import PACK_RANGES, PACK_RECORDS, pack_ranges

    big = [range_of("big", p, PACK_RECORDS + p) for p in range(3)]
    small = [range_of(f"t{t:03d}", p, 1 + (t * p) % 7) for t in range(150) for p in range(10)]
    tasks = pack_ranges(big + small, min_tasks=2)
    alone = [task for task in tasks if task.ranges[0].topic == "big"]
    assert sorted((task.ranges[0].partition, len(task.ranges)) for task in alone) == [(0, 1), (1, 1), (2, 1)]
    packed = [task for task in tasks if task.ranges[0].topic != "big"]
    assert len(packed) == -(-len(small) // PACK_RANGES)  # 1,500 one-to-seven-record ranges: by partition count
    assert all(len(task.ranges) <= PACK_RANGES for task in packed)
    every = [r for task in packed for r in task.ranges]
    assert sorted(every, key=lambda r: (r.topic, r.partition)) == sorted(small, key=lambda r: (r.topic, r.partition))
    for task in packed:  # read in topic and partition order
        assert list(task.ranges) == sorted(task.ranges, key=lambda r: (r.topic, r.partition))
    # Loads are even: no task has more than the largest range over the lightest one.
    loads = [sum(r.end - r.start for r in task.ranges) for task in packed]
    assert max(loads) - min(loads) <= 7
    # Few small partitions still fill the minimum number of tasks; never more tasks than ranges.
    assert len(pack_ranges([range_of("a", 0, 5), range_of("a", 1, 5), range_of("a", 2, 5)], min_tasks=2)) == 2
    assert len(pack_ranges([range_of("a", 0, 5)], min_tasks=8)) == 1
    # Enough records make more packed tasks: each holds at most about PACK_RECORDS offsets.
    medium = [range_of("m", p, PACK_RECORDS // 4) for p in range(12)]
    assert len(pack_ranges(medium, min_tasks=1)) == 3


def test_packed_tasks_keep_their_limits() -> None:
    from spark_kafka_backup.spark.kafka_ranges import PACK_RANGES, PACK_RECORDS, pack_ranges

    shapes = [
        [PACK_RECORDS - 1] + [1] * 999,  # one nearly large range and many tiny ones
        [120_000, 120_000, 120_000, 40_000],
        [7] * 2_345,
    ]
    for sizes in shapes:
        ranges = [range_of("s", p, size) for p, size in enumerate(sizes)]
        tasks = pack_ranges(ranges, min_tasks=2)
        assert sorted(r.partition for task in tasks for r in task.ranges) == list(range(len(sizes)))
        for task in tasks:
            assert len(task.ranges) <= PACK_RANGES
            assert len(task.ranges) == 1 or sum(r.end - r.start for r in task.ranges) <= PACK_RECORDS


def test_offsets_deleted_past_the_range_are_not_the_ranges_gap() -> None:
    from spark_kafka_backup.spark.kafka_reader import _OffsetResetError
    from spark_kafka_backup.spark.read_checks import AUTO_OFFSET_RESET

    # The consumer prefetched past the range's end, then the broker's log start moved past the fetch position.
    cols = columns()
    reset = Message(1085, error_=KafkaError(AUTO_OFFSET_RESET))
    assert cols.add_all([Message(98), Message(99), Message(100), reset], 100, EOF_CODE)
    assert cols.batch().column("offset").to_pylist() == [98, 99]
    cols = columns()
    assert cols.add_all([Message(98), reset], 100, EOF_CODE)  # 99 was a marker: fetching went on past it
    cols = columns()
    with pytest.raises(_OffsetResetError) as raised:  # inside the range: the range's own gap
        cols.add_all([Message(40), Message(50, error_=KafkaError(AUTO_OFFSET_RESET))], 100, EOF_CODE)
    assert raised.value.position == 50
    assert cols.batch().column("offset").to_pylist() == [40]
