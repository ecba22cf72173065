"""``spark-kafka-backup backup`` / ``spark-kafka-backup restore``: the jobs from any directory, help and mistakes
without a JVM."""

from __future__ import annotations

import io
import os
import shlex
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from spark_kafka_backup.errors import UsageError
from spark_kafka_backup.launcher import DEFAULT_MASTER, split_arguments
from spark_kafka_backup.spark_submit import QUICK_JIT, STARTUP_LOGGING
from tests.broker import BrokerUnderTest
from tests.kafka_helpers import TEST_JVM_OPTIONS, backed_up, client_config_file, consume_all, create_topics

KBACKUP = str(Path(sys.executable).parent / "spark-kafka-backup")


def no_java(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """An environment whose only ``java`` (on PATH and as JAVA_HOME) leaves a mark when started."""
    marker = tmp_path / "java-started"
    bin_dir = tmp_path / "fake-jdk" / "bin"
    bin_dir.mkdir(parents=True)
    java = bin_dir / "java"
    java.write_text(f"#!/bin/sh\ntouch {shlex.quote(str(marker))}\nexit 1\n")
    java.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "JAVA_HOME": str(bin_dir.parent)}
    return env, marker


def run_cli(
    *args: str, env: dict[str, str] | None = None, cwd: Path, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run([KBACKUP, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)


@pytest.mark.parametrize("job", ["backup", "restore"])
def test_help_answers_without_starting_java(job: str, tmp_path: Path) -> None:
    env, marker = no_java(tmp_path)
    result = run_cli(job, "--help", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: spark-kafka-backup {job} ")
    for option in ("--bootstrap-server", "--master", "--conf", "--print-command"):
        assert option in result.stdout
    assert not marker.exists(), "--help started a Java process"
    # Two options that look alike say how they differ, each pointing at the other.
    help_text = " ".join(result.stdout.split())
    assert "--spark-conf sets one in the job's Spark session instead" in help_text
    assert "One the driver's JVM needs before it starts (spark.driver.memory) goes to --conf instead" in help_text
    if job == "restore":
        assert "--max-records-per-second limits the whole restore" in help_text
        assert "--max-rate limits each partition" in help_text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["backup", "--bootstrap-server", "k:9092", "--topics", "t"], "the backup needs a target directory"),
        (["backup", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        (["restore", "--bootstrap-server", "k:9092", "--source-dir", "/b", "--conf", "nonsense"], "expected KEY=VALUE"),
        (["restore", "--bootstrap-server", "k:9092", "--source-dir", "/b", "--master"], "--master needs a value"),
        (
            ["backup", "--bootstrap-server", "k:9092", "--target-dir", "/b", "--topics", "t", "--archive", "e.tar.gz"],
            "--archive ships the environment to a cluster's executors; with --master local[*]",
        ),
    ],
)
def test_a_mistake_is_one_line_and_exit_2_before_any_jvm(args: list[str], message: str, tmp_path: Path) -> None:
    env, marker = no_java(tmp_path)
    result = run_cli(*args, env=env, cwd=tmp_path)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr
    assert f"spark-kafka-backup {args[0]}" in result.stderr.splitlines()[-1]
    assert result.stdout == ""
    assert not marker.exists()


def test_the_command_uses_the_installed_job_file_and_the_options_given(tmp_path: Path) -> None:
    result = run_cli(
        "backup", "--bootstrap-server", "k:9092", "--target-dir", str(tmp_path / "b"), "--topics", "t",
        "--master", "spark://h:7077", "--conf", "spark.executor.memory=2g", "--conf=spark.ui.enabled=true",
        "--print-command", cwd=tmp_path, env={**os.environ, "KBACKUP_JVM_ARCHIVE": "off"},
    )  # fmt: skip  # the class archive's options: tests/unit/test_jvm_archive.py
    assert result.returncode == 0, result.stderr
    command = shlex.split(result.stdout)
    assert Path(command[0]).name == "spark-submit" and os.access(command[0], os.X_OK)
    assert command[1:3] == ["--master", "spark://h:7077"]
    # The driver carries no records here: the quick compiler alone (a JVM reading Kafka keeps both).
    startup = f"spark.driver.extraJavaOptions={QUICK_JIT} -Dlog4j2.configurationFile={STARTUP_LOGGING.as_uri()}"
    assert command[3:9] == ["--conf", startup, "--conf", "spark.python.authenticate.socketTimeout=120s",
                            "--conf", "spark.executor.memory=2g"]  # fmt: skip
    assert "spark.ui.enabled=false" not in command and STARTUP_LOGGING.is_file()
    job = Path(command[command.index("--conf", 8) + 2])
    assert job.name == "backup.py" and job.parent.name == "jobs" and job.parent.parent.name == "spark_kafka_backup"
    assert job.is_file()
    assert command[-6:] == ["--bootstrap-server", "k:9092", "--target-dir", str(tmp_path / "b"), "--topics", "t"]


@pytest.mark.parametrize(
    ("given", "ui"),
    [
        ([], False),
        (["--spark-conf", "spark.ui.prometheus.enabled=true"], True),
        (
            ["--spark-conf=spark.metrics.conf.*.sink.servlet.class=org.apache.spark.metrics.sink.PrometheusServlet"],
            True,
        ),
        (["--spark-con", "spark.ui.prometheus.enabled=true"], True),
        (["--conf", "spark.ui.enabled=false", "--spark-conf", "spark.ui.prometheus.enabled=true"], False),
        (["--conf", "spark.ui.prometheus.enabled=true"], True),
        (["--spark-conf", "spark.ui.prometheus.enabled=false"], False),
    ],
)
def test_the_ui_is_off_unless_a_setting_asks_for_what_it_serves(given: list[str], ui: bool, tmp_path: Path) -> None:
    result = run_cli(
        "backup", "--bootstrap-server", "k:9092", "--target-dir", str(tmp_path / "b"), "--topics", "t", *given,
        "--print-command", cwd=tmp_path, env={**os.environ, "KBACKUP_JVM_ARCHIVE": "off"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert ("spark.ui.enabled=false" not in shlex.split(result.stdout)) is ui, result.stdout


def test_an_archive_that_is_not_there_or_not_this_version_is_one_line(tmp_path: Path) -> None:
    from spark_kafka_backup.packing import Manifest

    common = ["backup", "--bootstrap-server", "k:9092", "--target-dir", str(tmp_path / "b"), "--topics", "t",
              "--master", "spark://h:7077", "--print-command"]  # fmt: skip
    missing = run_cli(*common, "--archive", "nowhere.tar.gz", cwd=tmp_path)
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr.strip() == (
        f"spark-kafka-backup backup: error: {tmp_path / 'nowhere.tar.gz'}: no such packed environment "
        "(make one with: spark-kafka-backup pack)"
    )
    old = tmp_path / "old.tar.gz"
    with tarfile.open(old, "w:gz") as archive:
        data = Manifest("0.0.1", "3.11", "linux-x86_64", ()).to_json().encode()
        info = tarfile.TarInfo("manifest.json")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    stale = run_cli(*common, "--archive", str(old), cwd=tmp_path)
    assert stale.returncode == 1
    assert "packed for spark-kafka-backup 0.0.1 on Python 3.11, but the driver runs" in stale.stderr
    assert f"spark-kafka-backup pack --output {old}" in stale.stderr and "Traceback" not in stale.stderr
    # A URI is Spark's to fetch: passed on as it is.
    remote = run_cli(*common, "--archive", "s3a://bucket/env.tar.gz", cwd=tmp_path)
    assert remote.returncode == 0, remote.stderr
    assert "spark.archives=s3a://bucket/env.tar.gz#kbackup-env" in shlex.split(remote.stdout)
    assert "(fetched by Spark, not checked here)" in remote.stderr


def test_a_driver_that_reads_kafka_keeps_the_optimizing_compiler() -> None:
    from spark_kafka_backup.spark_submit import spark_submit_command

    mine = spark_submit_command("backup", "--topics", "t")
    assert any(part.startswith("spark.driver.extraJavaOptions=") and QUICK_JIT in part for part in mine)
    spark_source = spark_submit_command("backup", "--topics", "t", "--kafka-source", "spark")
    options = [part for part in spark_source if part.startswith("spark.driver.extraJavaOptions=")]
    assert options and QUICK_JIT not in options[0]


def test_split_arguments() -> None:
    launch = split_arguments(["--topics", "a", "--master=local[1]", "--conf", "a.b=c", "--", "--master", "x"])
    assert launch.master == "local[1]" and launch.conf == ["a.b=c"] and not launch.print_command
    assert launch.job_args == ["--topics", "a", "--master", "x"]
    assert split_arguments([]).master == DEFAULT_MASTER
    with pytest.raises(UsageError, match="expected KEY=VALUE"):
        split_arguments(["--conf", "=x"])


@pytest.mark.long
def test_backup_through_the_entry_point_from_another_directory(kafka: BrokerUnderTest, tmp_path: Path) -> None:
    """The quick start's commands as a user runs them: no checkout on PYTHONPATH, any working directory.

    ``spark-kafka-backup restore`` through the entry point, from outside the checkout, runs in tests/test_docs.py (the
    operations guide's restore blocks)."""
    topic = "launched"
    create_topics(kafka, {topic: 2})
    from confluent_kafka import Producer

    producer = Producer(kafka.client_settings())
    for i in range(500):
        producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % 2, headers=[("h", b"1")])
    producer.flush(30)
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(kafka.client_settings(**{"group.id": "launched-readers", "enable.auto.commit": "false"}))
    consumer.commit(offsets=[TopicPartition(topic, 0, 100), TopicPartition(topic, 1, 250)], asynchronous=False)
    consumer.close()

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "SPARK_HOME")}
    env["SPARK_SUBMIT_OPTS"] = TEST_JVM_OPTIONS
    source_config = client_config_file(tmp_path / "source.properties", kafka.extra_settings)
    backup = tmp_path / "backup"
    done = run_cli(
        "backup", "--bootstrap-server", kafka.bootstrap_servers, "--command-config", str(source_config),
        "--target-dir", str(backup), "--topics", topic, "--snapshot", "--master", "local[1]",
        env=env, cwd=elsewhere, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    expected = consume_all(kafka, [topic])
    assert len(expected) == 500 and backed_up(backup, [topic]) == expected


@pytest.mark.long
def test_the_drivers_class_archive_is_made_once_and_a_driver_maps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the launcher does on a user's first job (spark_kafka_backup.jvm_archive), in a cache of its own; a driver
    started with the archive and ``-Xshare:on`` (which refuses to start without mapping it) runs a job."""
    from spark_kafka_backup.jvm_archive import ensure_driver_archive, sharing_options
    from spark_kafka_backup.spark_submit import job_environment, spark_home

    monkeypatch.setenv("KBACKUP_CACHE", str(tmp_path / "cache"))
    env = {key: value for key, value in job_environment().items() if key != "SPARK_SUBMIT_OPTS"}
    said: list[str] = []
    archive = ensure_driver_archive(env, spark_home(), announce=said.append)
    assert archive is not None and archive.is_file() and archive.parent == tmp_path / "cache" / "jvm"
    assert len(said) == 1 and "KBACKUP_JVM_ARCHIVE=off" in said[0]
    assert [path.name for path in archive.parent.iterdir()] == [archive.name]  # no partial file or script left
    assert ensure_driver_archive(env, spark_home(), announce=said.append) == archive and len(said) == 1
    assert ensure_driver_archive({**env, "KBACKUP_JVM_ARCHIVE": "off"}, spark_home()) is None

    script = tmp_path / "count.py"
    script.write_text(
        "from pyspark.sql import SparkSession\n"
        "spark = SparkSession.builder.getOrCreate()\n"
        "print('counted', spark.range(7).count())\n"
        "spark.stop()\n"
    )
    options = " ".join((*sharing_options(archive), "-Xshare:on"))
    command = [str(spark_home() / "bin" / "spark-submit"), "--master", "local[1]", "--conf", "spark.ui.enabled=false",
               "--conf", f"spark.driver.extraJavaOptions={options}", str(script)]  # fmt: skip
    mapped = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert mapped.returncode == 0, mapped.stderr[-3000:]
    assert "counted 7" in mapped.stdout

    # Another install of the same PySpark (another checkout's virtual environment, its jars files of its own with the
    # same names and sizes): its Spark home shares the first one's jars, so that archive is its archive too, made
    # for the other path, and its driver maps it.
    import os

    import pyspark

    from spark_kafka_backup.jvm_archive import existing_driver_archive
    from spark_kafka_backup.spark_submit import archive_free_home

    installed = Path(pyspark.__file__).resolve().parent
    other = tmp_path / "other-venv" / "pyspark"
    other.mkdir(parents=True)
    for entry in installed.iterdir():
        if entry.name == "jars":
            (other / "jars").mkdir()
            for jar in entry.glob("*.jar"):
                os.link(jar, other / "jars" / jar.name)  # of its own in a real install: names and sizes compared
        else:
            (other / entry.name).symlink_to(entry)
    home = archive_free_home(other, tmp_path / "cache" / "spark-home", pyspark.__version__)
    assert home is not None and home != spark_home() and (home / "jars").resolve() == (spark_home() / "jars").resolve()
    assert existing_driver_archive(env, home) == archive
    loaded = tmp_path / "classes.log"
    command[0] = str(home / "bin" / "spark-submit")
    command[command.index(f"spark.driver.extraJavaOptions={options}")] = (
        f"spark.driver.extraJavaOptions={options} -Xlog:class+load=info:file={loaded}"
    )
    again = subprocess.run(command, capture_output=True, text=True, env={**env, "SPARK_HOME": str(home)}, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "counted 7" in again.stdout
    # Spark's classes came out of the archive (its dynamic part, "top"), not from the jars.
    assert "org.apache.spark.SparkContext source: shared objects file (top)" in loaded.read_text()
    assert [path.name for path in archive.parent.iterdir()] == [archive.name]  # still one archive
