"""Restores the target cluster would undo: retention older than the records, and LogAppendTime re-stamping
(the other limits: tests/test_restore_target_limits.py)."""

from __future__ import annotations

import base64
import time
from pathlib import Path

from spark_kafka_backup.catalog.ledger import CatalogLedger
from spark_kafka_backup.catalog.topics import record_topic
from spark_kafka_backup.format.record import Record
from spark_kafka_backup.partition.writer import PartitionWriter
from spark_kafka_backup.restore.timestamp_type import creation_config
from tests.kafka_helpers import consume_all, create_topics
from tests.restore_helpers import Target, restore_python, run_restore

DAY = 86_400_000


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_log_append_time_topics_are_created_with_create_time() -> None:
    assert creation_config({"message.timestamp.type": "LogAppendTime", "x": "1"}, restamp=False) == (
        {"message.timestamp.type": "CreateTime", "x": "1"},
        "LogAppendTime",
    )
    assert creation_config({"message.timestamp.type": "LogAppendTime"}, restamp=True) == (
        {"message.timestamp.type": "LogAppendTime"},
        None,
    )
    assert creation_config({"retention.ms": "5"}, restamp=False) == ({"retention.ms": "5"}, None)


# -- on Apache Kafka --------------------------------------------------------------------------


def _backup(root: Path, topic: str, base: int, *, timestamp_type: int = 0, config: dict[str, str]) -> list[Record]:
    records = [Record(i, timestamp_type, base + i * 1000, b"k%d" % i, b"v%d" % i) for i in range(120)]
    with PartitionWriter(
        root / topic, topic, 0, max_segment_size=1500, fsync=False, ledger=CatalogLedger(root)
    ) as writer:
        for record in records:
            writer.append(record)
    record_topic(root, topic, 1, config)
    return records


def _topic_config(target: Target, topic: str, key: str) -> str:
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient(target.broker.client_settings())
    described = next(iter(admin.describe_configs([ConfigResource("TOPIC", topic)]).values())).result(30)
    return str(described[key].value)


def test_year_old_records_get_a_created_topic_without_retention_and_an_existing_short_one_is_refused(
    target: Target, tmp_path: Path
) -> None:
    backup = tmp_path / "backup"
    year_ago = int(time.time() * 1000) - 365 * DAY
    records = _backup(backup, "old", year_ago, config={"retention.ms": str(7 * DAY)})
    name = target.name("old-restored")
    args = [*target.args(tmp_path), "--source-dir", str(backup), "--topic-map", f"old={name}"]

    # A value given with --topic-config is the user's: checked, not changed.
    given = restore_python(*args, "--topic-config", f"retention.ms={30 * DAY}")
    assert given.returncode == 1
    assert given.stderr.startswith(
        f"spark-kafka-backup restore: error: topic {name!r}: the oldest restored record ("
    ), given.stderr
    assert f"is older than retention.ms={30 * DAY}" in given.stderr
    assert "give a larger --topic-config retention.ms" in given.stderr and "--accept-retention-loss" in given.stderr
    assert len(given.stderr.strip().splitlines()) == 1
    from confluent_kafka.admin import AdminClient

    assert name not in AdminClient(target.broker.client_settings()).list_topics(timeout=10).topics

    # An existing topic with a short retention is refused, naming the topic's own setting.
    short = target.name("old-short")
    create_topics(target.broker, {short: 1}, {short: {"retention.ms": str(30 * DAY)}})
    existing = restore_python(*target.args(tmp_path), "--source-dir", str(backup), "--topic-map", f"old={short}")
    assert existing.returncode == 1
    assert f"older than retention.ms={30 * DAY}" in existing.stderr
    assert f"raise retention.ms of {short!r} first" in existing.stderr

    # A topic the restore creates gets retention.ms=-1 instead of the backed-up week, and the restore says so.
    dry = restore_python(*args, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"create topic {name} with 1 partition, config retention.ms=-1" in dry.stdout
    assert f"  {name}: created with retention.ms=-1 (the oldest restored record (" in dry.stdout
    kept = run_restore(*args)
    assert kept.returncode == 0, kept.stdout[-3000:] + kept.stderr[-3000:]
    assert f"{name}: created with retention.ms=-1" in kept.stdout + kept.stderr
    assert _topic_config(target, name, "retention.ms") == "-1"
    restored = consume_all(target.broker, [name])
    assert [(r["offset"], r["key"], r["value"], r["timestampType"], r["timestamp"]) for r in restored] == [
        (r.offset, b64(r.key or b""), b64(r.value or b""), "CreateTime", r.timestamp) for r in records
    ]


def test_log_append_time_topic_keeps_the_original_timestamps(target: Target, tmp_path: Path) -> None:
    backup = tmp_path / "backup"
    base = int(time.time() * 1000) - 3 * DAY
    records = _backup(backup, "lat", base, timestamp_type=1, config={"message.timestamp.type": "LogAppendTime"})
    name = target.name("lat-restored")
    args = [*target.args(tmp_path), "--source-dir", str(backup), "--topic-map", f"lat={name}"]

    dry = restore_python(*args, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"create topic {name} with 1 partition, config message.timestamp.type=CreateTime" in dry.stdout
    assert "  then set message.timestamp.type=LogAppendTime (records keep their timestamps)" in dry.stdout

    result = run_restore(*args)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"{name}: restored with the original timestamps, then set to message.timestamp.type=LogAppendTime" in (
        result.stdout
    )
    assert _topic_config(target, name, "message.timestamp.type") == "LogAppendTime"
    restored = consume_all(target.broker, [name])
    assert [(r["offset"], r["key"], r["value"], r["timestamp"]) for r in restored] == [
        (r.offset, b64(r.key or b""), b64(r.value or b""), r.timestamp) for r in records
    ]

    # Run again, the finished restore has nothing to produce: no refusal of the topic it set to LogAppendTime.
    again = restore_python(*args)
    assert again.returncode == 0, again.stderr
    assert consume_all(target.broker, [name]) == restored

    # An existing LogAppendTime target would re-stamp: refused unless --restamp.
    stamping = target.name("lat-existing")
    create_topics(target.broker, {stamping: 1}, {stamping: {"message.timestamp.type": "LogAppendTime"}})
    refused = restore_python(*target.args(tmp_path), "--source-dir", str(backup), "--topic-map", f"lat={stamping}")
    assert refused.returncode == 1
    assert f"target topic {stamping!r} has message.timestamp.type=LogAppendTime" in refused.stderr
    assert "--restamp" in refused.stderr
