"""The restore job on a real broker and real Spark.

The target is a second local Apache Kafka (an empty cluster) when the suite
uses a local one, otherwise the suite's cluster with topics renamed.
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import sys
import time
from datetime import UTC
from pathlib import Path

import pytest

from spark_kafka_backup.catalog.ledger import CatalogLedger
from spark_kafka_backup.format.record import Record
from spark_kafka_backup.partition.offsets_file import write_consumer_offsets
from spark_kafka_backup.partition.selection import BelowCounter
from spark_kafka_backup.partition.writer import PartitionWriter
from spark_kafka_backup.text import iso_time
from tests.backup_builders import write_original_style
from tests.broker import BrokerUnderTest, local_cluster
from tests.conftest import REPO
from tests.kafka_helpers import (
    backed_up,
    client_config_file,
    commit_offsets,
    consume_all,
    create_topics,
    job_env,
    kbackup_lines,
    run_backup,
    run_kbackup,
)
from tests.restore_helpers import (
    Target,
    committed_end,
    comparable,
    group_offsets,
    killed_after_first_commit,
    restore_command,
    restore_python,
    run_restore,
)

# Recent timestamps: older ones would fall to the target topics' time-based retention.
BASE = (int(time.time()) // 60 - 60) * 60_000


def iso(ms: int) -> str:
    from datetime import datetime

    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


# -- backup -> restore ---------------------------------------------------------------


def test_backup_then_restore_round_trip(kafka: BrokerUnderTest, target: Target, tmp_path: Path) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    create_topics(kafka, {"rt-orders": 3, "rt-tx": 1})
    producer = Producer(kafka.client_settings(**{"enable.idempotence": "true"}))
    now = int(time.time() * 1000) - 100_000
    for i in range(600):
        producer.produce(
            "rt-orders",
            key=None if i % 6 == 0 else f"k{i}".encode(),
            value=None if i % 13 == 0 else b"" if i % 17 == 0 else f"v{i}".encode() * (1 + i % 3),
            headers=[("h", b"1"), ("h", None), ("é", b"")] if i % 4 == 0 else None,
            partition=i % 3,
            timestamp=now + i,
        )
    producer.flush(30)
    tx = Producer(kafka.client_settings(**{"transactional.id": "rt-tx"}))
    tx.init_transactions(30)
    for batch, commit in ((range(5), True), (range(5, 9), False), (range(9, 12), True)):
        tx.begin_transaction()
        for i in batch:
            tx.produce("rt-tx", key=b"t%d" % i, value=b"x%d" % i, timestamp=now + i)
        tx.flush(30)  # sent before an abort too: aborted records take offsets in the log
        tx.commit_transaction(30) if commit else tx.abort_transaction(30)
    consumer = Consumer(kafka.client_settings(**{"group.id": "rt-readers", "enable.auto.commit": "false"}))
    consumer.commit(offsets=[TopicPartition("rt-orders", 0, 50), TopicPartition("rt-tx", 0, 6)], asynchronous=False)
    consumer.close()

    backup = tmp_path / "backup"
    config = tmp_path / "source.properties"
    client_config_file(config, kafka.extra_settings)
    # Compressed and encrypted: every segment is stored in zstd frames sealed with AES-256-GCM under a key from a
    # file (formats/compressed-records.md); each partition's newest one once the snapshot has ended.
    key = tmp_path / "backup.key"
    key.write_text(os.urandom(32).hex())
    done = run_backup("--bootstrap-server", kafka.bootstrap_servers, "--command-config", config,
                      "--target-dir", backup, "--topics", "rt-orders,rt-tx", "--snapshot",
                      "--max-segment-size", "2000", "--compression", "zstd", "--encryption-key-file", key)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:]
    heads = [path.read_bytes()[:4] for topic in ("rt-orders", "rt-tx") for path in (backup / topic).glob("*_records")]
    assert len(heads) > 4 and all(head == b"\x8bKBZ" for head in heads), heads  # nothing plain at rest
    assert "sealed the newest segment of 4 partitions (encrypted)" in done.stdout + done.stderr
    assert run_kbackup("verify", backup, "--deep", "--encryption-key-file", key).returncode == 0

    maps = [a for t in ("rt-orders", "rt-tx") if target.prefix for a in ("--topic-map", f"{t}={target.name(t)}")]
    refused = restore_python(*target.args(tmp_path), "--source-dir", backup, *maps)
    said = refused.stdout + refused.stderr
    assert refused.returncode == 1 and "are encrypted with key id(s)" in said and "no key was given" in said, said
    assert "Traceback" not in said
    maps += ["--encryption-key-file", str(key)]
    result = run_restore(*target.args(tmp_path), "--source-dir", backup, *maps)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"restored {target.name('rt-orders')}: 600 records" in result.stdout
    assert "records/s, produced through the native Kafka edge)" in result.stdout  # the path taken, said
    assert "restore: 4/4 partitions" in result.stdout + result.stderr  # progress, one line per second at most

    source = consume_all(kafka, ["rt-orders", "rt-tx"])
    # 0-4 committed, 5 commit marker, 6-9 aborted, 10 abort marker, 11-13 committed, 14 commit marker.
    assert [r["offset"] for r in source if r["topic"] == "rt-tx"] == [0, 1, 2, 3, 4, 11, 12, 13]
    restored = consume_all(target.broker, [target.name("rt-orders"), target.name("rt-tx")])
    for topic in ("rt-orders", "rt-tx"):
        assert comparable(restored, topic=target.name(topic)) == comparable(source, topic=topic)
    assert len(comparable(restored, topic=target.name("rt-tx"))) == 8
    # Group offsets, remapped: rt-orders/0 keeps its offset (no gaps); on rt-tx, source offset 6 (inside the
    # aborted range, 5 records below it) becomes target offset 5.
    offsets = group_offsets(target.broker, "rt-readers")
    assert offsets[(target.name("rt-orders"), 0)] == 50
    assert offsets[(target.name("rt-tx"), 0)] == 5

    # The progress markers are a group's offsets, which Kafka expires (offsets.retention.minutes): without them
    # the restore recognises its committed records by content, and still produces nothing. (A rerun with its
    # markers: test_sigkill_and_rerun_restores_exactly_once.)
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(target.broker.client_settings())
    for future in admin.delete_consumer_groups(["kbackup-restore-progress"]).values():
        future.result()
    expired = run_restore(*target.args(tmp_path), "--source-dir", backup, *maps)
    assert expired.returncode == 0, expired.stdout[-3000:] + expired.stderr[-3000:]
    assert "608 records were already in the target" in expired.stdout
    assert consume_all(target.broker, [target.name("rt-orders"), target.name("rt-tx")]) == restored
    assert group_offsets(target.broker, "rt-readers")[(target.name("rt-tx"), 0)] == 5


# -- a backup written by the original tool ------------------------------------------------


def test_restore_of_an_original_tool_backup_and_offset_remapping(target: Target, tmp_path: Path) -> None:
    """First segment named 0 holding offset 1000 (retention), -2 timestamps, gaps, an empty partition."""
    from confluent_kafka import Consumer, TopicPartition

    backup = tmp_path / "backup"
    topic = "orig-legacy"
    offsets = [1000, 1001, 1002, 1005, 1006, 1010, 1011, 1012]  # gaps: 1003-1004, 1007-1009
    records = [
        Record(o, -2 if i % 3 == 0 else 0, None if i % 3 == 0 else BASE + i, f"k{o}".encode(),
               f"v{o}".encode(), (("h", b"x"),) if i % 2 else ())
        for i, o in enumerate(offsets)
    ]  # fmt: skip
    write_original_style(backup / topic, 0, [records[:4], records[4:]])
    write_original_style(backup / topic, 1, [[]])  # an empty partition: one empty segment named 0
    groups = {
        "at-zero": 0,  # before everything backed up: first restored record
        "at-first": 1000,  # at the first offset after retention
        "in-gap": 1008,  # inside a gap: the next record, 1010
        "at-record": 1006,
        "at-end": 1013,  # just past the last record
        "past-end": 5000,
        "active": 1005,
        "ahead": 1006,  # already further ahead on the target: never moved back
    }
    write_consumer_offsets(backup / topic, 0, groups)
    name = target.name(topic)
    create_topics(target.broker, {name: 2})
    ahead = Consumer(target.broker.client_settings(**{"group.id": "ahead", "enable.auto.commit": "false"}))
    ahead.commit(offsets=[TopicPartition(name, 0, 7)], asynchronous=False)
    ahead.close()
    # "active" has a running member on the target: it must be left alone.
    member = Consumer(target.broker.client_settings(**{"group.id": "active", "session.timeout.ms": "30000",
                                                        "enable.auto.commit": "false"}))  # fmt: skip
    member.subscribe([name])
    deadline = time.monotonic() + 30
    while not member.assignment() and time.monotonic() < deadline:
        member.poll(0.2)
    assert member.assignment(), "the test consumer did not join its group"
    try:
        maps = ["--topic-map", f"{topic}={name}"] if target.prefix else []
        result = run_restore(*target.args(tmp_path), "--source-dir", backup, "--topics", topic, *maps)
    finally:
        member.close()
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    restored = consume_all(target.broker, [name])
    assert [(r["partition"], r["offset"]) for r in restored] == [(0, i) for i in range(8)]
    source = backed_up(backup, [topic])
    assert [r["key"] for r in source] == [b64(r.key) for r in records]
    fields = ("partition", "key", "value", "headers")
    assert [tuple(r[f] for f in fields) for r in restored] == [tuple(r[f] for f in fields) for r in source]
    # Records without a timestamp (-2) come back with Kafka's "no timestamp" (-1, read as None); the others keep theirs,
    # and its type.
    assert [r["timestamp"] is None for r in restored] == [s["timestamp"] is None for s in source]
    kept = [(r["timestampType"], r["timestamp"]) for r, s in zip(restored, source, strict=True) if s["timestamp"]]
    assert kept == [(s["timestampType"], s["timestamp"]) for s in source if s["timestamp"]]
    assert len(kept) == 5
    expected = {"at-zero": 0, "at-first": 0, "in-gap": 5, "at-record": 4, "at-end": 8, "past-end": 8}
    for group, offset in expected.items():
        assert group_offsets(target.broker, group) == {(name, 0): offset}, group
    assert group_offsets(target.broker, "active") == {}
    assert "group active: " in result.stdout and "active member" in result.stdout
    assert group_offsets(target.broker, "ahead") == {(name, 0): 7}
    assert f"group ahead: {name}/0 left alone: would move back from 7 to 4" in result.stdout


def test_below_counter_table() -> None:
    counter = BelowCounter([0, 1000, 1008, 1006, 1013, 5000])
    for offset in (1000, 1001, 1002, 1005, 1006, 1010, 1011, 1012):
        counter.add(offset)
    assert counter.below() == {0: 0, 1000: 0, 1006: 4, 1008: 5, 1013: 8, 5000: 8}


# -- kill and rerun ---------------------------------------------------------------------


PER_PARTITION = 25_000


# CI time: in the long tier; the quick tier covers a rerun's exactness:
# test_allow_non_empty_appends_once_across_a_rerun_...; kill -9 of a backup: tests/test_crash_repair.py
@pytest.mark.long
def test_sigkill_and_rerun_restores_exactly_once(target: Target, tmp_path: Path) -> None:
    """Two runs killed inside a transaction, each after committing one (the second going on from the first's); the
    third completes, a fourth adds nothing.

    2 runs x at most 10,000 committed records per partition < PER_PARTITION: the third always has work left.
    """
    backup = tmp_path / "backup"
    topic = "kill-restore"
    expected = []
    for partition in range(2):
        with PartitionWriter(backup / topic, topic, partition, fsync=False) as writer:
            for i in range(PER_PARTITION):
                record = Record(i * 2, 0, BASE + i, b"key-%d" % i, b"value-%d-" % i * 8,
                                (("p", str(partition).encode()),) if i % 5 == 0 else ())  # fmt: skip
                writer.append(record)
                expected.append((partition, record))
    name = target.name(topic)
    maps = ["--topic-map", f"{topic}={name}"] if target.prefix else []
    args = [*target.args(tmp_path), "--source-dir", str(backup), "--batch-size", "512", *maps]
    # At most 2,000 records a second per partition, so every transaction is cut by time (5 s, 10,000 records):
    # a run commits one transaction per partition before it is killed, never the whole topic.
    args += ["--max-rate", "2000"]
    kills = 0
    previous = 0
    for attempt in range(2):
        log = tmp_path / f"restore-{attempt}.log"
        with open(log, "wb") as out:
            process = subprocess.Popen(restore_command(*args), stdout=out, stderr=subprocess.STDOUT, env=job_env(),
                                       cwd=REPO, start_new_session=True)  # fmt: skip
        # Wait until this run has committed (the target grows), then kill it inside its next transaction.
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and process.poll() is None:
            if committed_end(target.broker, name) > previous:
                break
            time.sleep(0.1)
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            kills += 1
        process.wait(60)
        count = committed_end(target.broker, name)
        assert count >= previous  # a prefix only grows
        previous = count
    assert kills == 2
    assert 0 < previous < 2 * PER_PARTITION  # offsets: committed records and one commit marker per transaction
    final = run_restore(*args)
    assert final.returncode == 0, final.stdout[-3000:]
    restored = consume_all(target.broker, [name])
    assert len(restored) == len(expected) == 2 * PER_PARTITION
    assert comparable(restored) == comparable(backed_up(backup, [topic]))
    again = run_restore(*args)
    assert again.returncode == 0
    assert f"{2 * PER_PARTITION} records were already in the target" in again.stdout
    assert len(consume_all(target.broker, [name])) == 2 * PER_PARTITION


# CI time: in the long tier (about 30 s); the quick tier covers a target holding others' records at the first run
# (test_non_empty_target_is_refused)
@pytest.mark.long
def test_a_rerun_refuses_records_written_into_the_target_while_the_restore_was_stopped(
    target: Target, tmp_path: Path
) -> None:
    """Killed after its first commit, then someone produces into the target: the rerun would put the rest of the
    restore after that record, so it refuses, naming the partition and offset; with --allow-non-empty it goes on
    after it, every backed-up record once."""
    from confluent_kafka import Producer

    backup = tmp_path / "backup"
    topic = "touched-restore"
    with PartitionWriter(backup / topic, topic, 0, fsync=False) as writer:
        for i in range(3000):
            writer.append(Record(i, 0, BASE + i, b"k%d" % i, b"v%d" % i, ()))
    name = target.name(topic)
    maps = ["--topic-map", f"{topic}={name}"] if target.prefix else []
    args = [*target.args(tmp_path), "--source-dir", str(backup), *maps]
    # 500 records a second: the first transaction is cut by time (5 s)
    killed_after_first_commit(target.broker, name, 1, *args, "--max-rate", "500", log=tmp_path / "killed.log")
    assert 0 < committed_end(target.broker, name, 1) < 3000
    producer = Producer(target.broker.client_settings())
    producer.produce(name, b"someone else's record", b"intruder", partition=0)
    assert producer.flush(30) == 0
    refused = run_restore(*args)
    said = refused.stdout + refused.stderr
    assert refused.returncode == 1, said[-3000:]
    # The killed run's transaction is still open (60 s) and hides the record from the plan: the task, once it has
    # fenced that run's producer (aborting the transaction), finds it.
    assert f"topic {name!r} partition 0: the target holds a record at offset " in said, said[-3000:]
    assert "that this restore did not write, past its progress (written while it was stopped)" in said
    assert "add --allow-non-empty" in said and "Traceback" not in said
    going_on = run_restore(*args, "--allow-non-empty")
    assert going_on.returncode == 0, going_on.stdout[-3000:]
    keys = [r["key"] for r in consume_all(target.broker, [name])]
    assert sorted(keys, key=str) == sorted([b64(b"intruder"), *(b64(b"k%d" % i) for i in range(3000))], key=str)


# CI time: in the long tier; the quick tier covers the limit's arithmetic: tests/unit/test_restore_throttle.py
@pytest.mark.long
def test_a_throttled_restore_shares_its_byte_limit_between_the_partitions_restored_at_once(
    target: Target, tmp_path: Path
) -> None:
    """Two partitions of 300 KB each under a whole-restore limit of 120K bytes per second: the two tasks that run
    at once (local[2]) get 60K each, so producing takes about 5 s (2.5 s if each took the whole limit)."""
    backup = tmp_path / "backup"
    topic = "throttled"
    for partition in range(2):
        with PartitionWriter(backup / topic, topic, partition, fsync=False) as writer:
            for i in range(600):
                writer.append(Record(i, 0, BASE + i, b"k%05d" % i, bytes([65 + partition]) * 494,
                                     (("h", b"x"),) if i % 2 else ()))  # fmt: skip
    name = target.name(topic)
    maps = ["--topic-map", f"{topic}={name}"] if target.prefix else []
    result = run_restore(*target.args(tmp_path), "--source-dir", backup, *maps,
                         "--max-bytes-per-second", "120K", "--max-records-per-second", "100000")  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:]
    assert (
        "throttled to 100,000 records/s and 122,880 bytes/s in all: "
        "50,000 records/s and 61,440 bytes/s for each of the 2 partitions restored at once"
    ) in result.stdout
    # 600 records of 6 + 494 bytes (and half of them a 2-byte header) per partition: 300,600 bytes at 61,440/s.
    line = next(line for line in result.stdout.splitlines() if f"restored {name}: 1200 records" in line)
    seconds = float(line.rsplit(" in ", 1)[1].split(" s ")[0])
    assert seconds >= 4.5, line
    assert comparable(consume_all(target.broker, [name])) == comparable(backed_up(backup, [topic]))


@pytest.mark.long
def test_a_second_restore_of_the_same_target_fences_the_first(target: Target, tmp_path: Path) -> None:
    """Two restores of one backup into one cluster at once leave one copy; the fenced one says why and exits 1."""
    backup = tmp_path / "backup"
    topic = "two-restores"
    expected = []
    for partition in range(2):
        with PartitionWriter(backup / topic, topic, partition, fsync=False) as writer:
            for i in range(40_000):
                record = Record(i, 0, BASE + i, b"k%d" % i, b"v-%d-%d" % (partition, i), ())
                writer.append(record)
                expected.append((partition, record))
        # A group in the middle of the partition (its record is produced by whichever restore gets there).
        write_consumer_offsets(backup / topic, partition, {"two-readers": 30_000}, sync=False)
    name = target.name(topic)
    maps = ["--topic-map", f"{topic}={name}"] if target.prefix else []
    args = [*target.args(tmp_path), "--source-dir", str(backup), *maps]
    first_log = tmp_path / "first.log"
    with open(first_log, "wb") as out:
        # Slow on purpose (1 000 records/s per partition, 40 s): the second restore starts while it produces.
        first = subprocess.Popen(restore_command(*args, "--max-rate", "1000"), stdout=out, stderr=subprocess.STDOUT,
                                 env=job_env(), cwd=REPO, start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while committed_end(target.broker, name) == 0 and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert first.poll() is None, first_log.read_text()[-3000:]
        assert 0 < committed_end(target.broker, name) < 80_000  # the first has committed part of its records
        second = run_restore(*args)
        first.wait(120)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    first_output = first_log.read_text()
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert first.returncode == 1, first_output[-3000:]
    assert "spark-kafka-backup restore: error: another restore took over the target, this one stopped" in first_output
    assert "Traceback" not in first_output
    # The second went on from what the first had committed when it fenced it: more than its plan saw when the
    # first committed a transaction (every 5 s) in between, which the second then says.
    planned = int(second.stdout.split("plan: 80000 records selected, ", 1)[1].split(" ", 1)[0])
    found = re.search(r"(\d+) records were already in the target", second.stdout)
    assert found is not None and int(found[1]) >= planned > 0, second.stdout
    taken_over = "another restore of the same records had reached source offset" in second.stdout
    assert taken_over == (int(found[1]) > planned), second.stdout
    restored = consume_all(target.broker, [name])
    assert [(r["partition"], r["key"], r["value"]) for r in restored] == [
        (p, b64(rec.key), b64(rec.value)) for p, rec in expected
    ]
    # The group resumes at source offset 30 000's record, wherever it landed among the commit markers.
    positions = group_offsets(target.broker, "two-readers")
    by_offset = {(r["partition"], r["offset"]): r for r in restored}
    for partition in range(2):
        landed = by_offset[(partition, positions[(name, partition)])]
        assert landed["key"] == b64(b"k30000")


# -- selection: rename, time window, offset window, dry run ---------------------------------


@pytest.fixture
def small_backup(tmp_path: Path) -> Path:
    backup = tmp_path / "backup"
    with PartitionWriter(backup / "sel", "sel", 0, fsync=False) as writer:
        for i in range(10):
            writer.append(Record(i, 0, BASE + i * 1000, b"k%d" % i, b"v%d" % i))
    write_consumer_offsets(backup / "sel", 0, {"readers": 4})
    return backup


@pytest.mark.long
def test_a_marker_left_pending_by_a_killed_restore_is_waited_for(
    target: Target, tmp_path: Path, small_backup: Path
) -> None:
    """A process killed between sending a marker to its transaction and committing it: the marker is unreadable
    (UNSTABLE_OFFSET_COMMIT) until the broker aborts the transaction; the rerun's plan waits, then restores."""
    name = target.name("sel-pending")
    create_topics(target.broker, {name: 1})
    child = f"""
import os
from confluent_kafka import Consumer, Producer, TopicPartition
settings = {dict(target.broker.client_settings())!r}
producer = Producer({{**settings, "transactional.id": "kbackup-test-pending", "transaction.timeout.ms": "25000"}})
producer.init_transactions(30)
producer.begin_transaction()
producer.produce({name!r}, b"aborted", b"k", 0)
group = Consumer({{**settings, "group.id": "kbackup-restore-progress"}}).consumer_group_metadata()
producer.send_offsets_to_transaction([TopicPartition({name!r}, 0, 5, metadata="{{}}")], group, 30)
producer.flush(30)
os._exit(0)  # as if killed: the transaction stays open
"""
    subprocess.run([sys.executable, "-c", child], check=True, timeout=120, env=job_env())
    maps = ["--topic-map", f"sel={name}"]
    result = run_restore(*target.args(tmp_path), "--source-dir", small_backup, *maps)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "the restore progress is not readable yet" in result.stdout
    restored = consume_all(target.broker, [name])
    assert [r["value"] for r in restored] == [b64(b"v%d" % i) for i in range(10)]
    assert group_offsets(target.broker, "readers")[(name, 0)] == restored[4]["offset"]


def test_dry_run_prints_the_plan_and_touches_nothing(target: Target, tmp_path: Path, small_backup: Path) -> None:
    renamed = target.name("sel-dry")
    result = restore_python(*target.args(tmp_path), "--source-dir", small_backup, "--topic-map", f"sel={renamed}",
                            "--from-time", iso(BASE + 2000), "--dry-run")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert [line for line in result.stdout.splitlines() if " spark-kafka-backup INFO " not in line] == [
        "dry run: nothing was changed",
        "sel: the backup does not record which cluster it came from",
        f"create topic {renamed} with 1 partition, the target's default configuration (the backup recorded none)",
        f"sel/0 -> {renamed}/0: 8 records (32 bytes of keys and values) selected, 8 to produce; "
        "target empty, offsets from 0",
        "  group readers: source offset 4 -> target offset 2",
        "(target offsets are predicted: the restore commits its records in transactions of up to 50,000 records, "
        "and each commit takes one offset in the target; a target that takes more than 5 s for 50,000 records gets "
        "more commits, so the offsets land a little later. The real run sets each group exactly where its records "
        "landed.)",
    ]
    # Each line once: the origin is not logged beside the report's own line.
    output = result.stdout + result.stderr
    assert output.count("sel: the backup does not record which cluster it came from") == 1, output
    from confluent_kafka.admin import AdminClient

    assert renamed not in AdminClient(target.broker.client_settings()).list_topics(timeout=10).topics


def test_a_backup_others_can_write_to_is_restored_with_a_warning(
    target: Target, tmp_path: Path, small_backup: Path
) -> None:
    segment = next((small_backup / "sel").glob("*records*"))
    for path in (small_backup / "sel", segment):
        path.chmod(path.stat().st_mode | 0o002)
    result = restore_python(*target.args(tmp_path), "--source-dir", small_backup, "--topic-map",
                            f"sel={target.name('sel-open')}", "--dry-run")  # fmt: skip
    assert result.returncode == 0, result.stderr
    warnings = [line for line in (result.stdout + result.stderr).splitlines() if "WARNING" in line]
    assert len(warnings) == 1 and "others can write to 2 files or directories of the backup" in warnings[0], warnings
    assert str(segment) in warnings[0] and f"chmod -R o-w {small_backup}" in warnings[0]


def test_rename_with_time_and_offset_windows(target: Target, tmp_path: Path, small_backup: Path) -> None:
    renamed = target.name("sel-window")
    result = run_restore(*target.args(tmp_path), "--source-dir", small_backup, "--topic-map", f"sel={renamed}",
                         "--from-time", str(BASE + 2000), "--to-time", iso(BASE + 8000),
                         "--offset-window", "sel=..6")  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:]
    restored = consume_all(target.broker, [renamed])
    assert [r["key"] for r in restored] == [base64.b64encode(b"k%d" % i).decode() for i in (2, 3, 4, 5, 6)]
    assert [r["timestamp"] for r in restored] == [BASE + i * 1000 for i in (2, 3, 4, 5, 6)]
    assert group_offsets(target.broker, "readers").get((renamed, 0)) == 2


