"""What Apache Kafka's log really looks like, backed up exactly, with both Kafka sources.

Every case knows the offset of every record it produced (from delivery
reports), so the backup is checked offset by offset against what was
produced, not only against what a consumer reads:

- committed and aborted transactions: the backup holds exactly the committed
  records at their real offsets; the aborted records and the commit/abort
  markers leave gaps; groups parked on a marker or inside the aborted range
  are remapped by the documented rule (``#restored records below the offset``);
- a compacted topic after the log cleaner ran: compaction gaps, and the
  tombstones still in the log, kept;
- a topic whose head was removed with ``delete_records``;
- a 5 MB record, with the topic's and the clients' size limits raised.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.broker import BrokerUnderTest
from tests.kafka_helpers import backed_up, client_config_file, consume_all, create_topics, run_backup, run_kbackup
from tests.restore_helpers import Target, comparable, group_offsets, run_restore

SOURCES = ["python", "spark"]
#: Spark's source is run on the shapes where it has its own logic (transaction markers, and the 5 MB record's fetch
#: sizes: a long test, ./dev test-long); compaction gaps and a moved log start it reads like any consumer, and CI
#: time is short.


@dataclass(frozen=True)
class Produced:
    """One produced record and where Kafka put it."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def _b64(data: bytes | None) -> str | None:
    import base64

    return None if data is None else base64.b64encode(data).decode()


def _produce(producer: Any, topic: str, items: Sequence[tuple[bytes | None, bytes | None]]) -> list[Produced]:
    """Produce ``items`` (key, value) to partition 0 and return them with their offsets."""
    delivered: list[Produced] = []

    def on_delivery(error: Any, message: Any) -> None:
        assert error is None, error
        delivered.append(Produced(message.partition(), message.offset(), message.key(), message.value()))

    for key, value in items:
        producer.produce(topic, key=key, value=value, partition=0, on_delivery=on_delivery)
    producer.flush(60)
    assert len(delivered) == len(items)
    return delivered


#: The output of the last backup :func:`_backup` ran (stdout, then stderr).
_last_output: list[str] = [""]


