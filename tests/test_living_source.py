"""On Apache Kafka: a source that changes under a running backup (issue 28), with both Kafka sources.

Records the source deletes before they are read (retention, ``kafka-delete-records``) are named, recorded in the
backup as lost at the source, shown as such by ``ls``, ``describe`` and ``verify``, and end a snapshot with exit 1.
Partitions added under a backup are followed, and a topic deleted and created again is refused alone.
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from spark_kafka_backup.catalog import checkpoints
from spark_kafka_backup.catalog.source_gaps import read_gaps
from spark_kafka_backup.catalog.topics import read_topic_record
from spark_kafka_backup.partition.layout import list_partitions
from tests.broker import BrokerUnderTest
from tests.kafka_helpers import backed_up, consume_all, create_topics, run_backup, run_kbackup, start_backup
from tests.live_load import client_args, more_batches, wait_for
from tests.restore_helpers import Target, restore_python


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


@pytest.mark.long
@pytest.mark.parametrize("source", ["python", "spark"])
def test_records_deleted_before_a_snapshot_reads_them_are_named_recorded_and_fail_it(
    kafka: BrokerUnderTest, tmp_path: Path, source: str
) -> None:
    topic = f"retention-{source}"
    create_topics(kafka, {topic: 2})
    produce_small_batches(kafka, topic, 2, 1500)
    target = tmp_path / "backup"
    args = [*client_args(kafka, tmp_path), "--target-dir", str(target), "--topics", topic, "--kafka-source", source]
    log = tmp_path / "snapshot.log"
    # A batch a second: the snapshot reaches offset 1200 some 12 s after its first batch, long after the deletion
    # below lands, even on a loaded machine (unpaced, it once read past 1200 first and rightly found nothing lost).
    process = start_backup(*args, "--snapshot", "--max-records-per-trigger", "100", "--trigger-interval", "1", log=log)
    try:
        wait_for(more_batches(log, 0), 240, "the first micro-batch")
        delete_records(kafka, topic, {0: 1200, 1: 1200})  # retention overtakes the snapshot
        code = process.wait(300)
    finally:
        if process.poll() is None:
            process.kill()
    output = log.read_text(errors="replace")
    assert code == 1, output[-3000:]
    errors = [line for line in output.splitlines() if line.startswith("spark-kafka-backup backup: error:")]
    assert len(errors) == 1, output[-3000:]
    assert errors[0].startswith(
        "spark-kafka-backup backup: error: the snapshot holds everything else, but the source deleted "
    )
    assert "--accept-source-loss" in errors[0] and f"{topic}/0 offsets " in errors[0]

    gaps = read_gaps(target, topic)
    assert {gap.how for gap in gaps} == {"read" if source == "python" else "inferred"}
    held = backed_up(target, [topic])
    for partition in (0, 1):
        offsets = [r["offset"] for r in held if r["partition"] == partition]
        lost = [o for g in gaps if g.partition == partition for o in range(g.first, g.last + 1)]
        assert lost and max(lost) == 1199, (partition, gaps)  # the gap ends where the log now starts
        assert sorted(offsets + lost) == list(range(1500)), partition  # each offset held or named, never both
        # A range read by two micro-batches is logged as two records (a batch's range ends the record it finds);
        # the job's last line names it whole.
        assert f"{topic}/{partition} offsets {min(lost)}.." in output
        assert f"{topic}/{partition} offsets {min(lost)}..1199" in errors[0], errors[0]
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
    assert "snapshot: nothing was deleted at the source while the snapshot read it" in again.stdout + again.stderr


def _held(backup: Path, topics: list[str]) -> int:
    """How many records the backup holds of ``topics`` (0 while one is not in it yet)."""
    try:
        return len(backed_up(backup, topics))
    except subprocess.CalledProcessError:
        return 0


def _ids(kafka: BrokerUnderTest, topic: str) -> str:
    from confluent_kafka.admin import AdminClient

    from spark_kafka_backup.kafka.cluster import topic_ids

    return topic_ids(AdminClient(kafka.client_settings()), [topic])[topic]


def _produce(kafka: BrokerUnderTest, topic: str, partition: int, values: list[bytes]) -> None:
    from confluent_kafka import Producer

    producer = Producer(kafka.client_settings())
    for value in values:
        producer.produce(topic, value=value, key=value[:4], partition=partition)
    assert producer.flush(30) == 0


def _recreate(kafka: BrokerUnderTest, topic: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(kafka.client_settings())
    admin.delete_topics([topic])[topic].result(30)
    deadline = time.monotonic() + 60
    while True:  # KRaft answers the deletion before every broker has forgotten the topic
        try:
            create_topics(kafka, {topic: 1})
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


# Long (CI time): a recreated topic's refusal is in the quick tier in test_backup_origin.py, a topic that grows in the
# continuous backup's tests.
@pytest.mark.long
@pytest.mark.parametrize("source", ["python", "spark"])
def test_a_topic_that_grows_is_followed_and_one_created_again_is_refused_alone(
    kafka: BrokerUnderTest, tmp_path: Path, target: Target, source: str
) -> None:
    """Under a continuous backup: partitions are added to one topic (one of them stays empty) and another is deleted
    and created again with more records than it had. The new partitions are backed up and prepared, and a restore
    creates the partition count of its cut; the new incarnation's records never reach the old one's files (the
    old behaviour appended them from its next offset); the job names the topic with both ids and exits 1."""
    from confluent_kafka.admin import AdminClient, NewPartitions

    grow, phoenix = f"grow-{source}", f"phoenix-{source}"
    create_topics(kafka, {grow: 2, phoenix: 1})
    for partition in (0, 1):
        _produce(kafka, grow, partition, [b"g%d-%d" % (partition, i) for i in range(50)])
    _produce(kafka, phoenix, 0, [b"old-%d" % i for i in range(100)])
    old_id = _ids(kafka, phoenix)
    backup = tmp_path / "backup"
    log = tmp_path / "backup.log"
    process = start_backup(*client_args(kafka, tmp_path), "--target-dir", str(backup), "--topics", f"{grow},{phoenix}",
                           "--kafka-source", source, "--trigger-interval", "1", "--offsets-interval", "1",
                           log=log)  # fmt: skip
    try:
        wait_for(lambda: _held(backup, [grow, phoenix]) == 200, 240, "the first records", job=process, log=log)
        assert run_kbackup("checkpoint", "create", backup).returncode == 0
        wait_for(lambda: checkpoints.read_checkpoint(backup, 1).status == "completed", 120, "checkpoint 1",
                 job=process, log=log)  # fmt: skip

        admin = AdminClient(kafka.client_settings())
        admin.create_partitions([NewPartitions(grow, 4)])[grow].result(30)
        _produce(kafka, grow, 2, [b"g2-%d" % i for i in range(30)])  # partition 3 stays empty
        _recreate(kafka, phoenix)
        new_id = _ids(kafka, phoenix)
        assert new_id != old_id
        _produce(kafka, phoenix, 0, [b"new-%d" % i for i in range(150)])

        wait_for(lambda: _held(backup, [grow]) == 130 and 3 in list_partitions(backup / grow), 180,
                 "the new partitions", job=process, log=log)  # fmt: skip
        time.sleep(8)  # several triggers after the new incarnation's records exist
        pid = int(re.findall(r"stop with SIGTERM to the driver process (\d+)", log.read_text())[-1])
        os.kill(pid, signal.SIGTERM)
        code = process.wait(90)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    output = log.read_text(errors="replace")
    assert code == 1, output[-3000:]
    errors = [line for line in output.splitlines() if line.startswith("spark-kafka-backup backup: error:")]
    assert len(errors) == 1, output[-3000:]
    assert f"topic {phoenix!r} in {backup} was backed up from topic id {old_id}, but on cluster " in errors[0]
    assert f"it now has topic id {new_id} (deleted and created again)" in errors[0]

    # The old incarnation alone, exactly; the grown topic whole, its empty new partition prepared.
    held = backed_up(backup, [phoenix])
    assert [(r["offset"], r["value"]) for r in held] == [
        (i, base64.b64encode(b"old-%d" % i).decode()) for i in range(100)
    ]
    assert backed_up(backup, [grow]) == consume_all(kafka, [grow])
    assert sorted(list_partitions(backup / grow)) == [0, 1, 2, 3]
    recorded = read_topic_record(backup, grow)
    assert recorded is not None and recorded.partitions == 4
    assert [count for _, count in recorded.partition_history] == [2, 4]
    assert run_kbackup("verify", backup).returncode == 0

    # A restore creates the partition count of its cut: 2 at checkpoint 1, 4 now (not the directories it finds).
    base = [*target.args(tmp_path), "--source-dir", str(backup), "--topics", grow, "--dry-run"]
    at_cut = restore_python(*base, "--checkpoint", "1", "--topic-map", f"{grow}=cut-{grow}")
    assert at_cut.returncode == 0, at_cut.stderr
    assert f"create topic cut-{grow} with 2 partitions" in at_cut.stdout
    now = restore_python(*base, "--topic-map", f"{grow}=now-{grow}")
    assert now.returncode == 0, now.stderr
    assert f"create topic now-{grow} with 4 partitions" in now.stdout


@pytest.mark.long
def test_a_backup_started_again_without_its_spark_checkpoint_records_what_was_deleted_meanwhile(
    kafka: BrokerUnderTest, tmp_path: Path
) -> None:
    """spark-kafka-backup's source, a new ``--checkpoint-location``: the query goes on from the backup's last record
    (not the log start), so offsets retention deleted since the last run are recorded as lost at the source, exactly,
    and never pass for offsets the source skipped (the backup vouches for every gap after its first record as read)."""
    topic = "resumed-fresh"
    create_topics(kafka, {topic: 1})
    _produce(kafka, topic, 0, [b"a%d" % i for i in range(100)])
    target = tmp_path / "backup"
    args = [*client_args(kafka, tmp_path), "--target-dir", str(target), "--topics", topic, "--snapshot"]
    first = run_backup(*args, "--checkpoint-location", tmp_path / "spark-1")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    _produce(kafka, topic, 0, [b"b%d" % i for i in range(100)])  # offsets 100..199
    delete_records(kafka, topic, {0: 150})  # 100..149 gone before the next run reads them

    again = run_backup(*args, "--checkpoint-location", tmp_path / "spark-2", "--accept-source-loss")
    output = again.stdout + again.stderr
    assert again.returncode == 0, output[-3000:]
    assert f"{topic}/0 offsets 100..149" in output
    assert [(g.first, g.last, g.how) for g in read_gaps(target, topic)] == [(100, 149, "read")]
    held = backed_up(target, [topic])
    assert [r["offset"] for r in held] == [*range(100), *range(150, 200)]
    assert held[100:] == consume_all(kafka, [topic])
    described = json.loads(run_kbackup("describe", target, "--json", check=True).stdout)
    (partition,) = described["topics"][0]["partitions"]
    counts = (partition["lostAtSourceOffsets"], partition["missingOffsets"], partition["transactionOffsets"])
    assert counts == (50, 0, 0)

    # Deleted and created again with more records than the backup holds, then a run without a checkpoint: the
    # topic is refused by the backup's recorded topic id before anything is read, never read on from offset 199.
    _recreate(kafka, topic)
    _produce(kafka, topic, 0, [b"c%d" % i for i in range(250)])
    third = run_backup(*args, "--checkpoint-location", tmp_path / "spark-3")
    output = third.stdout + third.stderr
    assert third.returncode == 1, output[-3000:]
    errors = [line for line in output.splitlines() if line.startswith("spark-kafka-backup backup: error:")]
    assert len(errors) == 1 and "(deleted and created again)" in errors[0], output[-3000:]
    assert "OffsetConflictError" not in output
    assert backed_up(target, [topic]) == held
