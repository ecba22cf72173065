"""The native Kafka edge reads exactly what the reference path (confluent-kafka) reads, on a real broker.

Every shape of record a topic can hold, on both paths: null and empty keys and values, a large value, no headers,
repeated header keys and a header without a value, non-ASCII header keys, CreateTime and LogAppendTime stamps, a
stamp of 0, and transactions, committed and aborted, whose markers and aborted records leave gaps in the offsets
(``read_committed``). Ranges start and end anywhere, on a marker or an aborted record included.
"""

from __future__ import annotations

import uuid
from typing import Any

import pyarrow as pa
import pytest

from spark_kafka_backup.kafka.columnar import EDGE_ENV, NativeEdgeError, native_edge
from spark_kafka_backup.spark.kafka_reader import KafkaRange, KafkaTask
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
    create_topics(kafka, {topic: 1}, {topic: {"message.timestamp.type": timestamps}})
    end = _fill(kafka, topic)
    # 0..29 plain, 30..39 committed, 40 its marker, 41..45 aborted, 46 their marker, 47..61 plain.
    assert end == 62
    client = kafka.client_settings()
    whole = _read(monkeypatch, "reference", KafkaRange(topic, 0, 0, end, client, True, 30))
    assert whole.num_rows == 55  # the aborted records and the markers are not records
    kinds = set(whole.column("timestampType").to_pylist())
    assert kinds == ({1} if timestamps == "LogAppendTime" else {0})
    assert any(headers is None for headers in whole.column("headers").to_pylist())
    # Ranges: whole, inside, ending on the commit marker, into and only over the aborted records, from a marker.
    for start, stop in [(0, end), (3, 29), (30, 41), (35, 44), (41, 47), (46, end), (0, 1), (61, end)]:
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


def test_a_wrong_edge_setting_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(EDGE_ENV, "fast")
    with pytest.raises(NativeEdgeError, match="KBACKUP_KAFKA_EDGE='fast': expected 'native', 'reference' or nothing"):
        native_edge()
    monkeypatch.setenv(EDGE_ENV, "reference")
    assert native_edge() is None
