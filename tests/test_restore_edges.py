"""The restore's native producer produces what its reference (confluent-kafka) produces, on a real broker.

One restore task on each path, into topics of their own, with records of every shape (null and empty keys and
values, a large value, repeated headers and a header without a value, CreateTime, LogAppendTime and no timestamp),
offsets with gaps, windows by offset and by time, consumer groups committed before, inside, between and after the
records, and transactions cut every few records: the same records come back at the same target offsets, the same
groups land at the same places, the same counts are reported. A rerun on the other path finds it all there. A
record stamped 0 and a record the broker rejects end both paths in the same line.
"""

from __future__ import annotations

import base64
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from spark_kafka_backup.catalog.ledger import CatalogLedger
from spark_kafka_backup.catalog.topics import record_topic
from spark_kafka_backup.errors import DeliveryError, TargetLimitError
from spark_kafka_backup.format.record import Record
from spark_kafka_backup.kafka.columnar import EDGE_ENV, native_edge
from spark_kafka_backup.partition.writer import PartitionWriter
from spark_kafka_backup.restore import marker as markers
from spark_kafka_backup.restore.partition_task import NATIVE_PRODUCER, REFERENCE_PRODUCER
from spark_kafka_backup.restore.selection import Window
from spark_kafka_backup.restore.task import PartitionResult, PartitionTask, restore_partition
from tests.broker import BrokerUnderTest
from tests.kafka_helpers import consume_all, create_topics

EDGES = ("reference", "native")
NOW = int(time.time() * 1000)


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _records() -> list[Record]:
    """120 records at offsets with gaps (as transaction markers leave), of every shape."""
    records = []
    offset = 0
    for i in range(120):
        offset += 3 if i % 17 == 5 else 1
        key = None if i % 7 == 0 else b"" if i % 7 == 1 else b"key-%d" % i
        value = None if i % 11 == 0 else b"" if i % 11 == 1 else (b"v%d-" % i) * (1 + i % 13)
        if i == 50:
            value = bytes(range(256)) * 1200  # 300 KiB
        headers: tuple[tuple[str, bytes | None], ...] = (
            () if i % 3 == 0 else (("a", b"1"), ("a", None), ("ünï", b""), ("b", b"%d" % i))[: 1 + i % 4]
        )
        kind = (0, 0, 1, -1)[i % 4]
        stamp = None if kind == -1 else NOW - 3_600_000 + i * 1000
        records.append(Record(offset, kind, stamp, key, value, headers))
    return records


def _backup(root: Path, topic: str, records: list[Record]) -> Path:
    with PartitionWriter(root / topic, topic, 0, max_segment_size=20_000, fsync=False,
                         ledger=CatalogLedger(root)) as writer:  # fmt: skip
        for record in records:
            writer.append(record)
    record_topic(root, topic, 1, {})
    return root / topic


def _task(source: Path, target: str, kafka: BrokerUnderTest, window: Window, groups: dict[str, int]) -> PartitionTask:
    return PartitionTask(
        source_dir=str(source), source_topic=source.name, source_partition=0, target_topic=target, target_partition=0,
        window=window, identity=f"edges-{target}", resume_from=0, baseline=0, after_last=0, replaces=None,
        groups=groups, client=kafka.client_settings(), batch_size=1 << 20,
    )  # fmt: skip


def _outcome(result: PartitionResult) -> tuple[Any, ...]:
    return (result.selected, result.produced, result.skipped, result.produced_bytes, result.end_offset,
            result.group_offsets, result.fenced, result.taken_over)  # fmt: skip


def _restored(kafka: BrokerUnderTest, topic: str) -> list[tuple[Any, ...]]:
    return [
        (r["offset"], r["key"], r["value"], r["timestamp"], r["timestampType"], r["headers"])
        for r in consume_all(kafka, [topic])
    ]


@pytest.fixture(autouse=True)
def _native_built() -> None:
    if native_edge() is None:
        pytest.fail("the native Kafka edge is not built: pip install -e . builds it")


