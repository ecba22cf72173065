"""Helpers for integration tests: run the Spark jobs, make topics, read them back plainly."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from spark_kafka_backup.spark_submit import job_environment, spark_submit_command
from tests.broker import BrokerUnderTest

REPO = Path(__file__).resolve().parent.parent  # the checkout (tests.conftest imports this module)


#: JVM options of the tests' ``spark-submit`` (the driver, and in ``local[N]`` the executors): a test's JVM lives for
#: seconds, and the quick compiler alone with the serial collector spends about a quarter less CPU on it (measured on
#: tests/test_backup_snapshot.py: 138 s of user time down to 102 s). The suite is CPU-bound on two cores; the jobs
#: themselves take the quick compiler alone where the driver carries no records (spark_submit.QUICK_JIT).
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def job_spark_conf(master: str) -> tuple[str, ...]:
    """Settings of a test job on ``master``: on a cluster, the executor JVMs get :data:`TEST_JVM_OPTIONS` too (each
    lives as long as its job; measured on a standalone cluster of two workers: a snapshot backup of 3,000 records
    spent 26 CPU-seconds instead of 32). In ``local[N]`` the executors are the driver's JVM."""
    if master.startswith("local"):
        return ()
    return (f"spark.executor.extraJavaOptions={TEST_JVM_OPTIONS}",)


def job_env() -> dict[str, str]:
    """Environment for spark-submit: this interpreter on driver and executors, this checkout importable."""
    env = job_environment()
    env.setdefault("SPARK_SUBMIT_OPTS", TEST_JVM_OPTIONS)  # the jobs' own class archive: as a user's jobs map it
    return env


def backup_command(*args: str | Path, master: str = "local[2]") -> list[str]:
    return spark_submit_command("backup", *args, master=master, conf=job_spark_conf(master))


def run_backup(
    *args: str | Path, timeout: float = 300, master: str = "local[2]", in_process: bool = True
) -> subprocess.CompletedProcess[str]:
    """A backup that ends by itself (a snapshot, or a refusal): its exit code and output. On ``local[2]`` it runs
    in this worker's process (see :mod:`tests.in_process`) unless ``in_process`` is False or the environment
    changed since that process's Spark JVM started; otherwise as ``spark-submit``."""
    from tests.in_process import job_in_process

    if in_process and master == "local[2]" and (done := job_in_process("backup", args)) is not None:
        return done
    return subprocess.run(
        backup_command(*args, master=master), capture_output=True, text=True, env=job_env(), cwd=REPO, timeout=timeout
    )


def start_job(command: list[str], log: Path) -> subprocess.Popen[bytes]:
    """Start a ``spark-submit`` command in its own process group (driver JVM and Python), output to ``log``."""
    with open(log, "ab") as out:
        return subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=job_env(), cwd=REPO, start_new_session=True
        )


def start_backup(*args: str | Path, log: Path, master: str = "local[2]") -> subprocess.Popen[bytes]:
    """Start a backup in its own process group, output to ``log``."""
    return start_job(backup_command(*args, master=master), log)


def kill_job(process: subprocess.Popen[bytes]) -> None:
    """``kill -9`` a job started by :func:`start_job`, its whole process group, and reap it.

    The group even when ``spark-submit`` itself has ended: its Python driver can outlive it.
    """
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(30)


def stop_driver(job: subprocess.Popen[bytes], log: Path, *, timeout: float = 120) -> int:
    """The operator's clean stop of a job started by :func:`start_job`: SIGTERM to the Python driver whose pid its
    log names; its exit code (the process group is killed if it does not end in ``timeout`` s)."""
    try:
        pid = int(re.findall(r"stop with SIGTERM to the driver process (\d+)", log.read_text())[-1])
        os.kill(pid, signal.SIGTERM)
        return job.wait(timeout)
    finally:
        if job.poll() is None:
            kill_job(job)


