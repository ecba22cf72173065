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
import dataclasses
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from spark_kafka_backup.catalog.ledger import CatalogLedger
from spark_kafka_backup.catalog.topics import record_topic
from spark_kafka_backup.errors import DeliveryError, SchemaIdError, TargetLimitError
from spark_kafka_backup.format.record import Record
from spark_kafka_backup.kafka.columnar import EDGE_ENV, native_edge
from spark_kafka_backup.partition.selection import Window
from spark_kafka_backup.partition.writer import PartitionWriter
from spark_kafka_backup.restore import marker as markers
from spark_kafka_backup.restore import transaction_run
from spark_kafka_backup.restore.partition_task import NATIVE_PRODUCER, REFERENCE_PRODUCER
from spark_kafka_backup.restore.repartition import Repartition, Source, key_partition
from spark_kafka_backup.restore.task import PartitionResult, PartitionTask, restore_partition
from spark_kafka_backup.schema_registry.wire import IdRewrite
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
def test_a_record_stamped_0_that_names_an_unknown_schema_id_is_refused_for_its_id_on_both_paths(
    kafka: BrokerUnderTest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edge: str
) -> None:
    """Its ids are rewritten before its timestamp is looked at: the error says to capture the registry again."""
    monkeypatch.setenv(EDGE_ENV, edge)
    records = [Record(i, 0, 0 if i == 12 else NOW + i, b"k%d" % i, _wired(9 if i == 12 else 1, b"v%d" % i))
               for i in range(20)]  # fmt: skip
    source = _backup(tmp_path, "stamped-wired", records)
    name = f"restore-zero-wired-{edge}-{uuid.uuid4().hex[:8]}"
    create_topics(kafka, {name: 1})
    task = dataclasses.replace(_task(source, name, kafka, Window(), {}), id_rewrite=IdRewrite({1: 4}, value=True))
    with pytest.raises(SchemaIdError, match=r"'stamped-wired' partition 0 offset 12: the value names schema id 9"):
        restore_partition(task)
    assert consume_all(kafka, [name]) == []  # one transaction, aborted


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


SPREAD_PARTITIONS = 3
#: Committed offsets of the groups on the backed-up partitions (none stored: every record there counts as unread).
SPREAD_GROUPS = {"spread-half": {0: 20, 1: 45}, "spread-all": {0: 60, 1: 60, 2: 60}, "spread-none": {}}
#: The backup's schema ids and the target registry's: 1 moves, 2 stays.
SPREAD_IDS = {1: 11, 2: 2}


def _wired(schema: int, payload: bytes) -> bytes:
    return b"\x00" + schema.to_bytes(4, "big") + payload


