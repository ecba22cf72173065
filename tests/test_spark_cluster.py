"""On a Spark standalone cluster: executors and drivers lost in the middle of the backup and the restore.

The cluster is a master and two workers of one core each (:mod:`devkit.spark_cluster`), so every
executor is a JVM of its own with its own Python workers, and the driver is the ``spark-submit`` process.
The backup's target and checkpoint are on a local path every worker sees, as a shared file system would be.
A lost machine is ``kill -9`` of a worker's whole process group (worker, executor JVM); the executor's Python
workers are in a process group of PySpark's own and end when their executor's pipe closes, as they would with
the machine. A lost driver is ``kill -9`` of the ``spark-submit`` process group. Every check compares every
record and every group offset.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from devkit.spark_cluster import SparkCluster
from spark_kafka_backup.partition.layout import list_partitions
from spark_kafka_backup.partition.offsets_file import read_consumer_offsets
from tests.broker import BrokerUnderTest
from tests.kafka_helpers import (
    TEST_JVM_OPTIONS,
    backed_up,
    commit_offsets,
    consume_all,
    create_topics,
    kbackup_in_process,
    kill_job,
    run_backup,
    start_backup,
)
from tests.live_load import Producer, batches, client_args, more_batches, wait_for
from tests.restore_helpers import (
    Target,
    check_groups,
    committed_end,
    comparable,
    run_restore,
    start_restore,
    write_backup,
)
from tests.s3_server import S3Server

LOCK_WAIT = re.compile(r"batch (\d+): waited ([\d.]+) s for the lock of (\S+)")


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkCluster]:
    with SparkCluster(workers=2, cores=1, daemon_java_options=TEST_JVM_OPTIONS) as cluster:
        yield cluster


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as stat:
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ")".
        return int(stat.read().rsplit(")", 1)[1].split()[1])


def _descends_from(pid: int, ancestor: int) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        try:
            pid = _parent(pid)
        except (OSError, IndexError, ValueError):
            return False
    return False


def lock_holders(cluster: SparkCluster, worker: int, target: Path) -> list[int]:
    """Processes under ``worker`` (its executor's Python workers) holding a partition index lock of ``target``."""
    process = cluster.nodes[worker].process
    assert process is not None
    return [pid for pid in lock_holders_anywhere(target) if _descends_from(pid, process.pid)]


def lock_holders_anywhere(target: Path) -> list[int]:
    """Processes holding the flock of a partition index of ``target``.

    ``/proc/locks`` lines read ``N: FLOCK ADVISORY WRITE PID MAJ:MIN:INODE START END``.
    """
    inodes = set()
    for index in target.glob("*/index_partition_*"):
        try:
            inodes.add(index.stat().st_ino)
        except FileNotFoundError:
            continue  # replaced while listed
    holders = []
    with open("/proc/locks") as locks:
        for line in locks:
            fields = line.split()
            if len(fields) < 6 or fields[1] != "FLOCK" or fields[4] == "->":
                continue
            pid, inode = int(fields[4]), int(fields[5].rsplit(":", 1)[1])
            if inode in inodes:
                holders.append(pid)
    return holders


TASK_LINE = re.compile(r"(Running|Finished) task (\d+)\.(\d+) in stage (\S+) \(TID (\d+)\)")


def _task_lines(cluster: SparkCluster, worker: int, since: float) -> list[tuple[str, str, str, str, str]]:
    """Task lines of the executor logs (Spark's INFO log, ``APP/EXECUTOR/stderr``) of apps started after ``since``."""
    lines = []
    for stderr in sorted(cluster.work_dir(worker).glob("app-*/*/stderr")):
        if stderr.parent.parent.stat().st_mtime >= since - 1:
            lines += TASK_LINE.findall(stderr.read_text(errors="replace"))
    return lines


def running_tasks(cluster: SparkCluster, worker: int, since: float) -> set[str]:
    """Task ids worker ``worker``'s executors of this job started and have not finished."""
    running: set[str] = set()
    for state, _, _, _, tid in _task_lines(cluster, worker, since):
        (running.add if state == "Running" else running.discard)(tid)
    return running


def executor_log_tails(cluster: SparkCluster, since: float, lines: int = 40) -> str:
    """The ends of the executor logs of apps started after ``since``: what a failed wait shows beside the job's."""
    parts = []
    for worker in range(len(cluster.nodes)):
        for stderr in sorted(cluster.work_dir(worker).glob("app-*/*/stderr")):
            if stderr.parent.parent.stat().st_mtime >= since - 1:
                tail = stderr.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"--- worker {worker}: {stderr.parent.parent.name}/{stderr.parent.name}/stderr")
                parts += tail
    return "\n".join(parts)


def retried_tasks(cluster: SparkCluster, since: float) -> list[str]:
    """``task N.A in stage S`` lines of attempts after the first (A > 0) of this job, on any worker."""
    return sorted(
        f"task {index}.{attempt} in stage {stage}"
        for worker in range(len(cluster.nodes))
        for state, index, attempt, stage, _ in _task_lines(cluster, worker, since)
        if state == "Running" and int(attempt) > 0
    )