def test_created_topic_takes_partitions_and_replication_and_untimed_records_are_outside_a_time_window(
    target: Target, tmp_path: Path
) -> None:
    """``--partitions`` and ``--replication-factor`` shape the created topic; with ``--from-time`` a record without
    a timestamp is outside the window, however early the window starts."""
    from confluent_kafka.admin import AdminClient

    backup = tmp_path / "backup"
    with PartitionWriter(backup / "untimed", "untimed", 0, fsync=False) as writer:
        for i in range(9):
            untimed = i % 3 == 0
            writer.append(Record(i, -2 if untimed else 0, None if untimed else BASE + i, b"k%d" % i, b"v%d" % i))
    name = target.name("untimed")
    maps = ["--topic-map", f"untimed={name}"] if target.prefix else []
    common = [*target.args(tmp_path), "--source-dir", str(backup), *maps, "--partitions", f"{name}=3"]
    # The cluster has one broker: two replicas are refused by it, named, before anything is produced or created.
    refused = restore_python(*common, "--replication-factor", "2")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr
    assert "replication factor" in refused.stderr.lower() and name in refused.stderr, refused.stderr
    admin = AdminClient(target.broker.client_settings())
    assert name not in admin.list_topics(timeout=10).topics

    result = run_restore(*common, "--replication-factor", "1", "--from-time", "0")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    created = admin.list_topics(name, timeout=10).topics[name].partitions
    assert sorted(created) == [0, 1, 2] and all(len(p.replicas) == 1 for p in created.values())
    restored = consume_all(target.broker, [name])
    assert [(r["partition"], r["key"], r["timestamp"]) for r in restored] == [
        (0, b64(b"k%d" % i), BASE + i) for i in range(9) if i % 3
    ]


