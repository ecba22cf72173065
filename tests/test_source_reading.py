"""spark-kafka-backup's Kafka source reading packed tasks from a real broker: every record of every range, once, in
order, on the native edge and on confluent-kafka."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from spark_kafka_backup.catalog.source_gaps import read_gaps
from spark_kafka_backup.errors import SparkKafkaBackupError
from spark_kafka_backup.kafka.columnar import EDGE_ENV
from spark_kafka_backup.spark.kafka_ranges import KafkaRange, KafkaTask, pack_ranges
from spark_kafka_backup.spark.kafka_task import read_task
from tests.broker import BrokerUnderTest
from tests.kafka_helpers import create_topics

#: Each test reads on both paths: the native edge (packed tasks read at once) and confluent-kafka, its reference.
EDGES = ("native", "reference")


@pytest.mark.parametrize("edge", EDGES)
def test_a_packed_task_reads_each_range_exactly(
    kafka: BrokerUnderTest, monkeypatch: pytest.MonkeyPatch, edge: str
) -> None:
    """Many small partitions in one task, ranges starting and ending inside partitions, one partition empty."""
    from confluent_kafka import Producer

    monkeypatch.setenv(EDGE_ENV, edge)

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


def _delete_records(kafka: BrokerUnderTest, topic: str, partition: int, before: int) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(kafka.client_settings())
    for future in admin.delete_records([TopicPartition(topic, partition, before)]).values():
        future.result(30)


@pytest.mark.long
@pytest.mark.parametrize("edge", EDGES)
def test_offsets_deleted_under_a_reading_task_are_recorded_as_lost_at_the_source(
    kafka: BrokerUnderTest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edge: str
) -> None:
    """Retention (here delete-records) moves the log start past what a task has not read yet, alone and packed: the
    range is recorded exactly, the rest read from the new start; with failOnDataLoss the task fails naming it."""
    from confluent_kafka import Producer

    monkeypatch.setenv(EDGE_ENV, edge)

    # Whether the deletion lands before the reader fetched past it is a race the test sets up but cannot force (a
    # loaded machine may fetch a partition whole first): tried on a fresh topic until a partition lost records.
    for _attempt in range(3):
        topic = f"shrinking-{uuid.uuid4().hex[:8]}"
        create_topics(kafka, {topic: 3})
        producer = Producer(kafka.client_settings(**{"linger.ms": "0", "batch.size": "3000"}))  # a record a batch
        for partition in range(3):
            for i in range(300):
                producer.produce(topic, value=b"%d" % i + b"." * 2000, partition=partition)
                producer.poll(0)
        assert producer.flush(30) == 0
        # Small fetches, a small prefetch queue: the first batch is read long before the records past it are fetched.
        client = kafka.client_settings(**{"max.partition.fetch.bytes": "20000", "fetch.max.bytes": "20000",
                                          "message.max.bytes": "20000", "queued.max.messages.kbytes": "40",
                                          "queued.min.messages": "5",
                                          # librdkafka's wait before fetching into a full queue again (the readers'
                                          # 10 ms refill it before the deletion; its default, 1 s, leaves time)
                                          "fetch.queue.backoff.ms": "1000"})  # fmt: skip
        root = tmp_path / "backup"

        # Planned before the deletion, read after it: partition 0 from 0, whose first 100 offsets are gone.
        _delete_records(kafka, topic, 0, 100)
        alone = KafkaRange(topic, 0, 0, 300, client, False, 30, gaps_root=str(root))
        assert [o for b in read_task(KafkaTask((alone,))) for o in b.column("offset").to_pylist()] == list(
            range(100, 300)
        )

        # Deleted while two packed partitions are being read: after each task's first batch.
        packed = KafkaTask(tuple(KafkaRange(topic, p, 0, 300, client, False, 30, gaps_root=str(root)) for p in (1, 2)))
        batches = read_task(packed, batch_rows=10)
        seen: dict[int, list[int]] = {}
        for at, batch in enumerate(batches):
            partition = batch.column("partition")[0].as_py()
            seen.setdefault(partition, []).extend(batch.column("offset").to_pylist())
            if at == 0:
                for p in (1, 2):
                    _delete_records(kafka, topic, p, 250)
        for partition in (1, 2):
            offsets = seen[partition]
            assert offsets == sorted(offsets) and offsets[-1] == 299 and 250 in offsets
            lost = [o for o in range(300) if o not in offsets]
            assert lost == list(range(lost[0], 250)) if lost else True  # one range, ending below the new log start
        gaps = {(g.partition, g.first, g.last, g.how) for g in read_gaps(root, topic)}
        expected = {(0, 0, 99, "read")}
        for partition in (1, 2):
            lost = [o for o in range(300) if o not in seen[partition]]
            if lost:
                expected.add((partition, lost[0], lost[-1], "read"))
        assert gaps == expected
        if any(partition in (1, 2) for partition, *_ in gaps):  # at least one partition lost records mid-read
            break
    else:
        pytest.fail("in 3 tries no partition lost records while it was read: the reader fetched past the deletion")

    failing = KafkaRange(topic, 0, 0, 300, client, False, 30, fail_on_data_loss=True)
    with pytest.raises(
        SparkKafkaBackupError, match=rf"topic '{topic}' partition 0: offsets 0\.\.99 were deleted at the source"
    ):
        list(read_task(KafkaTask((failing,))))


@pytest.mark.parametrize("edge", EDGES)
def test_records_of_a_topic_created_again_after_planning_are_not_handed_on(
    kafka: BrokerUnderTest, monkeypatch: pytest.MonkeyPatch, edge: str
) -> None:
    """A range planned on one incarnation and read on the next (deleted and created again, with more records than
    the range's start): no record is handed on, alone or packed with a partition of another topic, which is read."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    from spark_kafka_backup.kafka.cluster import topic_ids

    monkeypatch.setenv(EDGE_ENV, edge)

    topic, other = f"again-{uuid.uuid4().hex[:8]}", f"steady-{uuid.uuid4().hex[:8]}"
    create_topics(kafka, {topic: 1, other: 1})
    admin = AdminClient(kafka.client_settings())
    planned = topic_ids(admin, [topic, other])
    admin.delete_topics([topic])[topic].result(30)
    for _ in range(120):
        try:
            create_topics(kafka, {topic: 1})
            break
        except Exception:
            time.sleep(0.5)
    assert topic_ids(admin, [topic])[topic] != planned[topic]
    producer = Producer(kafka.client_settings())
    for i in range(300):
        producer.produce(topic, value=b"new-%d" % i, partition=0)
        producer.produce(other, value=b"other-%d" % i, partition=0)
    assert producer.flush(30) == 0
    client = kafka.client_settings()
    again = KafkaRange(topic, 0, 100, 300, client, False, 30, topic_id=planned[topic])
    steady = KafkaRange(other, 0, 0, 300, client, False, 30, topic_id=planned[other])
    assert list(read_task(KafkaTask((again,)))) == []
    read = [b for b in read_task(KafkaTask((again, steady)))]
    assert {b.column("topic")[0].as_py() for b in read} == {other}
    assert [o for b in read for o in b.column("offset").to_pylist()] == list(range(300))


def test_records_of_a_topic_deleted_while_read_are_recorded_as_lost_at_the_source(
    kafka: BrokerUnderTest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The topic is gone when the task confirms its id after fetching (the deletion is injected at that moment: it
    cannot be timed from outside): what it fetched is dropped, the source no longer has it, and the range is named."""
    from confluent_kafka import Producer

    from spark_kafka_backup.kafka import cluster
    from spark_kafka_backup.kafka.cluster import topic_ids

    topic = f"vanishing-{uuid.uuid4().hex[:8]}"
    create_topics(kafka, {topic: 1})
    producer = Producer(kafka.client_settings())
    for i in range(50):
        producer.produce(topic, value=b"%d" % i, partition=0)
    assert producer.flush(30) == 0
    from confluent_kafka.admin import AdminClient

    planned = topic_ids(AdminClient(kafka.client_settings()), [topic])[topic]
    monkeypatch.setattr(cluster.TopicIdAsker, "ask", lambda self, topics: {})  # deleted by now
    root = tmp_path / "backup"
    item = KafkaRange(topic, 0, 10, 50, kafka.client_settings(), False, 30, gaps_root=str(root), topic_id=planned)
    assert list(read_task(KafkaTask((item,)))) == []
    assert [(g.partition, g.first, g.last, g.how) for g in read_gaps(root, topic)] == [(0, 10, 49, "dropped")]
