"""A job stopped by SIGTERM or SIGINT to its Python driver: a snapshot that did not reach its end is not a success
(exit 128 + signal, one line saying how far it got, no traceback of Python or the JVM), and its rerun completes it
exactly."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.broker import BrokerUnderTest
from tests.kafka_helpers import backed_up, client_config_file, consume_all, create_topics, run_backup, start_backup
from tests.live_load import wait_for

TOPIC = "stop-snap"
RECORDS = 40_000
STOPPED = re.compile(r"spark-kafka-backup backup: error: the snapshot was stopped by (SIGTERM|SIGINT) before")
#: What a traceback of Python or the JVM looks like in a job's output.
TRACEBACK = re.compile(r"Traceback \(most recent call last\)|^\s+at [\w.$]+\(|Exception in thread|StackOverflowError",
                       re.M)  # fmt: skip


def driver_pid(job: subprocess.Popen[bytes]) -> int | None:
    """The pid of the Python driver ``spark-submit`` started (a process of the job's group running jobs/backup.py)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getpgid(int(entry.name)) != job.pid:
                continue
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, ProcessLookupError):
            continue
        if any(part.endswith(b"jobs/backup.py") for part in command) and b"java" not in command[0]:
            return int(entry.name)
    return None


def _fill(kafka: BrokerUnderTest, topic: str) -> None:
    from confluent_kafka import Producer

    create_topics(kafka, {topic: 4})
    producer = Producer(kafka.client_settings(**{"linger.ms": "20", "batch.num.messages": "10000"}))
    for i in range(RECORDS):
        producer.produce(topic, key=b"k%d" % (i % 1000), value=b"v%08d" % i, partition=i % 4)
        if i % 50_000 == 0:
            producer.flush(60)
    producer.flush(60)


def _stopped(job_args: tuple[str | Path, ...], log: Path, sent: signal.Signals, moment: str) -> str:
    """Start the backup, send ``sent`` to its Python driver once its log matches ``moment``; check it exits
    ``128 + sent`` saying it was stopped, with no traceback; its output."""
    job = start_backup(*job_args, log=log)
    try:
        wait_for(lambda: re.search(moment, log.read_text(errors="replace")), 240, moment, job=job, log=log)
        pid = None
        deadline = time.monotonic() + 60
        while pid is None and time.monotonic() < deadline:
            pid = driver_pid(job)
            if pid is None:
                time.sleep(0.2)
        assert pid is not None, log.read_text()[-3000:]
        os.kill(pid, sent)
        code = job.wait(180)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(30)
    output = log.read_text(errors="replace")
    assert code == 128 + sent, f"{sent.name} at {moment!r}: exit {code}\n{output[-4000:]}"
    assert STOPPED.findall(output) == [sent.name], f"{sent.name} at {moment!r}\n{output[-4000:]}"
    assert not TRACEBACK.search(output), f"{sent.name} at {moment!r}\n{output[-6000:]}"
    return output


def _snapshot_args(kafka: BrokerUnderTest, tmp_path: Path, topic: str) -> tuple[str | Path, ...]:
    config = client_config_file(tmp_path / "client.properties", kafka.extra_settings)
    return ("--bootstrap-server", kafka.bootstrap_servers, "--command-config", config, "--target-dir",
            tmp_path / "backup", "--topics", topic, "--snapshot", "--max-records-per-trigger", "2000")  # fmt: skip


def _rerun_completes(kafka: BrokerUnderTest, tmp_path: Path, args: tuple[str | Path, ...], topic: str) -> None:
    """The same snapshot run again (in this process's Spark when it can: the stop is what needed a process of its
    own) completes it: every record of the topic once, in order."""
    finished = run_backup(*args)
    assert finished.returncode == 0, finished.stdout[-4000:] + finished.stderr[-4000:]
    assert "snapshot finished" in finished.stdout + finished.stderr
    assert backed_up(tmp_path / "backup", [topic]) == consume_all(kafka, [topic])


@pytest.mark.long
def test_a_snapshot_stopped_while_it_reads_exits_143_says_how_far_and_its_rerun_completes_it(
    kafka: BrokerUnderTest, tmp_path: Path
) -> None:
    _fill(kafka, TOPIC)
    args = _snapshot_args(kafka, tmp_path, TOPIC)
    said = _stopped(args, tmp_path / "stop.log", signal.SIGTERM, r"batch \d+: [1-9]\d* records read")
    assert re.search(r"\d of 4 partitions backed up to the end offsets it planned, [1-9][\d,]* offsets still to read",
                     said), said[-2000:]  # fmt: skip
    _rerun_completes(kafka, tmp_path, args, TOPIC)


@pytest.mark.long
def test_a_snapshot_stopped_at_three_moments_by_sigterm_and_sigint_is_completed_by_its_rerun(
    kafka: BrokerUnderTest, tmp_path: Path
) -> None:
    topic = "stop-snap-moments"
    _fill(kafka, topic)
    args = _snapshot_args(kafka, tmp_path, topic)
    # Moments: Spark still starting (no handler of the job's own yet), at once after the query started, and between
    # batches; each signal at each.
    moments = [r"backing up topics", r"running; stop with SIGTERM", r"batch \d+: [1-9]\d* records read"]
    for number, (sent, moment) in enumerate(
        (sent, moment) for moment in moments for sent in (signal.SIGTERM, signal.SIGINT)
    ):
        _stopped(args, tmp_path / f"stop-{number}.log", sent, moment)
    _rerun_completes(kafka, tmp_path, args, topic)