def _backup(kafka: BrokerUnderTest, tmp_path: Path, source: str, *topics: str, extra: list[str] | None = None) -> Path:
    target = tmp_path / f"backup-{source}"
    config = tmp_path / f"client-{source}.properties"
    client_config_file(config, kafka.extra_settings)
    result = run_backup(
        "--bootstrap-server", kafka.bootstrap_servers, "--command-config", config,
        "--target-dir", target, "--topics", ",".join(topics), "--snapshot", "--kafka-source", source,
        *(extra or []),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    _last_output[0] = result.stdout + result.stderr
    return target


def _as_records(backup: list[dict[str, Any]]) -> list[tuple[int, int, str | None, str | None]]:
    return [(r["partition"], r["offset"], r["key"], r["value"]) for r in backup]


def _expected(produced: list[Produced]) -> list[tuple[int, int, str | None, str | None]]:
    return sorted((p.partition, p.offset, _b64(p.key), _b64(p.value)) for p in produced)


# -- transactions ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def transactions(kafka: BrokerUnderTest) -> tuple[str, list[Produced], list[Produced]]:
    """Topic ``shape-tx``: 5 committed, 3 aborted, 2 committed records, one producer, one partition.

    Apache Kafka gives every record and every marker an offset:
    0-4 committed, 5 commit marker, 6-8 aborted, 9 abort marker, 10-11 committed, 12 commit marker.
    """
    from confluent_kafka import Producer

    topic = "shape-tx"
    create_topics(kafka, {topic: 1})
    tx = Producer(kafka.client_settings(**{"transactional.id": "shape-tx-producer"}))
    tx.init_transactions(30)
    committed: list[Produced] = []
    aborted: list[Produced] = []
    for first, count, commit in ((0, 5, True), (5, 3, False), (8, 2, True)):
        tx.begin_transaction()
        items = [
            (f"k{i}".encode(), f"{'committed' if commit else 'aborted'}-{i}".encode())
            for i in range(first, first + count)
        ]
        delivered = _produce(tx, topic, items)
        if commit:
            tx.commit_transaction(30)
            committed += delivered
        else:
            tx.abort_transaction(30)
            aborted += delivered
    return topic, committed, aborted


def test_transaction_offsets_are_the_real_ones(transactions: tuple[str, list[Produced], list[Produced]]) -> None:
    """The fixture's own assumption, checked against the broker: markers and aborted records take offsets."""
    _, committed, aborted = transactions
    assert [p.offset for p in committed] == [0, 1, 2, 3, 4, 10, 11]
    assert [p.offset for p in aborted] == [6, 7, 8]


@pytest.mark.parametrize("source", SOURCES)
def test_backup_of_committed_and_aborted_transactions_is_exact(
    kafka: BrokerUnderTest,
    target: Target,
    transactions: tuple[str, list[Produced], list[Produced]],
    tmp_path: Path,
    source: str,
) -> None:
    from confluent_kafka import Consumer, TopicPartition

    topic, committed, _ = transactions
    # Groups at: the start, the commit marker (5), inside the aborted range (7), the abort marker (9),
    # between the last two records (11), and the end (13, after the last marker).
    parked = {"tx-at-0": 0, "tx-at-commit-marker": 5, "tx-in-aborted": 7, "tx-at-abort-marker": 9,
              "tx-at-11": 11, "tx-at-end": 13}  # fmt: skip
    for group, offset in parked.items():
        consumer = Consumer(kafka.client_settings(**{"group.id": f"{group}-{source}", "enable.auto.commit": "false"}))
        consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
        consumer.close()

    backup = _backup(kafka, tmp_path, source, topic)
    records = backed_up(backup, [topic])
    assert _as_records(records) == _expected(committed)
    assert [r["offset"] for r in records] == [0, 1, 2, 3, 4, 10, 11]
    if source != "python":
        return  # the same records as the Python source backed up (above): its restore, below, covers both (CI time)

    name = target.name(f"{topic}-{source}")
    result = run_restore(*target.args(tmp_path), "--source-dir", backup, "--topic-map", f"{topic}={name}")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    restored = consume_all(target.broker, [name])
    assert [r["offset"] for r in restored] == list(range(7))
    assert [(r["key"], r["value"]) for r in restored] == [(r["key"], r["value"]) for r in records]
    # The rule: a group at source offset C resumes at (number of restored records below C).
    expected = {"tx-at-0": 0, "tx-at-commit-marker": 5, "tx-in-aborted": 5, "tx-at-abort-marker": 5,
                "tx-at-11": 6, "tx-at-end": 7}  # fmt: skip
    for group, offset in expected.items():
        assert group_offsets(target.broker, f"{group}-{source}") == {(name, 0): offset}, group


# -- compaction -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compacted(kafka: BrokerUnderTest) -> tuple[str, list[Produced]]:
    """Topic ``shape-compacted`` after the log cleaner ran: 10 keys written 20 times each, some deleted."""
    from confluent_kafka import Producer

    topic = "shape-compacted"
    create_topics(
        kafka,
        {topic: 1},
        {
            topic: {
                "cleanup.policy": "compact",
                "segment.ms": "200",
                "min.cleanable.dirty.ratio": "0.001",
                "min.compaction.lag.ms": "0",
                # Tombstones stay for a day: the backup must keep them while they exist.
                "delete.retention.ms": "86400000",
            }
        },
    )
    producer = Producer(kafka.client_settings(**{"linger.ms": "0"}))
    produced: list[Produced] = []
    for round_ in range(20):
        # Ten keys rewritten every round (the last round deletes three), and one written once: the
        # cleaner keeps the once-written records between the removed ones, so the log has gaps.
        items: list[tuple[bytes | None, bytes | None]] = [
            (f"key-{k}".encode(), None if (round_ == 19 and k % 4 == 0) else f"v{round_}-{k}".encode())
            for k in range(10)
        ]
        items.append((f"once-{round_}".encode(), f"only-{round_}".encode()))
        produced += _produce(producer, topic, items)
        time.sleep(0.05)
    # Roll the active segment so everything above is cleanable, then wait for the cleaner.
    time.sleep(0.5)
    produced += _produce(producer, topic, [(b"roll", b"roll-1")])
    time.sleep(0.5)
    produced += _produce(producer, topic, [(b"roll", b"roll-2")])
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if len(consume_all(kafka, [topic])) < len(produced) // 2:
            break
        time.sleep(1)
    else:
        pytest.fail("the log cleaner did not compact shape-compacted within 90 s")
    return topic, produced


@pytest.mark.parametrize("source", ["python"])
# CI time: in the long tier; the quick tier covers log gaps read exactly: the transactions test and
# tests/test_source_reading.py
@pytest.mark.long
def test_backup_of_a_compacted_topic_is_exact(
    kafka: BrokerUnderTest, compacted: tuple[str, list[Produced]], tmp_path: Path, source: str
) -> None:
    topic, produced = compacted
    by_offset = {p.offset: p for p in produced}
    in_log = consume_all(kafka, [topic])
    records = backed_up(_backup(kafka, tmp_path, source, topic), [topic])
    # Exactly what the log holds now, and every record exactly as it was produced at its offset.
    assert records == in_log
    assert _as_records(records) == _expected([by_offset[r["offset"]] for r in records])
    offsets = [r["offset"] for r in records]
    assert len(offsets) < len(produced) and offsets[-1] - offsets[0] + 1 > len(offsets)  # compaction gaps
    # The latest write of every key survives; deleted keys survive as tombstones (value null).
    latest: dict[bytes | None, Produced] = {}
    for p in produced:
        latest[p.key] = p
    kept = {r["offset"] for r in records}
    assert {p.offset for p in latest.values()} <= kept
    tombstones = [r for r in records if r["value"] is None]
    assert sorted(str(r["key"]) for r in tombstones) == sorted(str(_b64(f"key-{k}".encode())) for k in (0, 4, 8))


# -- delete_records ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def head_deleted(kafka: BrokerUnderTest) -> tuple[str, list[Produced]]:
    """Topic ``shape-deleted-head``: 100 records, then delete_records below offset 40."""
    from confluent_kafka import Producer, TopicPartition
    from confluent_kafka.admin import AdminClient

    topic = "shape-deleted-head"
    create_topics(kafka, {topic: 1})
    produced = _produce(
        Producer(kafka.client_settings()), topic, [(f"k{i}".encode(), f"v{i}".encode()) for i in range(100)]
    )
    admin = AdminClient(kafka.client_settings())
    for future in admin.delete_records([TopicPartition(topic, 0, 40)]).values():
        assert future.result(30).low_watermark == 40
    return topic, produced


@pytest.mark.parametrize("source", ["python"])
# CI time: in the long tier; the quick tier covers log gaps read exactly: the transactions test and
# tests/test_source_reading.py
@pytest.mark.long
def test_backup_after_delete_records_starts_at_the_new_log_start(
    kafka: BrokerUnderTest, head_deleted: tuple[str, list[Produced]], tmp_path: Path, source: str
) -> None:
    topic, produced = head_deleted
    records = backed_up(_backup(kafka, tmp_path, source, topic), [topic])
    assert _as_records(records) == _expected([p for p in produced if p.offset >= 40])
    assert [r["offset"] for r in records] == list(range(40, 100))
    if source == "python":  # said once, and not contradicted at the end
        told = f"topic '{topic}' partition 0: offsets 0..39 no longer exist on the cluster"
        assert _last_output[0].count(told) == 1, _last_output[0][-3000:]


@pytest.mark.long
def test_records_deleted_between_two_runs_are_a_named_gap_and_the_rest_is_exact(
    kafka: BrokerUnderTest, tmp_path: Path
) -> None:
    """Retention (here ``delete_records``) removes offsets the backup had not read yet: the next run says which,
    records them as lost at the source, backs up the rest exactly, ``describe`` shows them (not as missing), and the
    snapshot exits 1 unless --accept-source-loss."""
    from confluent_kafka import Producer, TopicPartition
    from confluent_kafka.admin import AdminClient

    topic = "shape-lost-between-runs"
    create_topics(kafka, {topic: 1})
    producer = Producer(kafka.client_settings())
    first = _produce(producer, topic, [(f"k{i}".encode(), f"v{i}".encode()) for i in range(100)])
    target = _backup(kafka, tmp_path, "python", topic)
    second = _produce(producer, topic, [(f"k{i}".encode(), f"v{i}".encode()) for i in range(100, 200)])
    admin = AdminClient(kafka.client_settings())
    for future in admin.delete_records([TopicPartition(topic, 0, 150)]).values():
        assert future.result(30).low_watermark == 150
    config = tmp_path / "client-again.properties"
    client_config_file(config, kafka.extra_settings)
    again = run_backup(
        "--bootstrap-server", kafka.bootstrap_servers, "--command-config", config,
        "--target-dir", target, "--topics", topic, "--snapshot",
    )  # fmt: skip
    output = again.stdout + again.stderr
    assert again.returncode == 1, output[-4000:]
    assert f"{topic}/0 offsets 100..149 were deleted at the source before the backup read them" in output
    assert again.stderr.count("spark-kafka-backup backup: error: ") == 1, again.stderr
    records = backed_up(target, [topic])
    assert _as_records(records) == _expected([*first, *[p for p in second if p.offset >= 150]])
    described = run_kbackup("describe", target, "--json", check=True)
    (partition,) = json.loads(described.stdout)["topics"][0]["partitions"]
    assert partition["missingRanges"] == [], partition
    assert partition["lostAtSource"] == [{"first": 100, "last": 149, "how": "read"}], partition


# -- a 5 MB record ----------------------------------------------------------------------------

BIG = 5 * 1024 * 1024
LIMIT = str(8 * 1024 * 1024)


@pytest.mark.long
def test_a_5_mb_record_round_trips(kafka: BrokerUnderTest, target: Target, tmp_path: Path) -> None:
    """The operator raised the topic's max.message.bytes and the producers' limits; nothing else is needed."""
    from confluent_kafka import Producer

    topic = "shape-big"
    create_topics(kafka, {topic: 1}, {topic: {"max.message.bytes": LIMIT}})
    value = bytes(range(256)) * (BIG // 256)
    items: list[tuple[bytes | None, bytes | None]] = [(b"small-1", b"x"), (b"big", value), (b"small-2", b"y")]
    produced = _produce(Producer(kafka.client_settings(**{"message.max.bytes": LIMIT})), topic, items)

    backups = {source: backed_up(_backup(kafka, tmp_path, source, topic), [topic]) for source in SOURCES}
    for records in backups.values():
        assert _as_records(records) == _expected(produced)

    backup = tmp_path / "backup-python"
    config = tmp_path / "big-target.properties"
    # The restore's producer needs the raised limit too (the Java client's name, as the original took it).
    client_config_file(config, {**target.broker.extra_settings, "max.request.size": LIMIT})
    name = target.name(topic)
    result = run_restore(
        "--bootstrap-server", target.broker.bootstrap_servers, "--command-config", config,
        "--source-dir", backup, "--topic-map", f"{topic}={name}",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    restored = consume_all(target.broker, [name])
    assert comparable(restored) == comparable(backups["python"])
    assert restored[1]["value"] == _b64(value)