def test_allow_non_empty_appends_once_across_a_rerun_and_force_offsets_moves_a_group_back(
    target: Target, tmp_path: Path, small_backup: Path
) -> None:
    """Three foreign records first; the restore appends after them, a rerun (same --state-dir) adds nothing, the
    backup is not written to, and a group ahead on the target moves back only with ``--force-offsets``."""
    from confluent_kafka import Producer

    name = target.name("sel-append")
    create_topics(target.broker, {name: 1})
    producer = Producer(target.broker.client_settings())
    for i in range(3):
        producer.produce(name, b"foreign-%d" % i, b"f%d" % i, partition=0)
    producer.flush(10)
    commit_offsets(target.broker, "readers", {(name, 0): 9})
    files_before = {path: path.read_bytes() for path in small_backup.rglob("*") if path.is_file()}
    state = tmp_path / "restore-state"
    args = [*target.args(tmp_path), "--source-dir", str(small_backup), "--topic-map", f"sel={name}",
            "--allow-non-empty", "--state-dir", str(state)]  # fmt: skip

    first = run_restore(*args)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    # The first restored record is at target offset 3, so readers (source offset 4) would go to 7, behind 9.
    assert f"group readers: {name}/0 left alone: would move back from 9 to 7" in first.stdout
    assert group_offsets(target.broker, "readers").get((name, 0)) == 9

    again = run_restore(*args, "--force-offsets")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "10 records were already in the target" in again.stdout
    assert group_offsets(target.broker, "readers").get((name, 0)) == 7
    restored = consume_all(target.broker, [name])
    assert [r["key"] for r in restored] == [b64(b"f%d" % i) for i in range(3)] + [b64(b"k%d" % i) for i in range(10)]
    assert [r["offset"] for r in restored][:4] == [0, 1, 2, 3]
    assert {path: path.read_bytes() for path in small_backup.rglob("*") if path.is_file()} == files_before


