"""Restores the target cluster would undo: retention older than the records, and LogAppendTime re-stamping."""

from __future__ import annotations

import base64
import time
from pathlib import Path

from kbackup.catalog.ledger import CatalogLedger
from kbackup.catalog.topics import record_topic
from kbackup.format.record import Record
from kbackup.partition.writer import PartitionWriter
from kbackup.restore.retention import TimeLimits, age_problem, broker_topic_defaults
from kbackup.restore.timestamp_type import creation_config
from tests.kafka_helpers import consume_all, create_topics
from tests.restore_helpers import Target, restore_python, run_restore

DAY = 86_400_000


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# -- the decisions, pure ------------------------------------------------------------------


def test_time_limits_from_topic_and_broker_settings() -> None:
    assert TimeLimits.from_config({"retention.ms": "604800000"}) == TimeLimits(604_800_000, None)
    assert TimeLimits.from_config({"retention.ms": "-1"}) == TimeLimits(None, None)
    assert TimeLimits.from_config({"retention.ms": "1000", "cleanup.policy": "compact"}) == TimeLimits(None, None)
    assert TimeLimits.from_config({"retention.ms": "1000", "cleanup.policy": "compact,delete"}).retention_ms == 1000
    long_max = str((1 << 63) - 1)
    assert TimeLimits.from_config({"message.timestamp.before.max.ms": long_max}).before_max_ms is None
    assert TimeLimits.from_config({"message.timestamp.before.max.ms": "3600000"}).before_max_ms == 3_600_000
    # The broker's retention: ms over minutes over hours, as Kafka reads them.
    assert broker_topic_defaults({"log.retention.hours": "168"})["retention.ms"] == str(7 * DAY)
    assert broker_topic_defaults({"log.retention.hours": "168", "log.retention.minutes": "10"})["retention.ms"] == (
        "600000"
    )
    assert broker_topic_defaults({"log.retention.hours": "1", "log.retention.ms": "5"})["retention.ms"] == "5"


def test_age_problem_names_topic_oldest_timestamp_and_setting() -> None:
    now = 1_795_334_400_000  # 2026-11-22T08:00:00Z
    week = TimeLimits(7 * DAY, None)
    assert age_problem("t", now - 6 * DAY, week, now_ms=now, created=True) is None
    problem = age_problem("t", now - 365 * DAY, week, now_ms=now, created=True)
    assert problem == (
        "topic 't': the oldest restored record (2025-11-22T08:00:00.000Z) is older than its retention.ms=604800000: "
        "the broker would delete it minutes after the restore; restore with --topic-config retention.ms=-1 "
        "(or a longer retention)"
    )
    assert "raise the retention.ms of 't' first" in (age_problem("t", 0, week, now_ms=now, created=False) or "")
    rejecting = TimeLimits(None, DAY)
    assert "message.timestamp.before.max.ms=86400000 allows: the broker would reject it" in (
        age_problem("t", now - 2 * DAY, rejecting, now_ms=now, created=True) or ""
    )


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


def test_year_old_records_are_refused_by_default_retention_and_kept_with_retention_off(
    target: Target, tmp_path: Path
) -> None:
    backup = tmp_path / "backup"
    year_ago = int(time.time() * 1000) - 365 * DAY
    records = _backup(backup, "old", year_ago, config={})
    name = target.name("old-restored")
    args = [*target.args(tmp_path), "--source-dir", str(backup), "--topic-map", f"old={name}"]

    refused = restore_python(*args)
    assert refused.returncode == 1
    assert refused.stderr.startswith(f"kbackup restore: error: topic {name!r}: the oldest restored record ("), (
        refused.stderr
    )
    assert "is older than its retention.ms=604800000" in refused.stderr
    assert "--topic-config retention.ms=-1" in refused.stderr and "--accept-retention-loss" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    from confluent_kafka.admin import AdminClient

    assert name not in AdminClient(target.broker.client_settings()).list_topics(timeout=10).topics

    # An existing topic with a short retention is refused too, naming the topic's own setting.
    short = target.name("old-short")
    create_topics(target.broker, {short: 1}, {short: {"retention.ms": str(30 * DAY)}})
    existing = restore_python(*target.args(tmp_path), "--source-dir", str(backup), "--topic-map", f"old={short}")
    assert existing.returncode == 1
    assert f"older than its retention.ms={30 * DAY}" in existing.stderr
    assert f"raise the retention.ms of {short!r} first" in existing.stderr

    kept = run_restore(*args, "--topic-config", "retention.ms=-1")
    assert kept.returncode == 0, kept.stdout[-3000:] + kept.stderr[-3000:]
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
    assert f"create topic {name} with 1 partitions, config message.timestamp.type=CreateTime" in dry.stdout
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


def test_oldest_timestamp_equals_a_scan_of_the_selected_records(tmp_path: Path) -> None:
    from kbackup.catalog.store import read_catalog
    from kbackup.partition.reader import PartitionReader
    from kbackup.restore.retention import oldest_timestamp
    from kbackup.restore.selection import Window, selected_records

    root = tmp_path / "backup"
    stamps = [5_000 - (i * 37) % 4_000 for i in range(90)]  # not in offset order
    with PartitionWriter(root / "t", "t", 0, max_segment_size=900, fsync=False, ledger=CatalogLedger(root)) as writer:
        for i, stamp in enumerate(stamps):
            kind = -1 if i % 9 == 0 else i % 2  # some records without a timestamp
            writer.append(Record(i, kind, None if kind < 0 else stamp, b"k", b"v%d" % i))
    reader = PartitionReader(root / "t", 0)
    catalog = read_catalog(root, "t", 0)
    assert catalog is not None and catalog.segments and catalog.tail is not None
    for window in (Window(), Window(from_offset=17), Window(to_offset=40), Window(from_time=2_000, to_time=4_000)):
        scanned = [r.timestamp for r in selected_records(reader, window) if r.timestamp is not None]
        assert oldest_timestamp(reader, window, catalog) == min(scanned), window
