"""``spark-kafka-backup pack``: this installation packed, and a Python with nothing installed running the jobs' code
from it as an executor does (without Spark: on a bare standalone cluster, tests/test_packed_environment.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from spark_kafka_backup import __version__
from spark_kafka_backup.packing import LEFT_OUT, pack, read_manifest, runtime_distributions
from spark_kafka_backup.spark_submit import driver_python_directory, executor_python

PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This installation packed once (about 110 MB, a few seconds)."""
    output = tmp_path_factory.mktemp("packed") / "env.tar.gz"
    lines: list[str] = []
    manifest = pack(output, announce=lines.append)
    assert len(lines) == 1 and str(output) in lines[0] and "native Kafka edge" in lines[0]
    assert manifest == read_manifest(output)
    return output


def test_the_distributions_are_what_executors_import(packed: Path) -> None:
    names = {distribution.metadata["Name"].lower().replace("_", "-") for distribution in runtime_distributions()}
    assert {"spark-kafka-backup", "pyarrow", "numpy", "confluent-kafka", "fastavro", "cryptography", "boto3"} <= names
    assert not names & LEFT_OUT  # the cluster's Spark carries PySpark and py4j; no executor imports pandas
    manifest = read_manifest(packed)
    assert manifest.version == __version__ and manifest.python == PYTHON
    assert manifest.native == ("spark_kafka_backup.kafka._native_kafka", "spark_kafka_backup.format._native_records")
    assert set(manifest.distributions) >= {"pyarrow", "numpy", "confluent-kafka", "spark-kafka-backup"}


def test_the_archive_holds_the_packages_and_no_bytecode_tests_or_sources(packed: Path) -> None:
    with tarfile.open(packed) as archive:
        names = archive.getnames()
        modes = {member.name: member.mode for member in archive.getmembers()}
    top = {name.split("/")[1] for name in names if name.startswith("site-packages/")}
    assert {"spark_kafka_backup", "pyarrow", "numpy", "confluent_kafka"} <= top
    assert not top & {"pyspark", "py4j", "pandas"}
    assert "site-packages/spark_kafka_backup/jobs/log4j2.properties" in names
    assert not [name for name in names if "__pycache__" in name or name.endswith((".pyc", ".c"))]
    assert not [name for name in names if "/tests/" in name]
    assert all(mode in (0o644, 0o755) for mode in modes.values())
    assert set(names) - {"manifest.json"} == {name for name in names if name.startswith("site-packages/")}


def test_a_python_with_nothing_installed_runs_the_jobs_code_from_the_archive(packed: Path, tmp_path: Path) -> None:
    """As an executor does: the archive unpacked in its working directory, the packages first on PYTHONPATH by a
    relative path (``spark.executorEnv.PYTHONPATH``), the machine's own Python."""
    bare = tmp_path / "bare"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", bare], check=True)
    work = tmp_path / "executor"
    (work / "kbackup-env").mkdir(parents=True)
    with tarfile.open(packed) as archive:
        archive.extractall(work / "kbackup-env", filter="data")
    python = bare / "bin" / f"python{PYTHON}"
    script = (
        "import spark_kafka_backup, pyarrow, numpy, confluent_kafka;"
        "from spark_kafka_backup.kafka.columnar import native_edge;"
        "from spark_kafka_backup.format.record_columns import decode_columns;"
        "from spark_kafka_backup.packed import packed_environment;"
        "print(spark_kafka_backup.__file__, native_edge() is not None, packed_environment())"
    )
    alone = subprocess.run([python, "-c", "import pyarrow"], capture_output=True, text=True, cwd=work)
    assert alone.returncode == 1 and "No module named 'pyarrow'" in alone.stderr
    environment = {"PATH": os.environ["PATH"], "PYTHONPATH": "./kbackup-env/site-packages"}
    ran = subprocess.run([python, "-c", script], capture_output=True, text=True, cwd=work, env=environment)
    assert ran.returncode == 0, ran.stderr
    *logged, answer = ran.stdout.splitlines()
    where, native, environment_path = answer.split()
    # Which edge an executor's Python uses is in its log, once.
    assert [line.split(" INFO ", 1)[1] for line in logged] == [
        f"this executor's Python runs the packed environment {work / 'kbackup-env'}: "
        "Kafka through the native Kafka edge"
    ]
    assert where.startswith(str(work / "kbackup-env" / "site-packages"))
    assert native == "True" and environment_path == str(work / "kbackup-env")


def test_the_drivers_python_of_that_name_is_this_interpreter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Spark starts the driver's planning Python by the executors' command (``python3.X``, found on PATH)."""
    monkeypatch.setenv("KBACKUP_CACHE", str(tmp_path))
    directory = driver_python_directory()
    assert directory == driver_python_directory()  # made once
    ran = subprocess.run(
        [executor_python(), "-c", "import sys, spark_kafka_backup; print(sys.prefix)"],
        capture_output=True, text=True, cwd=tmp_path,
        env={**os.environ, "PATH": f"{directory}{os.pathsep}/usr/bin:/bin", "PYTHONPATH": ""},
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == sys.prefix  # this virtual environment, not the interpreter it was made from
