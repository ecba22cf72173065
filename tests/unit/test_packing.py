"""The packed environment's pure parts (``spark-kafka-backup pack``, ``--archive``): the settings that ship it,
what is not one, and the line a missing module in Spark's Python becomes. Packing this installation and running it
on a Python with nothing installed: tests/test_packing.py; on a bare standalone cluster:
tests/test_packed_environment.py."""

from __future__ import annotations

import io
import json
import os
import sys
import tarfile
from pathlib import Path

import pytest

from spark_kafka_backup.launcher import split_arguments
from spark_kafka_backup.packing import PackError, pack, read_manifest
from spark_kafka_backup.spark.failures import MISSING_ON_EXECUTORS, failure_cause
from spark_kafka_backup.spark_submit import spark_submit_command

PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


def test_an_archive_is_written_whole_or_not_at_all(tmp_path: Path) -> None:
    with pytest.raises(PackError, match=r"is a \.tar\.gz"):
        pack(tmp_path / "env.zip")
    with pytest.raises(PackError, match="no such directory"):
        pack(tmp_path / "missing" / "env.tar.gz")
    assert list(tmp_path.iterdir()) == []


def test_what_is_not_a_packed_environment_is_named(tmp_path: Path) -> None:
    with pytest.raises(PackError, match=r"no such packed environment .*spark-kafka-backup pack"):
        read_manifest(tmp_path / "none.tar.gz")
    (tmp_path / "text.tar.gz").write_text("hello")
    with pytest.raises(PackError, match=r"text\.tar\.gz: not a packed environment"):
        read_manifest(tmp_path / "text.tar.gz")
    other = tmp_path / "other.tar.gz"
    with tarfile.open(other, "w:gz") as archive:
        data = json.dumps({"python": "3.11"}).encode()
        info = tarfile.TarInfo("manifest.json")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    with pytest.raises(PackError, match=r"other\.tar\.gz: manifest\.json: not a manifest"):
        read_manifest(other)


def test_the_archive_ships_with_the_settings_that_run_it() -> None:
    command = spark_submit_command(
        "backup", "--topics", "t", master="spark://h:7077", archive="file:///p/env.tar.gz",
        conf=["spark.archives=s3a://b/other.zip#other", "spark.executorEnv.PYTHONPATH=/opt/lib"],
    )  # fmt: skip
    settings = [command[index + 1] for index, part in enumerate(command) if part == "--conf"]
    assert "spark.archives=s3a://b/other.zip#other,file:///p/env.tar.gz#kbackup-env" in settings
    assert f"spark.executorEnv.PYTHONPATH=./kbackup-env/site-packages{os.pathsep}/opt/lib" in settings
    assert f"spark.pyspark.python=python{PYTHON}" in settings
    assert f"spark.pyspark.driver.python={sys.executable}" in settings
    # What the user set stays.
    mine = spark_submit_command("backup", master="spark://h:7077", archive="x", conf=["spark.pyspark.python=/py"])
    assert "spark.pyspark.python=/py" in mine and f"spark.pyspark.python=python{PYTHON}" not in mine
    assert not [part for part in spark_submit_command("backup", master="spark://h:7077") if "kbackup-env" in part]
    assert split_arguments(["--archive", "e.tar.gz", "--topics", "t"]).archive == "e.tar.gz"
    assert split_arguments(["--archive=e.tar.gz"]).job_args == []


def test_a_module_missing_in_a_python_worker_says_to_ship_the_archive() -> None:
    worker = (
        "py4j.protocol.Py4JJavaError: An error occurred\n: org.apache.spark.api.python.PythonException: "
        "[PYTHON_EXCEPTION] An exception was thrown from the Python worker: Traceback (most recent call last):\n"
        "  File \"worker.py\", line 3\nModuleNotFoundError: No module named 'pyarrow'\n\tat org.apache.spark.X\n"
    )
    assert failure_cause(worker) == f"ModuleNotFoundError: No module named 'pyarrow' {MISSING_ON_EXECUTORS}"
    driver = "Traceback (most recent call last):\nModuleNotFoundError: No module named 'boto3'\n"
    assert failure_cause(driver) == "ModuleNotFoundError: No module named 'boto3'"


def test_an_archive_given_as_a_file_uri_or_a_uri_spark_cannot_list_is_taken_or_refused(tmp_path: Path) -> None:
    from spark_kafka_backup import __version__
    from spark_kafka_backup.launcher import _checked_archive
    from spark_kafka_backup.packing import Manifest, PackError

    directory = tmp_path / "a b,c#d"
    directory.mkdir()
    archive = directory / "env.tar.gz"
    with tarfile.open(archive, "w:gz") as opened:
        python = f"{sys.version_info.major}.{sys.version_info.minor}"
        data = Manifest(__version__, python, "linux-x86_64", ()).to_json().encode()
        info = tarfile.TarInfo("manifest.json")
        info.size = len(data)
        opened.addfile(info, io.BytesIO(data))
    for given in (str(archive), archive.as_uri(), f"file:{archive.as_uri().removeprefix('file://')}",
                  f"file://localhost{archive.as_uri().removeprefix('file://')}"):  # fmt: skip
        shipped = _checked_archive(given, "spark-kafka-backup backup")
        assert shipped == archive.as_uri() and "," not in shipped and "#" not in shipped, given
    for remote in ("s3a://bucket/env.tar.gz#mine", "s3a://bucket/a,b.tar.gz"):
        with pytest.raises(PackError, match=r"cannot go into spark\.archives"):
            _checked_archive(remote, "spark-kafka-backup backup")
    with pytest.raises(PackError, match="another host"):
        _checked_archive("file://elsewhere/env.tar.gz", "spark-kafka-backup backup")
