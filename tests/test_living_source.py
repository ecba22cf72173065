"""On Apache Kafka: a source that changes under a running backup (issue 28), with both Kafka sources.

Records the source deletes before they are read (retention, ``kafka-delete-records``) are named, recorded in the
backup as lost at the source, shown as such by ``ls``, ``describe`` and ``verify``, and end a snapshot with exit 1.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kbackup.catalog.source_gaps import read_gaps
from tests.broker import BrokerUnderTest
from tests.kafka_helpers import backed_up, consume_all, create_topics, run_backup, run_kbackup, start_backup
from tests.live_load import client_args, more_batches, wait_for


def produce_small_batches(kafka: BrokerUnderTest, topic: str, partitions: int, count: int) -> None:
    from confluent_kafka import Producer

    producer = Producer(kafka.client_settings(**{"linger.ms": "5", "batch.size": "16000"}))
    for i in range(count):
        for partition in range(partitions):
            producer.produce(topic, key=b"k%d" % i, value=b"v%d-" % i + b"." * 3000, partition=partition)
        producer.poll(0)
    assert producer.flush(60) == 0


def delete_records(kafka: BrokerUnderTest, topic: str, before: dict[int, int]) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(kafka.client_settings())
    wanted = [TopicPartition(topic, partition, offset) for partition, offset in before.items()]
    for future in admin.delete_records(wanted).values():
        future.result(30)


@pytest.mark.parametrize("source", ["kbackup", "spark"])
def test_records_deleted_before_a_snapshot_reads_them_are_named_recorded_and_fail_it(
    kafka: BrokerUnderTest, tmp_path: Path, source: str
) -> None:
    topic = f"retention-{source}"
    create_topics(kafka, {topic: 2})
    produce_small_batches(kafka, topic, 2, 1500)
    target = tmp_path / "backup"
    args = [*client_args(kafka, tmp_path), "--target-dir", str(target), "--topics", topic, "--kafka-source", source]
    log = tmp_path / "snapshot.log"
    process = start_backup(*args, "--snapshot", "--max-records-per-trigger", "100", log=log)
    try:
        wait_for(more_batches(log, 0), 240, "the first micro-batch")
        delete_records(kafka, topic, {0: 1200, 1: 1200})  # retention overtakes the snapshot
        code = process.wait(300)
    finally:
        if process.poll() is None:
            process.kill()
    output = log.read_text(errors="replace")
    assert code == 1, output[-3000:]
    errors = [line for line in output.splitlines() if line.startswith("kbackup backup: error:")]
    assert len(errors) == 1, output[-3000:]
    assert errors[0].startswith("kbackup backup: error: the snapshot holds everything else, but the source deleted ")
    assert "--accept-source-loss" in errors[0] and f"{topic}/0 offsets " in errors[0]

    gaps = read_gaps(target, topic)
    assert {gap.how for gap in gaps} == {"read" if source == "kbackup" else "inferred"}
    held = backed_up(target, [topic])
    for partition in (0, 1):
        offsets = [r["offset"] for r in held if r["partition"] == partition]
        lost = [o for g in gaps if g.partition == partition for o in range(g.first, g.last + 1)]
        assert lost and max(lost) == 1199, (partition, gaps)  # the gap ends where the log now starts
        assert sorted(offsets + lost) == list(range(1500)), partition  # each offset held or named, never both
        assert f"{topic}/{partition} offsets {min(lost)}..1199 were deleted at the source" in output
    assert [r for r in held if r["offset"] >= 1200] == consume_all(kafka, [topic])

    listing = run_kbackup("ls", target, check=True).stdout
    assert "offsets deleted at the source before they were read: " in listing, listing
    assert "missing" not in listing, listing  # lost at the source is not a hole in the backup
    described = json.loads(run_kbackup("describe", target, "--json", check=True).stdout)
    parts = described["topics"][0]["partitions"]
    assert [p["lostAtSourceOffsets"] for p in parts] == [sum(g.count for g in gaps if g.partition == p) for p in (0, 1)]
    assert all(p["missingOffsets"] == 0 for p in parts)
    verified = run_kbackup("verify", target)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "lost at the source, not damage to the backup" in verified.stdout

    # Run again: nothing more is lost, so the snapshot is whole for what it read.
    again = run_backup(*args, "--snapshot")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "snapshot: nothing was lost at the source" in again.stdout + again.stderr
