"""Continuous backup: SIGKILL at any moment loses and duplicates nothing.

Also: new topics are picked up while it runs, and SIGTERM stops it cleanly.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kbackup.catalog import checkpoints
from kbackup.partition.layout import list_partitions
from kbackup.partition.reader import PartitionReader
from kbackup.spark.submit import client_config_file
from tests.broker import BrokerUnderTest
from tests.kafka_helpers import backed_up, consume_all, create_topics, run_backup, start_backup

BATCH_LINE = re.compile(r"batch (\d+): (\d+) records read in")


class Producer(threading.Thread):
    """Writes records with keys, values and headers until stopped."""

    def __init__(self, kafka: BrokerUnderTest, topic: str, partitions: int, rate: float = 400) -> None:
        super().__init__(daemon=True)
        self.kafka, self.topic, self.partitions, self.rate = kafka, topic, partitions, rate
        self.sent = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        from confluent_kafka import Producer as KafkaProducer

        producer = KafkaProducer(self.kafka.client_settings(**{"enable.idempotence": "true", "linger.ms": "20"}))
        while not self._stop_event.is_set():
            for _ in range(20):
                i = self.sent
                producer.produce(
                    self.topic,
                    key=None if i % 9 == 0 else f"k{i}".encode(),
                    value=f"value-{i}".encode() * (1 + i % 5),
                    headers=[("n", str(i).encode()), ("n", None)] if i % 4 == 0 else None,
                    partition=i % self.partitions,
                )
                self.sent += 1
            producer.poll(0)
            time.sleep(20 / self.rate)
        assert producer.flush(30) == 0

    def stop(self) -> None:
        self._stop_event.set()
        self.join(60)


def _batches(log: Path) -> list[tuple[int, int]]:
    text = log.read_text(errors="replace") if log.exists() else ""
    return [(int(batch), int(rows)) for batch, rows in BATCH_LINE.findall(text)]


def _wait_for(condition: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _client_args(kafka: BrokerUnderTest, tmp_path: Path) -> list[str]:
    config = tmp_path / "client.properties"
    client_config_file(config, kafka.extra_settings)
    return ["--bootstrap-server", kafka.bootstrap_servers, "--command-config", str(config)]


@pytest.mark.parametrize("source", ["kbackup", "spark"])
def test_sigkill_during_continuous_backup_loses_and_duplicates_nothing(
    kafka: BrokerUnderTest, tmp_path: Path, source: str
) -> None:
    topic = f"crash-orders-{source}"
    create_topics(kafka, {topic: 3})
    target = tmp_path / "backup"
    args = [*_client_args(kafka, tmp_path), "--target-dir", str(target), "--topics", topic,
            "--trigger-interval", "1", "--offsets-interval", "2", "--max-offsets-per-trigger", "700",
            "--max-segment-size", "16384", "--kafka-source", source]  # fmt: skip
    producer = Producer(kafka, topic, 3)
    producer.start()
    rng = random.Random(7)
    log = tmp_path / "backup.log"
    try:
        # Kill points: during start-up, right after a batch, and at random moments mid-run. Start-up comes before
        # either source reads anything, so it is killed once, with kbackup's source (CI time).
        for kill in range(0 if source == "kbackup" else 1, 3):
            process = start_backup(*args, log=log)
            seen = len(_batches(log))
            if kill == 0:
                time.sleep(rng.uniform(3, 8))
            else:
                _wait_for(lambda seen=seen: len(_batches(log)) > seen, 180, "a micro-batch")
                time.sleep(0 if kill == 1 else rng.uniform(0.2, 2.5))
            assert process.poll() is None, log.read_text()[-3000:]
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)
    finally:
        producer.stop()
    assert producer.sent > 1000
    result = run_backup(*args, "--snapshot")
    assert result.returncode == 0, result.stdout[-3000:]
    expected = consume_all(kafka, [topic])
    got = backed_up(target, [topic])
    assert len(expected) == producer.sent
    assert [(r["partition"], r["offset"]) for r in got] == [(r["partition"], r["offset"]) for r in expected]
    assert got == expected
    assert sum(len(PartitionReader(target / topic, p).segments) for p in list_partitions(target / topic)) > 3


def test_new_topic_is_picked_up_and_sigterm_stops_cleanly(kafka: BrokerUnderTest, tmp_path: Path) -> None:
    create_topics(kafka, {"grow-first": 2})
    first = Producer(kafka, "grow-first", 2)
    first.start()
    target = tmp_path / "backup"
    log = tmp_path / "backup.log"
    process = start_backup(
        *_client_args(kafka, tmp_path), "--target-dir", str(target), "--topics-regex", "grow-.*",
        "--trigger-interval", "1", "--offsets-interval", "1", log=log,
    )  # fmt: skip
    try:
        _wait_for(lambda: any(rows > 0 for _, rows in _batches(log)), 180, "a batch with records")
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

        _wait_for(caught_up, 120, "the backup to hold both topics")
        # A checkpoint asked of the running backup: its cut covers both topics, and it completes.
        requested = subprocess.run(
            [sys.executable, "-m", "kbackup", "checkpoint", "create", str(target)], capture_output=True, text=True
        )
        assert requested.stdout.startswith("checkpoint 1 requested"), requested.stderr
        _wait_for(lambda: checkpoints.read_checkpoint(target, 1).status == "completed", 60, "checkpoint 1")
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
    assert "stopping" in log.read_text()
