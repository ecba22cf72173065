"""Continuous backup: SIGKILL at any moment loses and duplicates nothing.

Also: new topics are picked up while it runs, and SIGTERM stops it cleanly.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from spark_kafka_backup.catalog import checkpoints
from spark_kafka_backup.format.frames import is_framed
from spark_kafka_backup.partition.layout import list_partitions
from spark_kafka_backup.partition.reader import PartitionReader
from tests.broker import BrokerUnderTest
from tests.kafka_helpers import (
    backed_up,
    consume_all,
    create_topics,
    run_backup,
    run_kbackup,
    start_backup,
    stop_driver,
)
from tests.live_load import Producer, batches, client_args, more_batches, wait_for


# Both long (CI time): the quick tier kills backups at random moments in tests/test_crash_repair.py.
@pytest.mark.long
@pytest.mark.parametrize("source", ["python", "spark"])
def test_sigkill_during_continuous_backup_loses_and_duplicates_nothing(
    kafka: BrokerUnderTest, tmp_path: Path, source: str
) -> None:
    topic = f"crash-orders-{source}"
    create_topics(kafka, {topic: 3})
    target = tmp_path / "backup"
    common = [*client_args(kafka, tmp_path), "--target-dir", str(target), "--topics", topic,
              "--max-segment-size", "16384", "--kafka-source", source]  # fmt: skip
    # Small batches while killed (a kill lands inside one); the last run takes the rest in a few.
    args = [*common, "--trigger-interval", "1", "--offsets-interval", "2", "--max-records-per-trigger", "700"]
    producer = Producer(kafka, topic, 3)
    producer.start()
    rng = random.Random(7)
    log = tmp_path / "backup.log"
    try:
        # Kill points: 0 during start-up, 1 right after a batch, 2 at a random moment of a batch; each kill costs a
        # Spark start (CI time): start-up comes before either source reads anything and the sink is the same, so
        # spark-kafka-backup's source is killed at 0 and 2, Spark's right after a batch. Then Spark's run gets the
        # documented SIGTERM to the spark-submit JVM instead: Spark's shutdown hook abandons the batch in flight, exit
        # 143, what is committed verifies. The run after each is the continuous backup started again.
        for kill in (0, 2) if source == "python" else (1, "sigterm"):
            process = start_backup(*args, log=log)
            seen = len(batches(log))
            if kill == 0:
                time.sleep(rng.uniform(3, 8))
            else:
                wait_for(more_batches(log, seen), 180, "a micro-batch")
                time.sleep(0 if kill == 1 else rng.uniform(0.2, 2.5))
            assert process.poll() is None, log.read_text()[-3000:]
            if kill == "sigterm":
                process.send_signal(signal.SIGTERM)  # the JVM itself: spark-submit execs it
                assert process.wait(90) == 143, log.read_text()[-3000:]
                verified = run_kbackup("verify", target)
                assert verified.returncode == 0, verified.stdout + verified.stderr
                continue
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)
    finally:
        producer.stop()
    assert producer.sent > 1000
    result = run_backup(*common, "--snapshot")
    assert result.returncode == 0, result.stdout[-3000:]
    expected = consume_all(kafka, [topic])
    got = backed_up(target, [topic])
    assert len(expected) == producer.sent
    assert [(r["partition"], r["offset"]) for r in got] == [(r["partition"], r["offset"]) for r in expected]
    assert got == expected
    assert sum(len(PartitionReader(target / topic, p).segments) for p in list_partitions(target / topic)) > 3


@pytest.mark.long
def test_new_topic_is_picked_up_and_sigterm_stops_cleanly(kafka: BrokerUnderTest, tmp_path: Path) -> None:
    create_topics(kafka, {"grow-first": 2})
    first = Producer(kafka, "grow-first", 2)
    first.start()
    target = tmp_path / "backup"
    log = tmp_path / "backup.log"
    process = start_backup(
        *client_args(kafka, tmp_path), "--target-dir", str(target), "--topics-regex", "grow-.*",
        "--trigger-interval", "1", "--offsets-interval", "1", "--compression", "gzip", log=log,
    )  # fmt: skip
    try:
        wait_for(lambda: any(rows > 0 for _, rows in batches(log)), 180, "a batch with records")
        create_topics(kafka, {"grow-second": 3})
        second = Producer(kafka, "grow-second", 3)
        second.start()
        time.sleep(3)
        second.stop()
        first.stop()

        def caught_up() -> bool:
            try:
                return len(backed_up(target, ["grow-first", "grow-second"])) == first.sent + second.sent
            except subprocess.CalledProcessError:
                return False  # grow-second is not in the backup yet

        wait_for(caught_up, 120, "the backup to hold both topics")
        # A checkpoint asked of the running backup: its cut covers both topics, and it completes.
        requested = run_kbackup("checkpoint", "create", target)
        assert requested.stdout.startswith("checkpoint 1 requested"), requested.stderr
        wait_for(lambda: checkpoints.read_checkpoint(target, 1).status == "completed", 60, "checkpoint 1")
        cut = checkpoints.read_checkpoint(target, 1).ends
        assert sum(end for (topic, _), end in cut.items() if topic == "grow-second") == second.sent
        # The operator's clean stop: SIGTERM to the Python driver, whose pid the job logs.
        pid = int(re.findall(r"stop with SIGTERM to the driver process (\d+)", log.read_text())[-1])
        os.kill(pid, signal.SIGTERM)
        assert process.wait(60) == 0, log.read_text()[-3000:]
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        first.stop()
    assert backed_up(target, ["grow-first", "grow-second"]) == consume_all(kafka, ["grow-first", "grow-second"])
    assert sorted(list_partitions(target / "grow-second")) == [0, 1, 2]
    assert "stopping; a batch still in flight is not committed: the next start reads it again" in log.read_text()
    # No traceback of Python (the driver's streaming-source runner) or of the JVM (the stream thread) for a stop.
    assert not re.search(r"Traceback \(most recent call last\)|Exception in thread|StackOverflowError",
                         log.read_text()), log.read_text()[-4000:]  # fmt: skip
    # --compression: a clean stop compresses each partition's newest segment too, so nothing stays plain.
    assert "sealed the newest segment of 5 partitions (compressed with gzip)" in log.read_text()
    heads = [path.read_bytes()[:4] for path in target.glob("grow-*/*_records")]
    assert heads and all(is_framed(head) for head in heads), heads
    assert run_kbackup("verify", target, "--deep").returncode == 0


def test_the_batch_that_finds_records_after_idle_triggers_says_how_many_it_read(
    kafka: BrokerUnderTest, tmp_path: Path
) -> None:
    """Spark reports a trigger that found nothing under the number of the next batch; the batch that then runs
    with records takes that number: its line says what it read, not the idle trigger's 0."""
    from confluent_kafka import Producer as KafkaProducer

    create_topics(kafka, {"idle-first": 2})
    log = tmp_path / "backup.log"
    process = start_backup(*client_args(kafka, tmp_path), "--target-dir", str(tmp_path / "backup"), "--topics",
                           "idle-first", "--trigger-interval", "1", log=log)  # fmt: skip
    try:
        producer = KafkaProducer(kafka.client_settings())
        written = re.compile(r"batch (\d+): ([\d,]+) records, [\d,]+ bytes written")
        for round_ in range(2):  # records, then nothing for a while (idle triggers), then records again
            for i in range(150):
                producer.produce("idle-first", value=b"v%d" % i, partition=i % 2)
            producer.flush(30)

            def has_written(batches_before: int = round_) -> bool:
                return len(written.findall(log.read_text())) > batches_before

            wait_for(has_written, 180, "a batch that wrote records", job=process)
            if round_ == 0:
                time.sleep(13)  # Spark reports a trigger without data after 10 s of them
        pid = int(re.findall(r"stop with SIGTERM to the driver process (\d+)", log.read_text())[-1])
        time.sleep(2)  # its progress is reported within the next second
        os.kill(pid, signal.SIGTERM)
        assert process.wait(60) == 0, log.read_text()[-3000:]
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    text = log.read_text()
    wrote = {int(batch): int(rows.replace(",", "")) for batch, rows in written.findall(text)}
    assert sum(wrote.values()) == 300, text[-3000:]
    read = dict(batches(log))
    for batch, rows in wrote.items():
        assert read.get(batch) == rows, f"batch {batch} wrote {rows} records; its read line: {read.get(batch)}\n{text}"
    lines = [batch for batch, _ in batches(log)]
    assert len(lines) == len(set(lines)), text  # one line a batch


