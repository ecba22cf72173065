"""A cluster with nothing of the jobs installed: the packed environment (``spark-kafka-backup pack``) shipped with
``--archive`` is all its executors have.

The workers of a Spark standalone cluster (:mod:`devkit.spark_cluster`) run a fresh Python of the driver's version
with no package at all (a virtual environment of the base interpreter without pip: no spark-kafka-backup, PySpark,
pyarrow, numpy or confluent-kafka, checked first), first on their PATH, this checkout's virtual environment off it,
and Spark's own home (its Python workers import PySpark from Spark's archives). The jobs are submitted with the
``spark-kafka-backup`` command, as a user does.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from devkit.spark_cluster import SparkCluster
from spark_kafka_backup.packed import ENV_NAME
from spark_kafka_backup.spark.failures import MISSING_ON_EXECUTORS
from tests.broker import BrokerUnderTest
from tests.kafka_helpers import REPO, TEST_JVM_OPTIONS, backed_up, commit_offsets, consume_all, create_topics, job_env
from tests.live_load import client_args
from tests.restore_helpers import Target, check_groups, comparable

pytestmark = pytest.mark.long  # a standalone cluster and an archive of 100 MB: minutes of a loaded machine

#: What a bare executor must not be able to import.
REQUIRED = ("spark_kafka_backup", "pyspark", "pyarrow", "numpy", "confluent_kafka")


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Python of the driver's version with nothing installed."""
    home = tmp_path_factory.mktemp("bare") / "python"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(home)], check=True)
    python = home / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    assert python.is_file()
    return python


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    output = tmp_path_factory.mktemp("packed") / "kbackup-env.tar.gz"
    made = kbackup("pack", "--output", output)
    assert made.returncode == 0, made.stderr
    assert f"{output}: " in made.stdout and "native Kafka edge" in made.stdout, made.stdout
    return output


@pytest.fixture(scope="module")
def reference_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    output = tmp_path_factory.mktemp("packed") / "kbackup-reference-env.tar.gz"
    made = kbackup("pack", "--output", output, "--without-native")
    assert made.returncode == 0, made.stderr
    assert "no compiled edge" in made.stdout, made.stdout
    return output


@pytest.fixture(scope="module")
def bare_cluster(bare_python: Path) -> Iterator[SparkCluster]:
    with SparkCluster(workers=1, cores=2, daemon_java_options=TEST_JVM_OPTIONS, worker_python=bare_python) as cluster:
        yield cluster