def _strip_magic(topic_dir: Path) -> None:
    """Make a v1 topic directory look like one written before the magic byte existed (mid 2019)."""
    from spark_kafka_backup.format.segment_index import ENTRY, decode_segment_index

    for path in topic_dir.iterdir():
        data = path.read_bytes()
        if path.name.endswith("_index"):
            entries = decode_segment_index(data, file=str(path))
            path.write_bytes(b"".join(ENTRY.pack(e.offset, e.position - 1, e.length) for e in entries))
        elif path.name.endswith("_records") or path.name.startswith("index_partition_"):
            path.write_bytes(data[1:])


def test_a_backup_from_before_the_magic_byte_is_read_and_restored_with_legacy_no_magic(
    target: Target, tmp_path: Path
) -> None:
    backup = tmp_path / "backup"
    with PartitionWriter(backup / "old", "old", 0, max_segment_size=200, fsync=False) as writer:
        for i in range(12):
            writer.append(Record(i, 0, BASE + i, b"k%d" % i, b"v%d" % i, (("h", b"%d" % i),) if i % 2 else ()))
    expected = backed_up(backup, ["old"])
    assert len(list((backup / "old").glob("*_records"))) > 1
    _strip_magic(backup / "old")
    refused = run_kbackup("cat", backup, "--topic", "old")
    assert refused.returncode == 1 and "--legacy-no-magic" in refused.stderr and "Traceback" not in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    read = run_kbackup("cat", backup, "--topic", "old", "--legacy-no-magic", check=True)
    assert [json.loads(line) for line in read.stdout.splitlines()] == expected

    name = target.name("old")
    maps = ["--topic-map", f"old={name}"] if target.prefix else []
    args = [*target.args(tmp_path), "--source-dir", str(backup), *maps]
    plain = restore_python(*args)
    assert plain.returncode == 1 and "--legacy-no-magic" in plain.stderr and "Traceback" not in plain.stderr
    restored = run_restore(*args, "--legacy-no-magic")
    assert restored.returncode == 0, restored.stdout[-3000:] + restored.stderr[-3000:]
    assert comparable(consume_all(target.broker, [name])) == comparable(expected)