@pytest.mark.long
def test_continuous_backup_survives_a_lost_executor_and_a_lost_driver(
    kafka: BrokerUnderTest, spark: SparkCluster, tmp_path: Path
) -> None:
    topic = "cluster-orders"
    create_topics(kafka, {topic: 4})
    target = tmp_path / "backup"
    common = [*client_args(kafka, tmp_path), "--target-dir", str(target), "--topics", topic,
              "--max-segment-size", "65536"]  # fmt: skip
    # Small batches while executors and the driver die; the rerun takes the rest in a few.
    args = [*common, "--trigger-interval", "1", "--offsets-interval", "2", "--max-offsets-per-trigger", "4000"]
    producer = Producer(kafka, topic, 4, rate=1500)
    producer.start()
    rng = random.Random(11)
    log = tmp_path / "backup.log"
    submitted = time.time()
    process = start_backup(*args, log=log, master=spark.master_url)
    try:
        wait_for(lambda: any(rows for _, rows in batches(log)), 240, "the backup's first records", job=process, log=log)
        assert process.poll() is None, log.read_text()[-3000:]

        # Executor lost while it holds a partition writer's lock: kill worker 0's process group at that moment.
        deadline = time.monotonic() + 120
        while not (holders := lock_holders(spark, 0, target)):
            assert time.monotonic() < deadline, "no task of worker 0 held a partition lock within 120 s"
            time.sleep(0.005)
        lost_at = time.monotonic()
        spark.kill_worker(0)
        seen = len(batches(log))
        # How long the dead executor's lock outlived it: the most a new attempt can have waited for it.
        wait_for(lambda: not set(holders) & set(lock_holders_anywhere(target)), 60, "the dead holder's lock to go")
        freed = time.monotonic() - lost_at
        wait_for(
            more_batches(log, seen + 1), 240, "two micro-batches after the executor was lost", job=process, log=log
        )
        recovered = time.monotonic() - lost_at
        # The task that held the lock was run again on the other worker...
        retried = retried_tasks(spark, submitted)
        assert retried, "no task was run again after its executor was lost"
        waits = [float(seconds) for _, seconds, _ in LOCK_WAIT.findall(log.read_text())]
        # ...and a dead holder's lock went with its process: the new attempt waited seconds, not lockTimeoutSeconds.
        assert all(wait < 60 for wait in waits), waits
        print(f"executor lost: lock freed {freed:.2f} s after the kill; {retried} run again; two batches done "
              f"{recovered:.1f} s after the kill; lock waits reported (>= 0.05 s): {waits}")  # fmt: skip
        spark.start_worker(0)
        spark.wait_for_workers(2)
        seen = len(batches(log))
        try:
            wait_for(more_batches(log, seen + 1), 240, "a micro-batch with the worker back", job=process, log=log)
        except AssertionError as error:
            raise AssertionError(f"{error}\n{executor_log_tails(spark, submitted)}") from None

        # Driver lost: kill -9 the spark-submit process group at a random moment of a batch.
        seen = len(batches(log))
        wait_for(more_batches(log, seen), 120, "a micro-batch", job=process, log=log)
        time.sleep(rng.uniform(0.1, 1.5))
        assert process.poll() is None, log.read_text()[-3000:]
        kill_job(process)
    finally:
        kill_job(process)
        producer.stop()
    assert producer.sent > 5000
    groups = {
        "cluster-readers": {(topic, p): producer.sent // 4 // (p + 2) for p in range(4)},
        "cluster-at-zero": {(topic, 0): 0, (topic, 3): 0},
    }
    for group, offsets in groups.items():
        commit_offsets(kafka, group, offsets)

    # More cores asked for than the cluster has: batches are packed for what the settings give the job, not for the
    # executors registered when it starts (spark_kafka_backup.spark.parallelism).
    rerun = run_backup(*common, "--snapshot", "--spark-conf", "spark.cores.max=3", master=spark.master_url, timeout=600)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    said = rerun.stdout + rerun.stderr
    packed = "packed into at least 3 tasks: the job's executor cores (spark.cores.max)"
    assert packed in said, said[-3000:]
    expected = consume_all(kafka, [topic])
    assert len(expected) == producer.sent
    got = backed_up(target, [topic])
    assert [(r["partition"], r["offset"]) for r in got] == [(r["partition"], r["offset"]) for r in expected]
    assert got == expected
    assert sorted(list_partitions(target / topic)) == [0, 1, 2, 3]
    for partition in range(4):
        stored = read_consumer_offsets(target / topic, partition)
        wanted = {
            group: offsets[(topic, partition)] for group, offsets in groups.items() if (topic, partition) in offsets
        }
        assert {group: stored[group] for group in wanted} == wanted, partition


@pytest.mark.long
def test_restore_survives_a_lost_driver_and_a_lost_executor(
    target: Target, spark: SparkCluster, tmp_path: Path
) -> None:
    backup = tmp_path / "backup"
    topic, partitions, records = "cluster-restore", 3, 30_000
    groups = write_backup(backup, topic, partitions, records)
    name = target.name(topic)
    maps = ["--topic-map", f"{topic}={name}"] if target.prefix else []
    # 3,000 records/s per partition: a run takes tens of seconds, long enough to be hit in the middle.
    args = [*target.args(tmp_path), "--source-dir", str(backup), "--batch-size", "500", "--max-rate", "3000", *maps]
    rng = random.Random(5)

    # Driver lost: kill -9 spark-submit's process group while tasks produce.
    log = tmp_path / "restore-driver.log"
    process = start_restore(*args, log=log, master=spark.master_url)
    try:
        wait_for(lambda: committed_end(target.broker, name, partitions) > 0 or process.poll() is not None, 240,
                 "the restore to commit its first records")  # fmt: skip
        time.sleep(rng.uniform(1, 4))
        assert process.poll() is None, log.read_text()[-3000:]
        kill_job(process)
    finally:
        kill_job(process)
    after_driver = committed_end(target.broker, name, partitions)
    assert 0 < after_driver < partitions * records

    # Executor lost: the rerun's tasks on worker 0 die with it; Spark runs them again on worker 1 and the job ends.
    log = tmp_path / "restore-executor.log"
    submitted = time.time()
    process = start_restore(*args, log=log, master=spark.master_url)
    try:
        wait_for(lambda: committed_end(target.broker, name, partitions) > after_driver or process.poll() is not None,
                 240, "the rerun to commit more records")  # fmt: skip
        time.sleep(rng.uniform(0.5, 2))
        wait_for(lambda: running_tasks(spark, 0, submitted) or process.poll() is not None, 120, "a task on worker 0")
        assert process.poll() is None, log.read_text()[-3000:]
        spark.kill_worker(0)
        assert process.wait(600) == 0, log.read_text()[-5000:]
        assert retried_tasks(spark, submitted), "no task was run again after its executor was lost"
    finally:
        kill_job(process)
        spark.start_worker(0)
    spark.wait_for_workers(2)

    source = backed_up(backup, [topic])
    restored = consume_all(target.broker, [name])
    assert len(restored) == partitions * records
    assert comparable(restored) == comparable(source)
    check_groups(target, name, source, restored, groups)
    # Run again, here (the plan is the driver's: it finds everything in the target and produces nothing).
    again = run_restore(*args)
    assert again.returncode == 0, again.stdout[-3000:]
    assert f"{partitions * records} records were already in the target" in again.stdout
    assert consume_all(target.broker, [name]) == restored


@pytest.mark.long  # CI time: its standalone cluster alone costs minutes of a loaded machine
def test_backup_and_restore_through_s3_on_the_cluster(
    kafka: BrokerUnderTest, target: Target, spark: SparkCluster, s3: S3Server, tmp_path: Path
) -> None:
    """Executors write and read the backup on the S3 API server; they get its settings as ``spark.executorEnv``."""
    from confluent_kafka import Producer as KafkaProducer

    topic = "cluster-s3"
    create_topics(kafka, {topic: 2})
    producer = KafkaProducer(kafka.client_settings())
    now = int(time.time() * 1000)
    for i in range(3000):
        producer.produce(topic, key=None if i % 9 == 0 else b"k%d" % i, value=b"v%d-" % i * (1 + i % 6),
                         headers=[("h", b"%d" % i), ("h", None)] if i % 4 == 0 else None,
                         partition=i % 2, timestamp=now - 3000 + i)  # fmt: skip
    assert producer.flush(30) == 0
    groups = {"s3-cluster-readers": {0: 700, 1: 1500}}
    commit_offsets(
        kafka, "s3-cluster-readers", {(topic, p): offset for p, offset in groups["s3-cluster-readers"].items()}
    )
    root = f"s3://{s3.new_bucket()}/kafka/prod"
    executor_env = [
        arg for key, value in s3.env.items() for arg in ("--spark-conf", f"spark.executorEnv.{key}={value}")
    ]

    backup = run_backup(*client_args(kafka, tmp_path), "--target-dir", root, "--topics", topic, "--snapshot",
                        "--checkpoint-location", tmp_path / "spark-state", "--max-segment-size", "20000",
                        *executor_env, master=spark.master_url)  # fmt: skip
    assert backup.returncode == 0, backup.stdout[-3000:] + backup.stderr[-3000:]
    assert kbackup_in_process("verify", root).returncode == 0

    name = target.name(topic)
    maps = ["--topic-map", f"{topic}={name}"] if target.prefix else []
    restore = run_restore(*target.args(tmp_path), "--source-dir", root, *maps, *executor_env, master=spark.master_url)
    assert restore.returncode == 0, restore.stdout[-3000:] + restore.stderr[-3000:]
    source = consume_all(kafka, [topic])
    restored = consume_all(target.broker, [name])
    assert comparable(restored) == comparable(source)
    check_groups(target, name, source, restored, groups)
