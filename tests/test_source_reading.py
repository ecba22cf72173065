"""kbackup's Kafka source reading packed tasks from a real broker: every record of every range, once, in order."""

from __future__ import annotations

import uuid

import pyarrow as pa

from kbackup.spark.kafka_source import KafkaRange, KafkaTask, pack_ranges, read_task
from tests.broker import BrokerUnderTest
from tests.kafka_helpers import create_topics


def test_a_packed_task_reads_each_range_exactly(kafka: BrokerUnderTest) -> None:
    """Many small partitions in one task, ranges starting and ending inside partitions, one partition empty."""
    from confluent_kafka import Producer

    topics = [f"packed-{uuid.uuid4().hex[:8]}-{n}" for n in range(3)]
    create_topics(kafka, dict.fromkeys(topics, 7))
    producer = Producer(kafka.client_settings())
    produced: dict[tuple[str, int], int] = {}
    for t, topic in enumerate(topics):
        for partition in range(7):
            count = (t * 7 + partition) % 9  # 0..8 records, one partition of each topic without any
            for i in range(count):
                producer.produce(topic, key=b"%d" % i, value=b"%s/%d/%d" % (topic.encode(), partition, i),
                                 partition=partition, headers=[("n", b"%d" % i)])  # fmt: skip
            produced[(topic, partition)] = count
    assert producer.flush(30) == 0
    client = kafka.client_settings()
    # Each range skips the first record (when there are two or more) and stops before the last.
    ranges = [
        KafkaRange(topic, partition, 1 if count > 1 else 0, count - 1 if count > 2 else count, client, True, 30)
        for (topic, partition), count in produced.items()
        if count
    ]
    tasks = pack_ranges(ranges, min_tasks=2)
    assert len(tasks) == 2 and sum(len(task.ranges) for task in tasks) == len(ranges)
    seen: dict[tuple[str, int], list[int]] = {}
    for task in tasks:
        for batch in read_task(task):
            assert isinstance(batch, pa.RecordBatch)
            (topic,) = set(batch.column("topic").to_pylist())
            (partition,) = set(batch.column("partition").to_pylist())  # one partition per batch
            offsets = batch.column("offset").to_pylist()
            values = batch.column("value").to_pylist()
            assert values == [b"%s/%d/%d" % (topic.encode(), partition, o) for o in offsets]
            assert batch.column("headers").to_pylist() == [[{"key": "n", "value": b"%d" % o}] for o in offsets]
            seen.setdefault((topic, partition), []).extend(offsets)
    expected = {(r.topic, r.partition): list(range(r.start, r.end)) for r in ranges}
    assert seen == expected
    # The same ranges as tasks of one range each read the same.
    one_by_one: dict[tuple[str, int], list[int]] = {}
    for item in ranges[:5]:
        for batch in read_task(KafkaTask((item,))):
            one_by_one.setdefault((item.topic, item.partition), []).extend(batch.column("offset").to_pylist())
    assert one_by_one == {key: expected[key] for key in one_by_one}