# CI time: in the long tier; the quick tier covers groups committed and remapped: test_backup_then_restore_round_trip
@pytest.mark.long
def test_restore_into_a_brand_new_cluster_commits_its_groups(tmp_path: Path, small_backup: Path) -> None:
    """A cluster no consumer has used yet (no __consumer_offsets topic): the group is created at its offset.

    librdkafka's admin offset listing crashes the process with a segmentation fault on such a
    cluster (the first OffsetFetch answers NOT_COORDINATOR), so the restore must not use it there.
    """
    with local_cluster(warm_up=False) as fresh:
        # As spark-submit runs it (its Python driver's standard error is merged into its standard output).
        result = run_restore("--bootstrap-server", fresh.bootstrap_servers, "--source-dir", small_backup,
                             in_process=False)  # fmt: skip
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        # Progress on standard error, as the README says; the log on standard output.
        assert "restore: 1/1 partitions" in result.stderr and "restore: 1/1" not in result.stdout, result.stdout
        assert "restored sel: 10 records" in result.stdout, result.stdout
        # As docs/restore.md says: a created topic whose records its retention would not delete keeps the
        # retention it would have had (here the broker's 7 days), and nothing says otherwise.
        from confluent_kafka.admin import AdminClient, ConfigResource

        admin = AdminClient(fresh.client_settings())
        entries = next(iter(admin.describe_configs([ConfigResource("TOPIC", "sel")]).values())).result(30)
        assert entries["retention.ms"].value == "604800000", entries["retention.ms"]
        assert "retention" not in result.stdout + result.stderr, result.stdout
        # Run again, its output into a file as a scheduler would (> FILE 2>&1): the progress is not written over
        # by the JVM's later lines (it writes at its own position in the file), and it produces nothing.
        log = tmp_path / "rerun.log"
        with log.open("w") as out:
            rerun = subprocess.run(restore_command("--bootstrap-server", fresh.bootstrap_servers, "--source-dir",
                                                   small_backup), stdout=out, stderr=subprocess.STDOUT, env=job_env(),
                                   cwd=REPO, timeout=600)  # fmt: skip
        said = log.read_text()
        assert rerun.returncode == 0, said[-3000:]
        assert re.search(r"^restore: 1/1 partitions$", said, re.M), said  # a line of its own, whole
        assert "0 records, 0 bytes of keys and values" in said and "restore finished in" in said, said
        restored = consume_all(fresh, ["sel"])
        assert [(r["offset"], r["key"]) for r in restored] == [(i, b64(b"k%d" % i)) for i in range(10)]
        assert group_offsets(fresh, "readers") == {("sel", 0): 4}


# -- errors before anything is produced ---------------------------------------------------


def test_non_empty_target_is_refused(target: Target, tmp_path: Path, small_backup: Path) -> None:
    from confluent_kafka import Producer

    name = target.name("sel-busy")
    create_topics(target.broker, {name: 1})
    producer = Producer(target.broker.client_settings())
    producer.produce(name, b"someone else's record")
    producer.flush(10)
    result = restore_python(*target.args(tmp_path), "--source-dir", small_backup, "--topic-map", f"sel={name}")
    assert result.returncode == 1
    assert "already hold records that are not an earlier run of this restore" in result.stderr
    assert f"{name}/0 (offsets 0..0)" in result.stderr
    assert "Traceback" not in result.stderr


def test_target_with_fewer_partitions_is_refused(target: Target, tmp_path: Path) -> None:
    backup = tmp_path / "backup"
    for partition in range(3):
        with PartitionWriter(backup / "wide", "wide", partition, fsync=False) as writer:
            writer.append(Record(0, -1, None, b"k", b"v"))
    name = target.name("wide-narrow")
    create_topics(target.broker, {name: 2})
    result = restore_python(*target.args(tmp_path), "--source-dir", backup, "--topic-map", f"wide={name}")
    assert result.returncode == 1
    assert f"target topic {name!r} has 2 partitions, the backup of 'wide' has 3" in result.stderr


def test_topic_map_onto_another_restored_topic_is_refused(target: Target, tmp_path: Path) -> None:
    """Restoring the whole backup with ``small`` renamed onto ``dmg``, which is also in the backup: refused."""
    backup = tmp_path / "backup"
    for topic, partitions in (("small", 1), ("dmg", 2)):
        for partition in range(partitions):
            with PartitionWriter(backup / topic, topic, partition, fsync=False) as writer:
                writer.append(Record(0, -1, None, b"k", topic.encode()))
    result = restore_python(*target.args(tmp_path), "--source-dir", backup, "--topic-map", "small=dmg")
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "spark-kafka-backup restore: error: --topic-map small=dmg would restore 2 topics (dmg, small) into one topic "
        "'dmg', "
        "and 'dmg' itself is restored; map 'dmg' elsewhere too, or leave one out with --topics"
    )
    from confluent_kafka.admin import AdminClient

    assert "dmg" not in AdminClient(target.broker.client_settings()).list_topics(timeout=10).topics


def test_missing_topic_and_bad_flags(target: Target, tmp_path: Path, small_backup: Path) -> None:
    result = restore_python(*target.args(tmp_path), "--source-dir", small_backup, "--topics", "nope")
    assert result.returncode == 1
    assert "topic(s) nope are not in the backup" in result.stderr
    result = restore_python(*target.args(tmp_path), "--source-dir", small_backup, "--from-time", "yesterday")
    assert result.returncode == 2
    assert "--from-time takes ISO 8601" in result.stderr


# -- integrity: checksums from the catalog ----------------------------------------------------


def test_restore_refuses_a_damaged_segment_and_skips_it_on_request(target: Target, tmp_path: Path) -> None:
    from spark_kafka_backup.catalog.build import rebuild_catalog
    from spark_kafka_backup.catalog.store import read_catalog

    backup = tmp_path / "backup"
    with PartitionWriter(backup / "crc", "crc", 0, max_segment_size=600, fsync=False) as writer:
        for i in range(30):
            writer.append(Record(i, 0, BASE + i, b"k%d" % i, b"value-%d" % i * 5))
    write_consumer_offsets(backup / "crc", 0, {"readers": 20})
    rebuild_catalog(backup, ["crc"])
    catalog = read_catalog(backup, "crc", 0)
    assert catalog is not None and len(catalog.segments) >= 3
    damaged = catalog.segments[1]
    path = backup / "crc" / f"{damaged.name}_records"
    data = bytearray(path.read_bytes())
    data[30] ^= 0x01
    path.write_bytes(bytes(data))
    name = target.name("crc-restored")
    args = [*target.args(tmp_path), "--source-dir", str(backup), "--topic-map", f"crc={name}"]

    # The dry run checks what the real run checks, reports it, and fails the same way.
    dry = restore_python(*args, "--dry-run")
    assert dry.returncode == 1
    assert (
        f"  damaged, the restore refuses: offsets {damaged.first_offset}..{damaged.last_offset} "
        f"(segment {damaged.name}: {damaged.name}_records has CRC32C"
    ) in dry.stdout
    assert "--skip-bad-segments" in dry.stderr
    refused = run_restore(*args)
    assert refused.returncode == 1
    assert f"segment {damaged.name} (offsets {damaged.first_offset}..{damaged.last_offset}) is damaged" in (
        refused.stderr
    )
    assert "CRC32C" in refused.stderr and "--skip-bad-segments" in refused.stderr
    assert committed_end(target.broker, name, partitions=1) == 0

    skipped = run_restore(*args, "--skip-bad-segments")
    assert skipped.returncode == 0, skipped.stdout[-3000:]
    assert (
        f"not restored: crc/0 offsets {damaged.first_offset}..{damaged.last_offset} (segment {damaged.name}:"
        in skipped.stdout
    )
    lost = set(range(damaged.first_offset or 0, (damaged.last_offset or 0) + 1))
    restored = consume_all(target.broker, [name])
    assert [r["key"] for r in restored] == [b64(b"k%d" % i) for i in range(30) if i not in lost]
    # The group's offset 20 lands on record 20, shifted down by the records left out before it.
    assert group_offsets(target.broker, "readers")[(name, 0)] == 20 - len([o for o in lost if o < 20])


