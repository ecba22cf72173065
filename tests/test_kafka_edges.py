"""The native Kafka edge reads exactly what the reference path (confluent-kafka) reads, on a real broker.

Every shape of record a topic can hold, on both paths: null and empty keys and values, a large value, no headers,
repeated header keys and a header without a value, non-ASCII header keys, CreateTime and LogAppendTime stamps, a
stamp of 0, and transactions, committed and aborted, whose markers and aborted records leave gaps in the offsets
(``read_committed``). Ranges start and end anywhere, on a marker or an aborted record included.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from spark_kafka_backup.kafka.columnar import EDGE_ENV, NativeEdgeError, native_edge
from spark_kafka_backup.spark.kafka_ranges import KafkaRange, KafkaTask
from spark_kafka_backup.spark.kafka_task import read_task
from tests.broker import BrokerUnderTest
from tests.kafka_helpers import create_topics


def _records(n: int) -> list[dict[str, Any]]:
    records = []
    for i in range(n):
        key = None if i % 7 == 0 else b"" if i % 7 == 1 else b"key-%d" % i
        value = None if i % 11 == 0 else b"" if i % 11 == 1 else (b"v%d-" % i) * (1 + i % 13)
        if i == 5:
            value = bytes(range(256)) * 1200  # 300 KiB
        headers = None if i % 3 == 0 else [("a", b"1"), ("a", None), ("ünï", b""), ("b", b"%d" % i)][: 1 + i % 4]
        records.append(
            {"key": key, "value": value, "headers": headers, "timestamp": 0 if i == 9 else 1_700_000_000_000 + i}
        )
    return records


def _fill(kafka: BrokerUnderTest, topic: str) -> int:
    """Plain records, a committed transaction, an aborted one, plain records again; the end offset."""
    from confluent_kafka import Producer

    plain = Producer(kafka.client_settings())
    records = _records(60)
    for record in records[:30]:
        plain.produce(topic, partition=0, **record)
    assert plain.flush(30) == 0
    transactional = Producer({**kafka.client_settings(), "transactional.id": f"edges-{uuid.uuid4().hex}"})
    transactional.init_transactions(30)
    for commit in (True, False):
        transactional.begin_transaction()
        for record in records[30:40] if commit else records[40:45]:
            transactional.produce(topic, partition=0, **record)
        transactional.flush(30)
        (transactional.commit_transaction if commit else transactional.abort_transaction)(30)
    for record in records[45:]:
        plain.produce(topic, partition=0, **record)
    assert plain.flush(30) == 0
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**kafka.client_settings(), "group.id": "edges"})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1])
    finally:
        consumer.close()


def _read(monkeypatch: pytest.MonkeyPatch, edge: str, item: KafkaRange) -> pa.Table:
    monkeypatch.setenv(EDGE_ENV, edge)
    batches = list(read_task(KafkaTask((item,))))
    assert all(batch.schema == batches[0].schema for batch in batches)
    return pa.Table.from_batches(batches) if batches else pa.table({})


@pytest.mark.parametrize("timestamps", ["CreateTime", "LogAppendTime"])
def test_the_native_edge_reads_exactly_what_the_reference_reads(
    kafka: BrokerUnderTest, monkeypatch: pytest.MonkeyPatch, timestamps: str
) -> None:
    monkeypatch.setenv(EDGE_ENV, "native")
    assert native_edge() is not None, "the native module is not built (./dev setup builds it)"
    topic = f"edges-{timestamps}-{uuid.uuid4().hex[:8]}"
    # Timestamps of 2023: without retention.ms=-1 the broker may delete them mid-test (seen in CI: "offsets 0..5 were
    # deleted at the source").
    create_topics(kafka, {topic: 1}, {topic: {"message.timestamp.type": timestamps, "retention.ms": "-1"}})
    end = _fill(kafka, topic)
    # 0..29 plain, 30..39 committed, 40 its marker, 41..45 aborted, 46 their marker, 47..61 plain.
    assert end == 62
    client = kafka.client_settings()
    whole = _read(monkeypatch, "reference", KafkaRange(topic, 0, 0, end, client, True, 30))
    assert whole.num_rows == 55  # the aborted records and the markers are not records
    kinds = set(whole.column("timestampType").to_pylist())
    assert kinds == ({1} if timestamps == "LogAppendTime" else {0})
    assert any(headers is None for headers in whole.column("headers").to_pylist())
    # Ranges: whole, inside, ending on the commit marker, only over the aborted records, from a marker, the last.
    ranges = [(0, end), (3, 29), (30, 41), (41, 47), (46, end), (61, end)] if timestamps == "CreateTime" else [(0, end)]
    for start, stop in ranges:
        item = KafkaRange(topic, 0, start, stop, client, True, 30)
        reference = _read(monkeypatch, "reference", item)
        native = _read(monkeypatch, "native", item)
        assert native.to_pylist() == reference.to_pylist(), (start, stop)
        assert native.schema == reference.schema or native.num_rows == 0
    without_headers = KafkaRange(topic, 0, 0, end, client, False, 30)
    assert (
        _read(monkeypatch, "native", without_headers).to_pylist()
        == _read(monkeypatch, "reference", without_headers).to_pylist()
    )


def test_a_packed_task_reads_on_the_native_edge_what_the_reference_reads(
    kafka: BrokerUnderTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Many ranges in one task, read at once: ranges ending on a commit marker, inside aborted records, at the
    end, and one of a partition that is complete long before the others; the same rows per partition on both paths,
    in batches of one partition each."""
    monkeypatch.setenv(EDGE_ENV, "native")
    assert native_edge() is not None, "the native module is not built (./dev setup builds it)"
    topics = [f"packed-edges-{n}-{uuid.uuid4().hex[:8]}" for n in range(3)]
    create_topics(kafka, dict.fromkeys(topics, 1), {topic: {"retention.ms": "-1"} for topic in topics})  # 2023 times
    ends = {topic: _fill(kafka, topic) for topic in topics}
    client = kafka.client_settings()
    # Ending on the commit marker, ending inside the aborted records, the whole partition.
    shapes = [(0, 41), (3, 44), (0, ends[topics[2]])]
    ranges = tuple(KafkaRange(topic, 0, start, stop, client, True, 30)
                   for topic, (start, stop) in zip(topics, shapes, strict=True))  # fmt: skip
    seen = {}
    for edge in ("reference", "native"):
        monkeypatch.setenv(EDGE_ENV, edge)
        rows: dict[str, list[dict[str, Any]]] = {}
        for batch in read_task(KafkaTask(ranges), batch_rows=7):
            (topic,) = set(batch.column("topic").to_pylist())
            assert set(batch.column("partition").to_pylist()) == {0}
            rows.setdefault(topic, []).extend(batch.to_pylist())
        seen[edge] = rows
    assert seen["native"] == seen["reference"]
    assert [len(seen["native"][topic]) for topic in topics] == [40, 37, 55]  # aborted records and markers are none