def run_kbackup(
    *args: str | Path, check: bool = False, timeout: float = 900, in_process: bool = True
) -> subprocess.CompletedProcess[str]:
    """The ``spark-kafka-backup`` CLI, output captured: in this process (:func:`kbackup_in_process`: the commands the
    tests call this way only read and write backup files, and an interpreter start costs ~0.6 CPU-seconds, ~120 times
    in a run), or, with ``in_process=False``, as a separate process (``python -m spark_kafka_backup``) from the
    checkout, as tests/test_cli.py runs it; ``timeout`` bounds only that process.

    ``check``: assert it exited 0 (the message holds its standard error).
    """
    if in_process:
        result = kbackup_in_process(*args)
    else:
        command = [sys.executable, "-m", "spark_kafka_backup", *map(str, args)]
        result = subprocess.run(command, capture_output=True, text=True, env=job_env(), cwd=REPO, timeout=timeout)
    if check:
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def kbackup_in_process(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """The ``spark-kafka-backup`` CLI run in this process (no interpreter start-up): its exit code, stdout and stderr.

    For commands that only read and write backup files (``cat``, ``verify``, ``prune``, ``ls`` ...); the CLI itself
    is tested as a separate process in tests/test_cli.py.
    """
    from spark_kafka_backup.cli import main
    from tests.in_process import exit_status, process_state_kept

    out, err = io.StringIO(), io.StringIO()
    argv = [str(arg) for arg in args]
    with process_state_kept(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = exit_status(main, argv)
    return subprocess.CompletedProcess(["spark-kafka-backup", *argv], code, out.getvalue(), err.getvalue())


def kbackup_lines(*args: str | Path) -> list[str]:
    result = kbackup_in_process(*args)
    result.check_returncode()
    return result.stdout.splitlines()


def create_topics(
    broker: BrokerUnderTest | dict[str, str],
    specs: dict[str, int],
    configs: dict[str, dict[str, str]] | None = None,
    *,
    replication: int = 1,
    exist_ok: bool = False,
) -> None:
    """Create the topics and return once metadata shows every partition with a leader.

    ``exist_ok``: a topic that already exists is taken as it is (tests sharing a broker that need one fixed name).

    CreateTopics answers before every broker's metadata cache knows the new partitions; a test that
    looks them up at once can see none (and ``all(...)`` over none is true), so wait for the leaders.
    ``replication=-1`` takes the cluster's default replication factor.
    """
    from confluent_kafka.admin import AdminClient, NewTopic

    settings = broker if isinstance(broker, dict) else broker.client_settings()
    admin = AdminClient(settings)
    topics = [NewTopic(name, count, replication, config=(configs or {}).get(name, {})) for name, count in specs.items()]
    from confluent_kafka import KafkaError, KafkaException

    for future in admin.create_topics(topics).values():
        try:
            future.result(30)
        except KafkaException as exc:
            if not (exist_ok and exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS):
                raise
    deadline = time.monotonic() + 30
    while True:
        listed = admin.list_topics(timeout=10).topics
        waiting = [
            name
            for name, count in specs.items()
            if name not in listed
            or len(listed[name].partitions) != count
            or any(p.leader < 0 for p in listed[name].partitions.values())
        ]
        if not waiting:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"topics {waiting} have no leader for every partition 30 s after creation")
        time.sleep(0.2)


def record_json(message: Any) -> dict[str, Any]:
    """A consumed message in ``spark-kafka-backup cat``'s JSON shape."""
    kind, timestamp = message.timestamp()
    names = {0: "NoTimestampType", 1: "CreateTime", 2: "LogAppendTime"}
    if kind == 0 or (kind == 1 and timestamp == -1):
        timestamp = None

    def b64(data: bytes | None) -> str | None:
        return None if data is None else base64.b64encode(data).decode()

    return {
        "topic": message.topic(),
        "partition": message.partition(),
        "offset": message.offset(),
        "timestampType": names[kind],
        "timestamp": timestamp,
        "key": b64(message.key()),
        "value": b64(message.value()),
        "headers": [[key, b64(value)] for key, value in (message.headers() or [])],
    }


def consume_all(broker: BrokerUnderTest, topics: Iterable[str], *, timeout: float = 60) -> list[dict[str, Any]]:
    """Every committed record of ``topics`` as a plain read_committed consumer sees it.

    Sorted by topic, partition and offset.
    """
    from confluent_kafka import Consumer, KafkaError, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(broker.client_settings())
    metadata = admin.list_topics(timeout=30)
    assignments = [TopicPartition(t, p, 0) for t in topics for p in metadata.topics[t].partitions]
    consumer = Consumer(
        broker.client_settings(
            **{
                "group.id": "kbackup-test-reader",
                "enable.auto.commit": "false",
                "isolation.level": "read_committed",
                "enable.partition.eof": "true",
                "auto.offset.reset": "earliest",
            }
        )
    )
    consumer.assign(assignments)
    remaining = {(tp.topic, tp.partition) for tp in assignments}
    records: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while remaining and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            continue
        if message.error():
            if message.error().code() == KafkaError._PARTITION_EOF:
                remaining.discard((message.topic(), message.partition()))
                continue
            raise RuntimeError(message.error().str())
        records.append(record_json(message))
    consumer.close()
    assert not remaining, f"did not reach the end of {sorted(remaining)}"
    return sorted(records, key=lambda r: (r["topic"], r["partition"], r["offset"]))


def backed_up(target: str | Path, topics: Sequence[str]) -> list[dict[str, Any]]:
    """``spark-kafka-backup cat`` of the backup, for ``topics``, in (topic, partition, offset) order."""
    records = []
    for topic in topics:
        records += [json.loads(line) for line in kbackup_lines("cat", target, "--topic", topic)]
    return sorted(records, key=lambda r: (r["topic"], r["partition"], r["offset"]))


def commit_offsets(broker: BrokerUnderTest, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Commit ``group``'s offsets as a consumer of that group would (no member stays)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(broker.client_settings(**{"group.id": group, "enable.auto.commit": "false"}))
    try:
        consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


def client_config_file(path: Path, settings: dict[str, str]) -> Path:
    """Write Kafka client settings (without ``bootstrap.servers``) as a ``--command-config`` file."""
    path.write_text("".join(f"{key}={value}\n" for key, value in settings.items() if key != "bootstrap.servers"))
    return path
