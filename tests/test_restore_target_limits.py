"""On Apache Kafka: targets that would reject or change what a restore writes, and timestamps librdkafka treats
specially. Each case ends with every record back exactly or with one line naming the cause, nothing produced."""

from __future__ import annotations

import base64
import time
from pathlib import Path

import pytest

from spark_kafka_backup.catalog.ledger import CatalogLedger
from spark_kafka_backup.catalog.topics import record_topic
from spark_kafka_backup.format.record import Record
from spark_kafka_backup.partition.writer import PartitionWriter
from spark_kafka_backup.restore.target_limits import LONG_MAX
from tests.kafka_helpers import consume_all, create_topics
from tests.restore_helpers import Target, restore_python, run_restore
from tests.unit.test_restore_profile import kafka_record_size

DAY = 86_400_000


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _write(root: Path, topic: str, records: list[Record], config: dict[str, str] | None = None) -> None:
    with PartitionWriter(root / topic, topic, 0, max_segment_size=4000, fsync=False,
                         ledger=CatalogLedger(root)) as writer:  # fmt: skip
        for record in records:
            writer.append(record)
    record_topic(root, topic, 1, config or {})


def _config(target: Target, topic: str, key: str) -> str:
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient(target.broker.client_settings())
    described = next(iter(admin.describe_configs([ConfigResource("TOPIC", topic)]).values())).result(30)
    return str(described[key].value)


def _topics(target: Target) -> set[str]:
    from confluent_kafka.admin import AdminClient

    return set(AdminClient(target.broker.client_settings()).list_topics(timeout=10).topics)


def _one_line(result: object) -> str:
    stderr: str = result.stderr  # type: ignore[attr-defined]
    assert result.returncode == 1, stderr  # type: ignore[attr-defined]
    assert len(stderr.strip().splitlines()) == 1, stderr
    return stderr


def test_every_timestamp_kafka_accepts_comes_back_or_is_refused_by_name(target: Target, tmp_path: Path) -> None:
    now = int(time.time() * 1000)
    backup = tmp_path / "backup"
    records = [
        Record(0, 0, now - 1000, b"k0", b"normal"),
        Record(1, 0, 0, b"k1", b"stamped zero"),
        Record(2, 0, -5, b"k2", b"before 1970"),
        Record(3, -2, None, b"k3", b"CreateTime without a timestamp"),
        Record(4, -1, None, b"k4", b"no timestamp type"),
        Record(5, 1, now - 2000, b"k5", b"LogAppendTime"),
        Record(6, 0, now + 30 * DAY, b"k6", b"a month ahead"),
        Record(7, 0, 1, b"k7", b"one millisecond"),
    ]
    _write(backup, "stamps", records, {"retention.ms": str(7 * DAY)})
    name = target.name("stamps-restored")
    args = [*target.args(tmp_path), "--source-dir", str(backup), "--topic-map", f"stamps={name}"]

    refused = _one_line(restore_python(*args))
    assert "1 record(s) of 'stamps' are stamped 0 (1970-01-01T00:00:00.000Z; partition:offset 0:1)" in refused
    assert "--restamp-zero-timestamps" in refused
    assert name not in _topics(target)

    # An existing topic with Kafka 4's default message.timestamp.after.max.ms (1 hour) would reject offset 6.
    existing = target.name("stamps-existing")
    create_topics(target.broker, {existing: 1})
    into_existing = [*target.args(tmp_path), "--source-dir", str(backup), "--topic-map", f"stamps={existing}"]
    ahead = _one_line(restore_python(*into_existing, "--restamp-zero-timestamps"))
    assert f"topic {existing!r}: the broker would reject the newest restored records (" in ahead
    assert ") under message.timestamp.after.max.ms=3600000" in ahead
    assert f"raise message.timestamp.after.max.ms of {existing!r} first" in ahead

    started = int(time.time() * 1000)
    result = run_restore(*args, "--restamp-zero-timestamps")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    said = result.stdout + result.stderr
    assert f"{name}: created with message.timestamp.after.max.ms={LONG_MAX}" in said
    assert f"{name}: created with retention.ms=-1" in said  # -5 is older than any retention
    assert _config(target, name, "message.timestamp.after.max.ms") == str(LONG_MAX)
    restored = consume_all(target.broker, [name])
    assert [(r["offset"], r["value"]) for r in restored] == [(r.offset, b64(r.value)) for r in records]
    stamps = [(r["timestampType"], r["timestamp"]) for r in restored]
    assert stamps[0] == ("CreateTime", now - 1000)
    assert stamps[1][0] == "CreateTime" and stamps[1][1] >= started  # restamped, as accepted
    assert stamps[2] == ("CreateTime", -5)
    assert stamps[3] == ("CreateTime", None)  # Kafka's -1, as it came
    assert stamps[4] == ("CreateTime", None)  # message format v2 has no "none" type: -1 is how Kafka writes it
    assert stamps[5] == ("CreateTime", now - 2000)
    assert stamps[6] == ("CreateTime", now + 30 * DAY)
    assert stamps[7] == ("CreateTime", 1)