def test_a_setting_that_asks_for_sparks_prometheus_endpoint_finds_the_ui_on(
    kafka: BrokerUnderTest, tmp_path: Path
) -> None:
    """The launcher starts jobs with Spark's UI off; docs/operations.md's tip (``--spark-conf
    spark.ui.prometheus.enabled=true``) turns it on, and the executors' metrics are there to scrape."""
    import urllib.request

    from devkit.kafka_cluster import free_port

    create_topics(kafka, {"ui-metrics": 1})
    port = free_port()
    log = tmp_path / "backup.log"
    process = start_backup(
        *client_args(kafka, tmp_path), "--target-dir", str(tmp_path / "backup"), "--topics", "ui-metrics",
        "--trigger-interval", "1", "--spark-conf", "spark.ui.prometheus.enabled=true",
        "--spark-conf", f"spark.ui.port={port}", log=log,
    )  # fmt: skip
    try:
        wait_for(lambda: "stop with SIGTERM to the driver process" in log.read_text(), 180, "the job running",
                 job=process, log=log)  # fmt: skip
        url = f"http://127.0.0.1:{port}/metrics/executors/prometheus"
        with urllib.request.urlopen(url, timeout=30) as answer:
            served = answer.read().decode()
        assert answer.status == 200 and "metrics_executor_" in served, served[:2000]
    finally:
        stopped = stop_driver(process, log, timeout=60)
    assert stopped == 0, log.read_text()[-3000:]