def test_large_records_come_in_batches_of_bounded_bytes_alone_and_packed(
    kafka: BrokerUnderTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task's memory does not grow with record size: each batch the native edge hands on holds at most
    HELD_BYTES of values (and one record past it), a single range's and a packed task's alike, every record once and
    in order."""
    from confluent_kafka import Producer

    from spark_kafka_backup.spark.columnar_reader import HELD_BYTES

    monkeypatch.setenv(EDGE_ENV, "native")
    assert native_edge() is not None, "the native module is not built (./dev setup builds it)"
    topics = [f"large-edges-{n}-{uuid.uuid4().hex[:8]}" for n in range(2)]
    create_topics(kafka, dict.fromkeys(topics, 1))
    size, count = 100_000, (HELD_BYTES * 5 // 2) // 100_000  # two and a half batches' worth per partition
    # Idempotent: Kafka keeps the produced order through retries. With a plain producer the order read differed from
    # the produced one once, on a loaded machine (values 18.. first; most likely a retried first batch landing after
    # later ones), and this test compares with the produced order.
    producer = Producer({**kafka.client_settings(), "linger.ms": "20", "enable.idempotence": "true"})
    for topic in topics:
        for i in range(count):
            producer.produce(topic, value=i.to_bytes(4, "big") * (size // 4))
    assert producer.flush(60) == 0
    client = kafka.client_settings()
    ranges = tuple(KafkaRange(topic, 0, 0, count, client, False, 30) for topic in topics)
    for task in (KafkaTask(ranges[:1]), KafkaTask(ranges)):
        seen: dict[str, list[int]] = {}
        batches = 0
        for batch in read_task(task):
            values = batch.column("value")
            assert pa.compute.sum(pa.compute.binary_length(values)).as_py() <= HELD_BYTES + size
            (topic,) = set(batch.column("topic").to_pylist())
            seen.setdefault(topic, []).extend(int.from_bytes(value[:4], "big") for value in values.to_pylist())
            batches += 1
        assert seen == {item.topic: list(range(count)) for item in task.ranges}
        assert batches >= 3 * len(task.ranges)


def test_a_packed_task_holds_a_bounded_amount_whatever_its_number_of_partitions(
    kafka: BrokerUnderTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """librdkafka fetches a packed task's partitions in turn, so they fill together: the records polled and not yet
    handed on stay below two HELD_BYTES (what is held and one poll) however many partitions there are, while each
    partition alone stays far below HELD_BYTES; every record once, in order."""
    from confluent_kafka import Producer

    from spark_kafka_backup.kafka.columnar import ColumnarConsumer
    from spark_kafka_backup.spark.columnar_reader import HELD_BYTES

    monkeypatch.setenv(EDGE_ENV, "native")
    assert native_edge() is not None, "the native module is not built (./dev setup builds it)"
    topics = [f"many-large-{n}-{uuid.uuid4().hex[:8]}" for n in range(20)]
    create_topics(kafka, dict.fromkeys(topics, 1))
    size, count = 100_000, 40  # 4 MB a partition, 80 MB in all
    producer = Producer({**kafka.client_settings(), "linger.ms": "20"})
    for i in range(count):
        for topic in topics:
            producer.produce(topic, value=i.to_bytes(4, "big") * (size // 4))
    assert producer.flush(60) == 0

    def value_bytes(batch: pa.RecordBatch | None) -> int:
        return 0 if batch is None else int(pa.compute.sum(pa.compute.binary_length(batch.column("value"))).as_py() or 0)

    polled = [0]
    poll = ColumnarConsumer.poll

    def counting_poll(self: Any, *args: Any, **kwargs: Any) -> Any:
        got = poll(self, *args, **kwargs)
        polled[0] += value_bytes(got.batch)
        return got

    monkeypatch.setattr(ColumnarConsumer, "poll", counting_poll)
    client = kafka.client_settings()
    ranges = tuple(KafkaRange(topic, 0, 0, count, client, False, 30) for topic in topics)
    seen: dict[str, list[int]] = {}
    handed_on = outstanding = 0
    for batch in read_task(KafkaTask(ranges)):
        outstanding = max(outstanding, polled[0] - handed_on)
        handed_on += value_bytes(batch)
        (topic,) = set(batch.column("topic").to_pylist())
        seen.setdefault(topic, []).extend(
            int.from_bytes(value[:4], "big") for value in batch.column("value").to_pylist()
        )
    assert seen == {topic: list(range(count)) for topic in topics}
    assert handed_on == polled[0] == len(topics) * count * size
    assert outstanding <= 2 * HELD_BYTES + size, outstanding


def test_a_wrong_edge_setting_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(EDGE_ENV, "fast")
    with pytest.raises(NativeEdgeError, match="KBACKUP_KAFKA_EDGE='fast': expected 'native', 'reference' or nothing"):
        native_edge()
    monkeypatch.setenv(EDGE_ENV, "reference")
    assert native_edge() is None


HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def _batch(records: list[dict[str, Any]]) -> pa.RecordBatch:
    """The records as the columns the native producer takes (timestamps in milliseconds)."""
    return pa.RecordBatch.from_arrays(
        [
            pa.array([r["key"] for r in records], pa.binary()),
            pa.array([r["value"] for r in records], pa.binary()),
            pa.array([r["timestamp"] for r in records], pa.int64()),
            pa.array([[{"key": k, "value": v} for k, v in r["headers"]] if r["headers"] else None for r in records],
                     HEADERS),
        ],
        names=["key", "value", "timestamp", "headers"],
    )  # fmt: skip


def _consumed(kafka: BrokerUnderTest, topic: str, count: int) -> list[tuple[Any, ...]]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**kafka.client_settings(), "group.id": f"check-{uuid.uuid4().hex}",
                         "isolation.level": "read_committed", "enable.partition.eof": "true"})  # fmt: skip
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen: list[tuple[Any, ...]] = []
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            messages = consumer.consume(1000, 0.5)
            seen += [(m.offset(), m.key(), m.value(), m.headers(), m.timestamp()[1]) for m in messages if not m.error()]
            if any(m.error() is not None and m.error().code() == -191 for m in messages) and len(seen) >= count:
                return seen
        raise AssertionError(f"{topic}: {len(seen)} of {count} records within 60 s")
    finally:
        consumer.close()


def test_the_native_producer_produces_what_the_reference_produces(kafka: BrokerUnderTest) -> None:
    from confluent_kafka import Producer

    from spark_kafka_backup.kafka.columnar_producer import ColumnarProducer

    native = native_edge()
    assert native is not None, "the native module is not built (./dev setup builds it)"
    records = _records(60)
    mine, theirs = (f"produced-{side}-{uuid.uuid4().hex[:8]}" for side in ("native", "reference"))
    create_topics(kafka, {mine: 1, theirs: 1})
    settings = {**kafka.client_settings(), "enable.idempotence": "true", "linger.ms": "5"}
    reference = Producer(settings)
    for record in records:
        reference.produce(theirs, partition=0, **record)
    assert reference.flush(30) == 0
    producer = ColumnarProducer(settings)
    batch = _batch(records)
    # In three calls, one of them a slice that starts mid-batch: delivery indexes go on from the caller's.
    producer.produce(mine, 0, batch.slice(0, 7), 100)
    producer.produce(mine, 0, batch.slice(7, 40), 107)
    producer.produce(mine, 0, batch.slice(47), 147)
    assert producer.flush(30) == 0
    reports = producer.deliveries()
    assert (reports.reported, reports.last_offset, reports.failures) == (60, 59, [])
    assert [reports.offset_of(100 + i) for i in range(60)] == list(range(60))
    producer.close()
    got, expected = _consumed(kafka, mine, 60), _consumed(kafka, theirs, 60)
    # Record 9 is stamped 0, which librdkafka sends as "now" on both paths (the restore refuses it unless told).
    assert got[9][4] > 0 and expected[9][4] > 0
    assert [row[:4] for row in got] == [row[:4] for row in expected]
    assert [row[4] for row in got if row[0] != 9] == [row[4] for row in expected if row[0] != 9]


def test_native_transactions_commit_abort_and_carry_the_marker(kafka: BrokerUnderTest) -> None:
    from confluent_kafka import Consumer, TopicPartition

    from spark_kafka_backup.kafka.columnar_producer import ColumnarProducer, ProducerError

    native = native_edge()
    assert native is not None
    topic, group = f"native-txn-{uuid.uuid4().hex[:8]}", f"marker-{uuid.uuid4().hex[:8]}"
    create_topics(kafka, {topic: 1})
    settings = {**kafka.client_settings(), "transactional.id": f"native-{uuid.uuid4().hex}", "linger.ms": "5"}
    producer = ColumnarProducer(settings)
    producer.init_transactions(30)
    records = _records(15)
    producer.begin_transaction()
    producer.produce(topic, 0, _batch(records[:10]), 0)
    assert producer.flush(30) == 0
    producer.send_offsets_to_transaction(topic, 0, 10, "restore-marker:10", group, 30)
    producer.commit_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, 0, _batch(records[10:]), 10)
    producer.abort_transaction(30)
    committed = _consumed(kafka, topic, 10)
    assert [(key, value) for _, key, value, _, _ in committed] == [(r["key"], r["value"]) for r in records[:10]]
    reader = Consumer({**kafka.client_settings(), "group.id": group})
    try:
        (position,) = reader.committed([TopicPartition(topic, 0)], timeout=30)
    finally:
        reader.close()
    assert (position.offset, position.metadata) == (10, "restore-marker:10")
    # A second producer with the same transactional id fences the first: its next transactional call says so.
    newer = ColumnarProducer(settings)
    newer.init_transactions(30)

    def one_more_transaction() -> None:
        producer.begin_transaction()
        producer.produce(topic, 0, _batch(records[:1]), 15)
        producer.commit_transaction(30)

    with pytest.raises(ProducerError) as fenced:
        one_more_transaction()
    assert fenced.value.fatal or fenced.value.requires_abort, fenced.value
    newer.close()
    producer.close()


def test_a_record_over_the_size_limit_and_wrong_buffers_are_refused_by_row(kafka: BrokerUnderTest) -> None:
    from spark_kafka_backup.kafka.columnar_producer import ColumnarProducer, ProducerError

    native = native_edge()
    assert native is not None
    topic = f"native-limits-{uuid.uuid4().hex[:8]}"
    create_topics(kafka, {topic: 1})
    producer = ColumnarProducer({**kafka.client_settings(), "message.max.bytes": "2000"})
    records = [
        {"key": b"k", "value": b"v" * (5000 if i == 3 else 10), "headers": None, "timestamp": 1} for i in range(6)
    ]
    with pytest.raises(ProducerError, match="record 3 refused"):
        producer.produce(topic, 0, _batch(records), 0)
    assert producer.flush(30) == 0
    assert producer.deliveries().reported == 3  # the three before it
    # Offsets that point outside their buffer: a ValueError naming the row, nothing read out of bounds.
    handle = producer._handle
    offsets = np.array([0, 1, 99], dtype=np.int32)
    with pytest.raises(ValueError, match="row 1 has offsets outside its buffers"):
        native.produce(handle, topic, 0, 10, 2, 0, None, offsets, b"ab", None, offsets, b"ab",
                       np.zeros(2, np.int64), None, None, None, None, None, None, None)  # fmt: skip
    assert producer.flush(30) == 0
    assert producer.deliveries().reported == 3  # row 0 was checked with row 1 and not queued either
    # Delivery indexes below what was forgotten, or far past it, are refused before anything is queued.
    producer.deliveries(forget_below=100)
    for first in (99, 100 + (1 << 24)):
        with pytest.raises(ValueError, match="outside the window of reports kept"):
            producer.produce(topic, 0, _batch(records[:1]), first)
    # Columns it would misread are refused: a wide list of headers, a null timestamp.
    wide = _batch(records[:2])
    wide = wide.set_column(3, "headers", wide.column("headers").cast(pa.large_list(HEADERS.value_type)))
    with pytest.raises(TypeError, match="headers: large_list"):
        producer.produce(topic, 0, wide, 100)
    unstamped = _batch(records[:2]).set_column(2, "timestamp", pa.array([None, 1], pa.int64()))
    with pytest.raises(ValueError, match="a null timestamp"):
        producer.produce(topic, 0, unstamped, 100)
    producer.close()