@pytest.mark.parametrize(
    "window",
    [Window(), Window(from_offset=20, to_offset=110, from_time=NOW - 3_600_000 + 30_000, to_time=NOW)],
    ids=["everything", "offsets-and-time"],
)
def test_both_producers_restore_the_same_records_and_place_the_groups_alike(
    kafka: BrokerUnderTest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, window: Window
) -> None:
    records = _records()
    source = _backup(tmp_path, "orders", records)
    last = records[-1].offset
    gap = next(r.offset for r in records if r.offset - 1 not in {p.offset for p in records} and r.offset > 1) - 1
    groups = {"before": 0, "in-a-gap": gap, "middle": records[64].offset, "at-the-end": last, "past": last + 50}
    monkeypatch.setattr(markers, "TRANSACTION_RECORDS", 9)  # many transactions, cut inside the reader's batches
    seen: dict[str, Any] = {}
    topics = {}
    for edge in EDGES:
        monkeypatch.setenv(EDGE_ENV, edge)
        topics[edge] = f"restore-edges-{edge}-{uuid.uuid4().hex[:8]}"
        create_topics(kafka, {topics[edge]: 1})
        result = restore_partition(_task(source, topics[edge], kafka, window, groups))
        seen[edge] = (_outcome(result), _restored(kafka, topics[edge]))
        assert result.producer == {"native": NATIVE_PRODUCER, "reference": REFERENCE_PRODUCER}[edge]
    assert seen["native"] == seen["reference"]
    outcome, restored = seen["native"]
    expected = [r for r in records if window.selects(r)]
    assert outcome[1] == len(expected) == len(restored) and outcome[2] == 0
    assert [(r[1], r[2], r[3], r[5]) for r in restored] == [
        (b64(r.key), b64(r.value), r.timestamp, [[k, b64(v)] for k, v in r.headers]) for r in expected
    ]
    # A rerun on the other path finds everything there and places the groups where the first run did.
    for first, rerun in (("reference", "native"), ("native", "reference")):
        monkeypatch.setenv(EDGE_ENV, rerun)
        again = restore_partition(_task(source, topics[first], kafka, window, groups))
        assert (again.produced, again.skipped, again.group_offsets, again.end_offset) == (
            0, outcome[0], outcome[5], outcome[4]
        )  # fmt: skip
        assert _restored(kafka, topics[first]) == restored


@pytest.mark.parametrize("edge", EDGES)
def test_a_record_stamped_0_is_refused_by_name_on_both_paths(
    kafka: BrokerUnderTest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edge: str
) -> None:
    monkeypatch.setenv(EDGE_ENV, edge)
    records = [Record(i, 0, 0 if i == 12 else NOW + i, b"k%d" % i, b"v%d" % i) for i in range(20)]
    source = _backup(tmp_path, "stamped", records)
    name = f"restore-zero-{edge}-{uuid.uuid4().hex[:8]}"
    create_topics(kafka, {name: 1})
    monkeypatch.setattr(markers, "TRANSACTION_RECORDS", 5)
    with pytest.raises(TargetLimitError, match=r"topic 'stamped' partition 0 offset 12 is stamped 0 "):
        restore_partition(_task(source, name, kafka, Window(), {}))
    # the transactions before the one holding it stay committed, as on the reference path
    assert [r[1] for r in _restored(kafka, name)] == [b64(b"k%d" % i) for i in range(10)]


@pytest.mark.parametrize("edge", EDGES)
def test_a_record_the_broker_rejects_is_named_on_both_paths(
    kafka: BrokerUnderTest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edge: str
) -> None:
    """librdkafka gives every record of a rejected batch the batch's error: both paths name the record that
    explains it, and nothing of the transaction stays."""
    monkeypatch.setenv(EDGE_ENV, edge)
    day = 86_400_000
    records = [Record(i, 0, NOW + (40 * day if i == 7 else i), b"k%d" % i, b"v%d" % i) for i in range(20)]
    source = _backup(tmp_path, "t", records)
    name = f"restore-rejecting-{edge}-{uuid.uuid4().hex[:8]}"
    create_topics(kafka, {name: 1})  # message.timestamp.after.max.ms: Kafka 4's default, 1 hour
    with pytest.raises(DeliveryError) as failure:
        restore_partition(_task(source, name, kafka, Window(), {}))
    assert str(failure.value) == (
        f"topic {name!r} partition 0: the broker rejected the record of t/0 offset 7 (timestamp {NOW + 40 * day}): "
        "Broker: Invalid timestamp"
    )
    assert consume_all(kafka, [name]) == []