def test_restore_refuses_a_partition_whose_catalog_was_lost_before_creating_anything(
    target: Target, tmp_path: Path
) -> None:
    """One partition's catalog deleted (then its checksums cannot show a changed byte): the real run refuses before it
    creates the topic, naming the catalog; --skip-bad-segments restores the other partition and says what it left."""
    from confluent_kafka.admin import AdminClient

    from spark_kafka_backup.catalog.store import catalog_path
    from spark_kafka_backup.storage import as_local

    backup = tmp_path / "backup"
    for partition in (0, 1):
        with PartitionWriter(backup / "lost", "lost", partition, max_segment_size=600, fsync=False,
                             ledger=CatalogLedger(backup)) as writer:  # fmt: skip
            for i in range(20):
                writer.append(Record(i, 0, BASE + i, b"k%d-%d" % (partition, i), b"value-%d" % i * 5))
    write_consumer_offsets(backup / "lost", 1, {"readers": 10})
    lost = as_local(catalog_path(backup, "lost", 1))
    lost.unlink()
    name = target.name("lost-restored")
    args = [*target.args(tmp_path), "--source-dir", str(backup), "--topic-map", f"lost={name}"]
    refused = run_restore(*args)
    assert refused.returncode == 1, refused.stdout[-2000:]
    assert "topic 'lost' partition 1: segment segment_partition_001_from_offset_0000000000 (offsets 0.." in (
        refused.stderr
    )
    assert f"its catalog {lost} is missing, though spark-kafka-backup kept one for it" in refused.stderr
    assert "nothing was produced" in refused.stderr and "Traceback" not in refused.stderr
    assert name not in AdminClient(target.broker.client_settings()).list_topics(timeout=10).topics
    dry = restore_python(*args, "--dry-run")
    assert dry.returncode == 1 and "damaged, the restore refuses" in dry.stdout and "is missing" in dry.stdout

    skipped = run_restore(*args, "--skip-bad-segments")
    assert skipped.returncode == 0, skipped.stdout[-3000:]
    assert "not restored: lost/1 offsets 0.." in skipped.stdout
    restored = consume_all(target.broker, [name])
    assert sorted(str(r["key"]) for r in restored) == sorted(str(b64(b"k0-%d" % i)) for i in range(20))


def test_restore_checks_the_open_segment_too(target: Target, tmp_path: Path) -> None:
    """A flipped value byte in the newest (never finished) segment: refused, not restored as corrupted."""
    backup = tmp_path / "backup"
    records = [Record(i, 0, BASE + i, b"k%d" % i, b"value-%d" % i * 3) for i in range(60)]
    with PartitionWriter(
        backup / "open", "open", 0, max_segment_size=1500, fsync=False, ledger=CatalogLedger(backup)
    ) as w:
        for record in records:
            w.append(record)
    newest = max((backup / "open").glob("*_records"), key=lambda p: int(p.name.split("_")[5]))
    first_open = int(newest.name.split("_")[5])
    data = bytearray(newest.read_bytes())
    data[data.index(b"value-%d" % (first_open + 2))] ^= 0x20
    newest.write_bytes(bytes(data))
    name = target.name("open-restored")
    args = [*target.args(tmp_path), "--source-dir", str(backup), "--topic-map", f"open={name}"]

    dry = restore_python(*args, "--dry-run")
    assert dry.returncode == 1
    assert f"  damaged, the restore refuses: offsets {first_open}..59" in dry.stdout
    refused = run_restore(*args)
    assert refused.returncode == 1
    assert f"(offsets {first_open}..59) is damaged: {newest.name}: its first {len(data)} bytes (committed)" in (
        refused.stderr
    )
    assert committed_end(target.broker, name, partitions=1) == 0  # (--skip-bad-segments: see the damaged-segment test)


def test_restore_of_the_original_tools_crash_shapes(target: Target, tmp_path: Path) -> None:
    """Unindexed bytes between records (a, b) and shifted index entries (c): every record once, in order."""
    from tests.test_original_crash_shapes import RECORDS, build_shapes

    backup = tmp_path / "backup"
    build_shapes(backup / "shapes")
    name = target.name("shapes-restored")
    result = run_restore(*target.args(tmp_path), "--source-dir", str(backup), "--topic-map", f"shapes={name}",
                         "--topic-config", "retention.ms=-1")  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    restored = consume_all(target.broker, [name])
    assert [(r["partition"], r["offset"], r["key"], r["value"], r["headers"], r["timestamp"]) for r in restored] == [
        (p, r.offset, b64(r.key), b64(r.value), [["h", b64(b"%d" % r.offset)]], r.timestamp)
        for p in range(3)
        for r in RECORDS
    ]


def test_a_topic_whose_name_starts_with_a_dot_is_a_topic(target: Target, tmp_path: Path) -> None:
    """``.hidden`` is a legal Kafka topic: listed, verified, described and restored like any other."""
    backup = tmp_path / "backup"
    records = [Record(i, 0, BASE + i, b"k%d" % i, b"hidden-%d" % i) for i in range(500)]
    for topic, chosen in ((".hidden", records), ("plain", records[:3])):
        with PartitionWriter(backup / topic, topic, 0, fsync=False, ledger=CatalogLedger(backup)) as writer:
            for record in chosen:
                writer.append(record)
    ls = kbackup_lines("ls", backup)
    assert any(line.startswith(".hidden") for line in ls), ls
    verified = run_kbackup("verify", backup)
    assert verified.returncode == 0 and ".hidden/0: ok (1 segment, 500 records)" in verified.stdout
    assert ".hidden: 500 records" in "\n".join(kbackup_lines("describe", backup))
    name = target.name("dot-restored")
    result = run_restore(*target.args(tmp_path), "--source-dir", str(backup), "--topic-map", f".hidden={name}",
                         "--topic-map", f"plain={target.name('dot-plain')}")  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    restored = consume_all(target.broker, [name])
    assert [(r["offset"], r["key"], r["value"], r["timestamp"]) for r in restored] == [
        (r.offset, b64(r.key), b64(r.value), r.timestamp) for r in records
    ]


def test_a_record_the_target_would_refuse_ends_in_one_line_before_anything_is_produced(
    target: Target, tmp_path: Path
) -> None:
    """A record above the target topic's max.message.bytes: the plan names it, in one line on stderr."""
    backup = tmp_path / "backup"
    with PartitionWriter(backup / "big", "big", 0, fsync=False, ledger=CatalogLedger(backup)) as writer:
        writer.append(Record(0, 0, BASE, b"k", b"x" * 300_000))
    name = target.name("big-refused")
    create_topics(target.broker, {name: 1}, {name: {"max.message.bytes": "100000"}})
    result = run_restore(*target.args(tmp_path), "--source-dir", str(backup), "--topic-map", f"big={name}")
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, result.stderr[-3000:]
    assert errors[0].startswith(
        f"spark-kafka-backup restore: error: topic {name!r}: the largest restored record takes "
    ), errors
    assert "(partition 0 offset 0), more than max.message.bytes=100000: the broker would reject it" in errors[0]
    assert "Traceback" not in result.stdout + result.stderr
    assert consume_all(target.broker, [name]) == []