def test_compaction_sizes_and_retention_bytes_of_the_target_are_checked_first(target: Target, tmp_path: Path) -> None:
    now = int(time.time() * 1000)
    backup = tmp_path / "backup"
    big = [Record(i, 0, now + i, b"b%d" % i, b"x" * (1_500_000 if i == 3 else 100)) for i in range(6)]
    small = [Record(i, 0, now + i, b"s%d" % i, b"y" * 1000, (("h", b"v"),)) for i in range(200)]
    keyless = [Record(i, 0, now + i, None if i == 4 else b"n%d" % i, b"z") for i in range(10)]
    _write(backup, "big", big)
    _write(backup, "small", small)
    _write(backup, "keyless", keyless)
    compacted, narrow, capped = target.name("compacted"), target.name("narrow"), target.name("capped")
    create_topics(
        target.broker,
        {compacted: 1, narrow: 1, capped: 1},
        {
            compacted: {"cleanup.policy": "compact"},
            narrow: {"max.message.bytes": "20000"},
            capped: {"retention.bytes": "100000"},
        },
    )
    base = [*target.args(tmp_path), "--source-dir", str(backup)]

    into_compacted = _one_line(restore_python(*base, "--topics", "small", "--topic-map", f"small={compacted}"))
    assert f"target topic {compacted!r} has cleanup.policy=compact: compaction keeps only the newest" in into_compacted
    assert "--allow-compacted-target" in into_compacted
    small_into_compacted = [*base, "--topics", "small", "--topic-map", f"small={compacted}"]
    allowed = restore_python(*small_into_compacted, "--allow-compacted-target", "--dry-run")
    assert allowed.returncode == 0, allowed.stderr
    no_key = _one_line(
        restore_python(*base, "--topics", "keyless", "--topic-map", f"keyless={compacted}", "--allow-compacted-target")
    )
    assert "the broker rejects records without a key, and 1 restored record(s) have none (first: partition 0 " in no_key
    assert "offset 4)" in no_key

    too_big = _one_line(restore_python(*base, "--topics", "big", "--topic-map", f"big={narrow}"))
    largest = kafka_record_size(big[3])
    assert f"topic {narrow!r}: the largest restored record takes {largest} bytes as a record batch" in too_big
    assert "(partition 0 offset 3), more than max.message.bytes=20000" in too_big

    over = _one_line(restore_python(*base, "--topics", "small", "--topic-map", f"small={capped}"))
    assert "the restore writes up to " in over and "more than retention.bytes=100000" in over
    assert f"raise retention.bytes of {capped!r} first" in over
    assert _topics(target) >= {compacted, narrow, capped}
    assert consume_all(target.broker, [compacted, narrow, capped]) == []  # nothing was produced anywhere

    # Into a created topic the large record fits (max.message.bytes raised, and the producer's limit), and the
    # small records go into the existing topic of 20,000-byte batches (the producer's batches are cut to fit).
    big_name = target.name("big")
    result = run_restore(*base, "--topics", "big,small", "--topic-map", f"big={big_name}", "--topic-map",
                         f"small={narrow}")  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"{big_name}: created with max.message.bytes={largest}" in result.stdout + result.stderr
    for name, stored in ((big_name, big), (narrow, small)):
        restored = consume_all(target.broker, [name])
        assert [(r["key"], r["value"], r["timestamp"], r["headers"]) for r in restored] == [
            (b64(r.key), b64(r.value), r.timestamp, [[k, b64(v)] for k, v in r.headers]) for r in stored
        ], name


def test_a_record_the_broker_rejects_anyway_is_named_with_the_brokers_reason(target: Target, tmp_path: Path) -> None:
    """The plan checks limits; a topic changed after it still fails naming the record, not a batch neighbour's
    error (librdkafka gives every record of a rejected batch the batch's error)."""
    from spark_kafka_backup.errors import DeliveryError
    from spark_kafka_backup.partition.selection import Window
    from spark_kafka_backup.restore.task import PartitionTask, restore_partition

    now = int(time.time() * 1000)
    backup = tmp_path / "backup"
    records = [Record(i, 0, now + (40 * DAY if i == 7 else i), b"k%d" % i, b"v%d" % i) for i in range(20)]
    _write(backup, "t", records)
    name = target.name("rejecting")
    create_topics(target.broker, {name: 1})  # message.timestamp.after.max.ms: Kafka 4's default, 1 hour
    task = PartitionTask(
        source_dir=str(backup / "t"), source_topic="t", source_partition=0, target_topic=name, target_partition=0,
        window=Window(), identity="restore-test", resume_from=0, baseline=0, after_last=0, replaces=None, groups={},
        client=target.broker.client_settings(), batch_size=1 << 20,
    )  # fmt: skip
    with pytest.raises(DeliveryError) as failure:
        restore_partition(task)
    assert str(failure.value) == (
        f"topic {name!r} partition 0: the broker rejected the record of t/0 offset 7 (timestamp {now + 40 * DAY}): "
        "Broker: Invalid timestamp"
    )
    assert consume_all(target.broker, [name]) == []