def _spread_backup(root: Path, topic: str) -> Path:
    """Three partitions whose timestamps interleave and now and then go back; keys in the schema registry's wire
    format (two ids), plain, empty and missing; values wired half of the time; headers on some."""
    for partition in range(SPREAD_PARTITIONS):
        with PartitionWriter(root / topic, topic, partition, max_segment_size=2_000, fsync=False,
                             ledger=CatalogLedger(root)) as writer:  # fmt: skip
            for offset in range(60):
                key = (None, b"", _wired(1 + offset % 2, b"user-%d" % (offset % 9)), b"plain-%d" % (offset % 5))[
                    offset % 4
                ]
                value = b"p%do%d" % (partition, offset)
                value = _wired(1 + offset % 3 // 2, value) if offset % 2 else value
                stamp = NOW - 3_600_000 + offset * 100 + partition * 7 - (250 if offset % 11 == 4 else 0)
                headers = (("n", b"%d" % offset),) if offset % 5 == 0 else ()
                writer.append(Record(offset * 2 if partition == 1 else offset, 0, stamp, key, value, headers))
    record_topic(root, topic, SPREAD_PARTITIONS, {})
    return root / topic


def _spread_task(source: Path, target: str, kafka: BrokerUnderTest, mode: str, partition: int) -> PartitionTask:
    windows = (Window(), Window(from_offset=10), Window(from_time=NOW - 3_600_000 + 1_000))
    sources = tuple(Source(p, windows[p]) for p in range(SPREAD_PARTITIONS))
    return PartitionTask(
        source_dir=str(source), source_topic=source.name, source_partition=-1, target_topic=target,
        target_partition=partition, window=Window(), identity=f"spread-edges-{target}-{partition}", resume_from=0,
        baseline=0, after_last=0, replaces=None, groups=dict.fromkeys(SPREAD_GROUPS, 0),
        client=kafka.client_settings(), batch_size=1 << 20,
        repartition=Repartition(mode, 2, sources, SPREAD_GROUPS),
        id_rewrite=IdRewrite(SPREAD_IDS, key=True, value=True, registry="http://target"),
    )  # fmt: skip


def _spread_outcome(result: PartitionResult) -> tuple[Any, ...]:
    return (result.selected, result.produced, result.skipped, result.produced_bytes, result.end_offset,
            result.group_offsets, result.read_again, result.fenced)  # fmt: skip


def _restored_by_partition(kafka: BrokerUnderTest, topic: str) -> dict[int, list[tuple[Any, ...]]]:
    """Each target partition's records in order, and the offsets they were found at."""
    found: dict[int, list[tuple[Any, ...]]] = {0: [], 1: []}
    for r in consume_all(kafka, [topic]):
        found[r["partition"]].append((r["offset"], r["key"], r["value"], r["timestamp"], r["headers"]))
    return found


def _placed(restored: dict[int, list[tuple[Any, ...]]], offsets: dict[str, int], partition: int) -> dict[str, int]:
    """Where each group was placed: the index of its record among the partition's records (the end: past them)."""
    at = {record[0]: index for index, record in enumerate(restored[partition])}
    return {group: at.get(offset, len(at)) for group, offset in offsets.items()}


class _InterruptedError(Exception):
    pass


@pytest.mark.parametrize("mode", ["murmur2", pytest.param("round-robin", marks=pytest.mark.long)])
def test_both_producers_repartition_and_rewrite_schema_ids_alike(
    kafka: BrokerUnderTest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """The merged stream, its routing with keys hashed as produced, the ids rewritten, the groups placed and the
    records they read again: the same on both paths, and a run stopped after a few transactions on one path is
    finished by the other exactly."""
    source = _spread_backup(tmp_path, "spread")
    monkeypatch.setattr(markers, "TRANSACTION_RECORDS", 9)
    seen: dict[str, Any] = {}
    for edge in EDGES:
        monkeypatch.setenv(EDGE_ENV, edge)
        name = f"spread-edges-{edge}-{uuid.uuid4().hex[:8]}"
        create_topics(kafka, {name: 2})
        outcomes = []
        for partition in (0, 1):
            result = restore_partition(_spread_task(source, name, kafka, mode, partition))
            assert result.producer == {"native": NATIVE_PRODUCER, "reference": REFERENCE_PRODUCER}[edge]
            outcomes.append(_spread_outcome(result))
        seen[edge] = (outcomes, _restored_by_partition(kafka, name))
    assert seen["native"] == seen["reference"]
    outcomes, restored = seen["native"]
    records = [r for p in (0, 1) for r in restored[p]]
    assert sum(o[1] for o in outcomes) == len(records) == 60 + 55 + 50  # p1 from offset 10, p2 from its 10th record
    keys = [base64.b64decode(r[1]) for r in records if r[1] is not None]
    assert _wired(11, b"user-0") in keys and not any(k.startswith(_wired(1, b"")[:5]) for k in keys)
    if mode == "murmur2":  # keys as produced decide the partition
        for p in (0, 1):
            assert all(key_partition(base64.b64decode(r[1]), 2) == p for r in restored[p] if r[1] is not None)
    assert any(o[6].get("spread-half") for o in outcomes)  # interleaved: the group reads some records again

    # Stopped after three transactions of each target partition on one path, finished on the other.
    for first, then in (("reference", "native"), ("native", "reference")):
        name = f"spread-resumed-{first}-{uuid.uuid4().hex[:8]}"
        create_topics(kafka, {name: 2})
        commits = {"count": 0}
        real_commit = transaction_run._Run._commit  # one protocol, whichever producer the edge gives it

        def commit(self: Any, *args: Any, _real: Any = real_commit, commits: dict[str, int] = commits) -> None:
            if commits["count"] == 3:
                raise _InterruptedError
            commits["count"] += 1
            _real(self, *args)

        monkeypatch.setenv(EDGE_ENV, first)
        for partition in (0, 1):
            commits["count"] = 0
            with monkeypatch.context() as patched:
                patched.setattr(transaction_run._Run, "_commit", commit)
                with pytest.raises(_InterruptedError):
                    restore_partition(_spread_task(source, name, kafka, mode, partition))
        monkeypatch.setenv(EDGE_ENV, then)
        resumed = [restore_partition(_spread_task(source, name, kafka, mode, p)) for p in (0, 1)]
        assert [r.skipped for r in resumed] == [27, 27]
        again = _restored_by_partition(kafka, name)
        for p in (0, 1):
            assert [r[1:] for r in again[p]] == [r[1:] for r in restored[p]]
            assert _placed(again, resumed[p].group_offsets, p) == _placed(restored, outcomes[p][5], p)
            assert resumed[p].read_again == outcomes[p][6]