def kbackup(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The ``spark-kafka-backup`` command, as a user runs it."""
    command = [sys.executable, "-m", "spark_kafka_backup", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, env=env or job_env(), cwd=REPO, timeout=600)


def produce(kafka: BrokerUnderTest, topic: str, partitions: int, count: int) -> None:
    """``count`` records with keys, headers and null values, spread over the partitions, idempotently."""
    from confluent_kafka import Producer

    producer = Producer(kafka.client_settings(**{"enable.idempotence": "true"}))
    for i in range(count):
        headers = [("n", b"%d" % i), ("empty", None)] if i % 5 == 0 else None
        value = None if i % 17 == 0 else b"packed-%d-" % i * (1 + i % 3)
        producer.produce(topic, key=b"k%d" % i, value=value, partition=i % partitions, headers=headers)
    assert producer.flush(60) == 0


def on_cluster(cluster: SparkCluster) -> list[str]:
    return ["--master", cluster.master_url, "--conf", f"spark.executor.extraJavaOptions={TEST_JVM_OPTIONS}"]


def executor_logs(cluster: SparkCluster, name: str) -> str:
    return "".join(path.read_text(errors="replace") for path in sorted(cluster.work_dir(0).glob(f"app-*/*/{name}")))


def test_backup_and_restore_on_a_bare_cluster_with_the_archive_alone(
    kafka: BrokerUnderTest,
    target: Target,
    bare_cluster: SparkCluster,
    bare_python: Path,
    archive: Path,
    reference_archive: Path,
    tmp_path: Path,
) -> None:
    from devkit.spark_cluster import cluster_environment

    # The workers' Python, as their executors start it, imports none of what the jobs need.
    for module in REQUIRED:
        tried = subprocess.run(
            [bare_python.name, "-c", f"import {module}"],
            capture_output=True, text=True, env=cluster_environment(bare_python),
            cwd=bare_cluster.work_dir(0),
        )  # fmt: skip
        assert tried.returncode != 0 and "ModuleNotFoundError" in tried.stderr, module

    topic, partitions = "packed-orders", 3
    create_topics(kafka, {topic: partitions})
    produce(kafka, topic, partitions, 3000)
    groups = {"packed-readers": {(topic, p): 200 * (p + 1) for p in range(partitions)}}
    for group, offsets in groups.items():
        commit_offsets(kafka, group, offsets)
    backup = tmp_path / "backup"

    done = kbackup(
        "backup", *on_cluster(bare_cluster), "--archive", archive,
        *client_args(kafka, tmp_path), "--target-dir", backup, "--topics", topic, "--snapshot",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"executors run the packed environment {archive}" in done.stderr
    source = consume_all(kafka, [topic])
    assert len(source) == 3000
    assert backed_up(backup, [topic]) == source
    # The tasks ran on the worker from the unpacked archive, through the native edge it carries.
    assert list(bare_cluster.work_dir(0).glob(f"app-*/*/{ENV_NAME}/site-packages/spark_kafka_backup"))
    assert "runs the packed environment" in executor_logs(bare_cluster, "std*")
    assert "Kafka through the native Kafka edge" in executor_logs(bare_cluster, "std*")

    # The restore from an archive without the compiled edges: confluent-kafka's producer, the same records.
    name = target.name(topic) + "-packed"
    restored_run = kbackup(
        "restore", *on_cluster(bare_cluster), "--archive", reference_archive,
        *target.args(tmp_path), "--source-dir", backup, "--topic-map", f"{topic}={name}",
    )  # fmt: skip
    assert restored_run.returncode == 0, restored_run.stdout[-3000:] + restored_run.stderr[-3000:]
    assert "produced through confluent-kafka" in restored_run.stdout, restored_run.stdout[-3000:]
    assert "no compiled edge" in restored_run.stderr
    assert "reference path: the packed environment does not carry the native module" in executor_logs(
        bare_cluster, "std*"
    )
    restored = consume_all(target.broker, [name])
    assert comparable(restored) == comparable(source)
    by_partition = {group: {p: o for (_, p), o in offsets.items()} for group, offsets in groups.items()}
    check_groups(target, name, source, restored, by_partition)


def test_without_the_archive_a_bare_cluster_fails_with_one_line_and_with_it_goes_on(
    kafka: BrokerUnderTest, bare_cluster: SparkCluster, archive: Path, tmp_path: Path
) -> None:
    topic = "packed-missing"
    create_topics(kafka, {topic: 1})
    produce(kafka, topic, 1, 10)
    # A user whose executors' Python is the cluster's python3.X, without --archive: the driver's python3.X (first on
    # its PATH) has everything, the executors' nothing.
    environment = job_env()
    environment["PATH"] = str(Path(sys.executable).parent) + os.pathsep + environment["PATH"]
    python = f"python{sys.version_info.major}.{sys.version_info.minor}"
    backup_args: list[str | Path] = [
        *client_args(kafka, tmp_path),
        "--target-dir",
        tmp_path / "backup",
        "--topics",
        topic,
        "--snapshot",
    ]
    failed = kbackup(
        "backup", *on_cluster(bare_cluster), "--conf", f"spark.pyspark.python={python}", *backup_args, env=environment
    )
    assert failed.returncode == 1, failed.stdout[-3000:] + failed.stderr[-3000:]
    errors = [line for line in failed.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, failed.stderr
    assert "ModuleNotFoundError: No module named" in errors[0] and MISSING_ON_EXECUTORS in errors[0], errors
    assert "Traceback" not in failed.stderr and "\tat " not in failed.stderr
    # The same backup again, with the archive: it goes on from what the failed run prepared, every record once.
    again = kbackup("backup", *on_cluster(bare_cluster), "--archive", archive, *backup_args)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert backed_up(tmp_path / "backup", [topic]) == consume_all(kafka, [topic])