def test_restore_refuses_a_partition_index_cut_short(target: Target, tmp_path: Path) -> None:
    """30 bytes cut off the partition index hide its last segment: refused, nothing produced, no group moved."""
    backup = tmp_path / "backup"
    with PartitionWriter(
        backup / "cut", "cut", 0, max_segment_size=2000, fsync=False, ledger=CatalogLedger(backup)
    ) as writer:
        for i in range(200):
            writer.append(Record(i, 0, BASE + i, b"k%d" % i, b"value-%d" % i * 3))
    write_consumer_offsets(backup / "cut", 0, {"cut-readers": 150})
    index = backup / "cut" / "index_partition_000"
    index.write_bytes(index.read_bytes()[:-30])
    hidden = max((backup / "cut").glob("*_records"), key=lambda p: int(p.name.split("_")[5]))
    hidden_name = hidden.name[: -len("_records")]
    first_hidden = int(hidden_name.rsplit("_", 1)[1])
    name = target.name("cut-restored")
    args = [*target.args(tmp_path), "--source-dir", str(backup), "--topic-map", f"cut={name}"]

    refused = restore_python(*args)
    assert refused.returncode == 1, refused.stdout[-2000:]
    assert refused.stderr.startswith(
        f"spark-kafka-backup restore: error: the backup is damaged, nothing was produced: topic 'cut' partition 0: "
        f"segment {hidden_name} (offsets {first_hidden}..199): its files hold"
    )
    assert len(refused.stderr.strip().splitlines()) == 1
    assert committed_end(target.broker, name, partitions=1) == 0
    assert group_offsets(target.broker, "cut-readers") == {}
    dry = restore_python(*args, "--dry-run")
    assert dry.returncode == 1
    assert f"  damaged, the restore refuses: offsets {first_hidden}..199 (segment {hidden_name}:" in dry.stdout

    skipped = run_restore(*args, "--skip-bad-segments")
    assert skipped.returncode == 0, skipped.stdout[-3000:] + skipped.stderr[-3000:]
    assert f"not restored: cut/0 offsets {first_hidden}..199 (segment {hidden_name}:" in skipped.stdout
    restored = consume_all(target.broker, [name])
    assert [(r["offset"], r["key"], r["value"], r["timestamp"]) for r in restored] == [
        (i, b64(b"k%d" % i), b64(b"value-%d" % i * 3), BASE + i) for i in range(first_hidden)
    ]
    assert group_offsets(target.broker, "cut-readers") == {(name, 0): 150}


# -- topic configuration ----------------------------------------------------------------------


def test_created_topics_get_the_backed_up_configuration(target: Target, tmp_path: Path) -> None:
    from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, ResourceType

    from spark_kafka_backup.catalog.topics import record_topic

    backup = tmp_path / "backup"
    for partition in range(3):  # empty partitions: nothing to produce, no Spark needed
        with PartitionWriter(backup / "cfg", "cfg", partition, fsync=False) as writer:
            writer.ensure_segment(0)
    with PartitionWriter(backup / "quiet", "quiet", 0, fsync=False) as writer:  # no records, no groups: no task
        writer.ensure_segment(0)
    quiet = target.name("quiet-restored")
    # A consumer group id is any string: the plan and the log show it escaped, never acting on the terminal.
    write_consumer_offsets(backup / "cfg", 0, {"evil\x1b[2J\nforged": 0})
    # A tampered (or foreign) backup asks for settings that weaken the target cluster: not copied by default.
    weakening = {"unclean.leader.election.enable": "true", "min.insync.replicas": "1"}
    record_topic(backup, "cfg", 3, {"cleanup.policy": "compact", "retention.ms": "3600000", "segment.ms": "60000",
                                    **weakening})  # fmt: skip
    name = target.name("cfg-restored")
    args: list[str | Path] = [*target.args(tmp_path), "--source-dir", backup, "--topic-map", f"cfg={name}",
            "--topic-map", f"quiet={quiet}",
            "--drop-topic-config", "segment.ms", "--topic-config", "retention.ms=7200000"]  # fmt: skip
    dry = restore_python(*args, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"create topic {name} with 3 partitions, config cleanup.policy=compact, retention.ms=7200000\n" in dry.stdout
    assert f"  {name}: segment.ms=60000 of the backup is not set (--drop-topic-config)" in dry.stdout
    for key, value in weakening.items():
        assert f"  {name}: {key}={value} of the backup is not set (durability, replication and broker" in dry.stdout
    assert "  group evil\\x1b[2J\\x0aforged: " in dry.stdout and "\x1b" not in dry.stdout + dry.stderr, dry.stdout
    # A topic that gets none of its settings says why: all left out (each named), or none recorded.
    bare = restore_python(*target.args(tmp_path), "--source-dir", backup, "--topic-map", f"cfg={name}",
                          "--topic-map", f"quiet={quiet}", "--topic-configs", "none", "--dry-run")  # fmt: skip
    assert (f"create topic {name} with 3 partitions, the target's default configuration (the backup's settings are "
            "left out, each said below)\n") in bare.stdout, bare.stdout  # fmt: skip
    assert f"  {name}: cleanup.policy=compact of the backup is not set (--topic-configs none)" in bare.stdout
    assert (f"create topic {quiet} with 1 partition, the target's default configuration (the backup recorded none)"
            in bare.stdout), bare.stdout  # fmt: skip
    everything = restore_python(*args, "--topic-configs", "all", "--dry-run")
    assert "min.insync.replicas=1, retention.ms=7200000, unclean.leader.election.enable=true" in everything.stdout
    result = restore_python(*args)
    assert result.returncode == 0, result.stderr
    assert f"{name}: unclean.leader.election.enable=true of the backup is not set" in result.stdout + result.stderr
    # Every partition is counted and every topic named, those with nothing to produce too (only cfg/0 has a group).
    assert "4 partitions have nothing to produce (1 of them only place consumer group offsets)" in (
        result.stdout + result.stderr
    )
    assert f"restored {name}: 0 records" in result.stdout + result.stderr
    assert f"restored {quiet}: nothing to produce (1 partition; no records selected)" in result.stdout + result.stderr
    assert "\x1b" not in result.stdout + result.stderr
    admin = AdminClient(target.broker.client_settings())
    assert len(admin.list_topics(timeout=10).topics[name].partitions) == 3
    entries = next(iter(admin.describe_configs([ConfigResource(ResourceType.TOPIC, name)]).values())).result()
    assert entries["cleanup.policy"].value == "compact"
    assert entries["retention.ms"].value == "7200000"
    assert entries["segment.ms"].is_default or entries["segment.ms"].value != "60000"
    for key in weakening:  # the broker's, not set on the topic
        assert entries[key].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value, entries[key]


def test_groups_as_of_a_time_come_from_the_offset_history(target: Target, tmp_path: Path, small_backup: Path) -> None:
    from spark_kafka_backup.catalog.offset_history import append_round

    append_round(small_backup, BASE + 1000, {"readers": {("sel", 0): 2}})
    append_round(small_backup, BASE + 5000, {"readers": {("sel", 0): 6}})
    args = [*target.args(tmp_path), "--source-dir", str(small_backup), "--topic-map", f"sel={target.name('sel-hist')}"]
    early = restore_python(*args, "--groups-as-of", str(BASE + 3000), "--dry-run")
    assert early.returncode == 0, early.stderr
    assert f"consumer group offsets as of the offset round at {iso_time(BASE + 1000)}" in early.stdout
    assert "(epoch ms)" not in early.stdout
    assert "  group readers: source offset 2 -> target offset 2" in early.stdout
    # A point-in-time restore takes the groups as of its --to-time when the backup has history.
    late = restore_python(*args, "--to-time", iso(BASE + 9000), "--dry-run")
    assert "  group readers: source offset 6 -> target offset 6" in late.stdout
    none = restore_python(*args, "--groups-as-of", str(BASE), "--dry-run")
    assert none.returncode == 1
    assert "has no consumer offset round at or before" in none.stderr


def test_restore_to_a_checkpoint(target: Target, tmp_path: Path, small_backup: Path) -> None:
    from spark_kafka_backup.catalog import checkpoints

    checkpoints.record_completed(small_backup, {"readers": {("sel", 0): 3}}, {("sel", 0): 6}, BASE + 7000)
    pending = checkpoints.request(small_backup)
    args = [*target.args(tmp_path), "--source-dir", str(small_backup), "--topic-map", f"sel={target.name('sel-cp')}"]
    result = restore_python(*args, "--checkpoint", "1", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "6 records (24 bytes of keys and values) selected" in result.stdout  # offsets 0..5: below the cut's end 6
    assert "  group readers: source offset 3 -> target offset 3" in result.stdout
    refused = restore_python(*args, "--checkpoint", str(pending.id), "--dry-run")
    assert refused.returncode == 1
    assert f"checkpoint {pending.id} is requested, not completed" in refused.stderr
    # --to-time takes the groups of the latest completed checkpoint at or before it.
    later = restore_python(*args, "--to-time", str(BASE + 8000), "--dry-run")
    assert "  group readers: source offset 3 -> target offset 3" in later.stdout


# -- a checkpoint taken under load, restored ---------------------------------------------------


@pytest.mark.long
def test_checkpoint_taken_while_producing_and_committing_restores_consistently(
    kafka: BrokerUnderTest, target: Target, tmp_path: Path
) -> None:
    import re
    import threading

    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    from spark_kafka_backup.catalog import checkpoints
    from tests.kafka_helpers import start_backup

    topic = "cp-live"
    create_topics(kafka, {topic: 2})
    stop = threading.Event()
    sent = [0]

    def produce() -> None:
        producer = Producer(kafka.client_settings(**{"enable.idempotence": "true", "linger.ms": "10"}))
        while not stop.is_set():
            for _ in range(20):
                producer.produce(topic, key=b"k%d" % sent[0], value=b"v%d" % sent[0], partition=sent[0] % 2)
                sent[0] += 1
            producer.poll(0)
            time.sleep(0.02)
        producer.flush(30)

    def commit() -> None:
        # A consumer group trailing the producer, committing as it goes.
        from confluent_kafka.admin import AdminClient, OffsetSpec

        admin = AdminClient(kafka.client_settings())
        consumer = Consumer(kafka.client_settings(**{"group.id": "cp-readers", "enable.auto.commit": "false"}))
        while not stop.is_set():
            request = {TopicPartition(topic, p): OffsetSpec.latest() for p in range(2)}
            try:
                ends = {tp.partition: f.result().offset for tp, f in admin.list_offsets(request).items()}
                consumer.commit(
                    offsets=[TopicPartition(topic, p, max(0, e - 15)) for p, e in ends.items()], asynchronous=False
                )
            except KafkaException:  # a new topic's leader not known yet (NOT_LEADER_FOR_PARTITION): ask again
                pass
            time.sleep(0.1)
        consumer.close()

    workers = [threading.Thread(target=produce, daemon=True), threading.Thread(target=commit, daemon=True)]
    for worker in workers:
        worker.start()
    backup = tmp_path / "backup"
    log = tmp_path / "backup.log"
    config = tmp_path / "source.properties"
    client_config_file(config, kafka.extra_settings)
    process = start_backup("--bootstrap-server", kafka.bootstrap_servers, "--command-config", config,
                           "--target-dir", backup, "--topics", topic, "--trigger-interval", "1",
                           "--offsets-interval", "1", log=log)  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not re.search(r"batch \d+: [1-9]\d* records read", log.read_text()):
            time.sleep(0.3)
        checkpoint = checkpoints.request(backup)
        while time.monotonic() < deadline and checkpoints.read_checkpoint(backup, checkpoint.id).status != "completed":
            time.sleep(0.3)
        assert checkpoints.read_checkpoint(backup, checkpoint.id).status == "completed", log.read_text()[-3000:]
        time.sleep(1)  # keep writing and committing past the cut
    finally:
        stop.set()
        for worker in workers:
            worker.join(60)
        pid = re.findall(r"stop with SIGTERM to the driver process (\d+)", log.read_text())
        if pid:
            os.kill(int(pid[-1]), signal.SIGTERM)
        process.wait(120)
    cut = checkpoints.read_checkpoint(backup, checkpoint.id)
    committed = cut.groups["cp-readers"]
    for partition in range(2):
        assert 0 < committed[(topic, partition)] <= cut.ends[(topic, partition)]

    name = target.name("cp-live-restored")
    result = run_restore(*target.args(tmp_path), "--source-dir", backup, "--topic-map", f"{topic}={name}",
                         "--checkpoint", str(checkpoint.id))  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    source = consume_all(kafka, [topic])
    restored = consume_all(target.broker, [name])
    for partition in range(2):
        end = cut.ends[(topic, partition)]
        expected = [r for r in source if r["partition"] == partition and r["offset"] < end]
        mine = [r for r in restored if r["partition"] == partition]
        assert [(r["key"], r["value"]) for r in mine] == [(r["key"], r["value"]) for r in expected]
        # The group resumes exactly at the first record it had not consumed at the cut.
        position = group_offsets(target.broker, "cp-readers")[(name, partition)]
        # Target offsets are not list positions: each of the restore's transactions ends with a marker.
        resumed = [r for r in mine if r["offset"] >= position]
        unconsumed = [r for r in expected if r["offset"] >= committed[(topic, partition)]]
        assert [(r["key"], r["value"]) for r in resumed] == [(r["key"], r["value"]) for r in unconsumed]


def test_a_downgraded_encrypted_backup_is_refused_before_anything_is_produced(target: Target, tmp_path: Path) -> None:
    """A sealed segment replaced by a plain one of chosen records, the catalog deleted (issue 29)."""
    from confluent_kafka.admin import AdminClient

    from spark_kafka_backup.catalog.store import catalog_path, cataloged_marker_path
    from spark_kafka_backup.partition.reader import PartitionReader
    from spark_kafka_backup.storage import as_local

    kek = bytes(range(32))
    backup = tmp_path / "backup"
    with PartitionWriter(backup / "sealed", "sealed", 0, max_segment_size=400, fsync=False,
                         ledger=CatalogLedger(backup), encryption_key=kek) as writer:  # fmt: skip
        for i in range(40):
            writer.append(Record(i, 0, BASE + i, b"k%d" % i, b"v" * 40))
    reader = PartitionReader(backup / "sealed", 0)
    segment, following = reader.segments[1], reader.segments[2].start_offset
    forged = tmp_path / "forged"
    write_original_style(forged, 0, [[Record(o, 0, BASE, b"k", b"forged") for o in range(segment.start_offset,
                                                                                      following)]])  # fmt: skip
    records, index = reader.segment_paths(segment)
    (forged / "segment_partition_000_from_offset_0000000000_records").replace(as_local(records))
    (forged / "segment_partition_000_from_offset_0000000000_index").replace(as_local(index))
    as_local(catalog_path(backup, "sealed", 0)).unlink()
    as_local(cataloged_marker_path(backup, "sealed", 0)).unlink()  # a careful forger: no sign a catalog was kept
    key_file = tmp_path / "kek.hex"
    key_file.write_text(kek.hex())
    name = target.name("sealed-restored")
    args: list[str | Path] = [*target.args(tmp_path), "--source-dir", backup, "--topic-map", f"sealed={name}",
            "--encryption-key-file", key_file]  # fmt: skip
    for extra in (["--dry-run"], []):
        refused = restore_python(*args, *extra)
        assert refused.returncode == 1, refused.stdout[-2000:] + refused.stderr[-2000:]
        errors = [line for line in refused.stderr.splitlines() if line.strip()]
        assert len(errors) == 1 and "nothing was produced" in errors[0], refused.stderr
        assert f"segment {segment.name} is stored plain, but the partition is sealed with key id" in errors[0]
    assert name not in AdminClient(target.broker.client_settings()).list_topics(timeout=10).topics
