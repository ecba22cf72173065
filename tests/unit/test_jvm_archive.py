"""When the jobs' driver JVM maps spark-kafka-backup's class archive, and how it is put in place."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_kafka_backup import jvm_archive
from spark_kafka_backup.jvm_archive import driver_archive_path, made_once
from spark_kafka_backup.spark_submit import spark_home, spark_submit_command


def _driver_options(command: list[str]) -> str:
    settings = [command[i + 1] for i, part in enumerate(command) if part == "--conf"]
    return next(s for s in settings if s.startswith("spark.driver.extraJavaOptions=")).partition("=")[2]


@pytest.fixture
def archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A made archive in a cache of its own (its contents do not matter to the command)."""
    import os

    monkeypatch.setenv("KBACKUP_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SPARK_SUBMIT_OPTS", raising=False)
    monkeypatch.delenv(jvm_archive.ARCHIVE_SETTING, raising=False)
    path = driver_archive_path(tmp_path / "cache" / "jvm", spark_home(), os.environ)
    assert path is not None, "no Java here"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"archive")
    return path


def test_a_made_archive_is_mapped_by_both_jobs_drivers(archive: Path) -> None:
    for job in ("backup", "restore"):
        options = _driver_options(spark_submit_command(job)).split()
        assert options[:3] == [f"-XX:SharedArchiveFile={archive}", "-Xlog:cds=off", "-Xlog:cds+dynamic=off"]


@pytest.mark.parametrize(
    ("variable", "value"),
    [("KBACKUP_JVM_ARCHIVE", "off"), ("KBACKUP_JVM_ARCHIVE", " OFF "),
     ("SPARK_SUBMIT_OPTS", "-XX:SharedArchiveFile=/elsewhere.jsa"),
     ("SPARK_SUBMIT_OPTS", "-Xmx1g -XX:ArchiveClassesAtExit=/making.jsa")],
)  # fmt: skip
def test_the_environment_can_choose_no_archive_or_its_own(
    archive: Path, monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    assert "SharedArchiveFile" not in _driver_options(spark_submit_command("restore"))


def test_no_archive_without_one_made(archive: Path) -> None:
    archive.unlink()
    assert "SharedArchiveFile" not in _driver_options(spark_submit_command("restore"))


def test_an_archive_is_named_by_the_java_and_the_install(tmp_path: Path) -> None:
    import os

    first = driver_archive_path(tmp_path, Path("/spark/a"), os.environ)
    assert first is not None and first.suffix == ".jsa" and first.parent == tmp_path
    assert driver_archive_path(tmp_path, Path("/spark/a"), os.environ) == first
    assert driver_archive_path(tmp_path, Path("/spark/b"), os.environ) != first
    # Two homes (two checkouts) whose jars are one shared set: one archive.
    shared = tmp_path / "spark-jars" / "pyspark-4.3.0-0123"
    shared.mkdir(parents=True)
    (shared / "spark-core.jar").write_bytes(b"PK")
    for home in ("home-a", "home-b"):
        (tmp_path / home).mkdir()
        (tmp_path / home / "jars").symlink_to(shared)
    one = driver_archive_path(tmp_path, tmp_path / "home-a", os.environ)
    assert one is not None and one == driver_archive_path(tmp_path, tmp_path / "home-b", os.environ)


def test_made_once_puts_it_in_place_whole_or_not_at_all(tmp_path: Path) -> None:
    path = tmp_path / "jvm" / "spark-driver-0123456789abcdef.jsa"
    calls: list[Path] = []

    def fails(partial: Path) -> bool:
        calls.append(partial)
        partial.write_bytes(b"half")  # a JVM that died while writing
        return False

    assert made_once(path, fails) is None
    assert not path.exists() and list(path.parent.iterdir()) == []

    def works(partial: Path) -> bool:
        calls.append(partial)
        partial.write_bytes(b"whole")
        return True

    assert made_once(path, works) == path and path.read_bytes() == b"whole"
    assert made_once(path, fails) == path and len(calls) == 2  # made: not made again
    assert all(call.parent == path.parent and call.name.endswith(".partial") for call in calls)


def test_a_failed_attempt_is_said_once_and_not_repeated_for_a_day(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A warm-up that cannot run: one line saying why; the next launch does not try."""
    import os
    import subprocess

    from spark_kafka_backup.jvm_archive import make_driver_archive

    tries: list[object] = []

    def cannot_start(command: object, **options: object) -> None:
        tries.append(command)
        raise FileNotFoundError(2, "No such file or directory", "spark-submit")

    monkeypatch.setattr(subprocess, "run", cannot_start)
    said: list[str] = []
    home = tmp_path / "no-spark"
    env = dict(os.environ)
    assert make_driver_archive(tmp_path / "jvm", env, home, announce=said.append) is None
    assert len(said) == 2 and said[0].startswith("making a class-sharing archive")
    assert said[1].startswith("no class-sharing archive (the warm-up job could not run") and ".failed" in said[1]
    failed = list((tmp_path / "jvm").glob("*.failed"))
    assert len(failed) == 1 and "could not run" in failed[0].read_text()
    assert make_driver_archive(tmp_path / "jvm", env, home, announce=said.append) is None and len(said) == 2
    assert len(tries) == 1
    assert not list((tmp_path / "jvm").glob("*.partial")) and not list((tmp_path / "jvm").glob("warm-up-*"))


def test_a_path_that_spark_would_split_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Spark splits JVM options at spaces: a cache under a directory with one gets no archive (the job runs
    without it), rather than a broken option."""
    import os

    from spark_kafka_backup.jvm_archive import existing_driver_archive, make_driver_archive

    cache = tmp_path / "my cache"
    monkeypatch.setenv("KBACKUP_CACHE", str(cache))
    monkeypatch.delenv("SPARK_SUBMIT_OPTS", raising=False)
    path = driver_archive_path(cache / "jvm", spark_home(), os.environ)
    assert path is not None
    path.parent.mkdir(parents=True)
    path.write_bytes(b"archive")
    assert existing_driver_archive(os.environ, spark_home()) is None
    said: list[str] = []
    assert make_driver_archive(cache / "jvm", os.environ, spark_home(), announce=said.append) is None and not said


def test_unused_archives_and_left_partials_go_when_another_is_made(tmp_path: Path) -> None:
    import os
    import time

    jvm = tmp_path / "jvm"
    jvm.mkdir()
    old, recent = jvm / "spark-driver-aaaaaaaaaaaaaaaa.jsa", jvm / "spark-driver-bbbbbbbbbbbbbbbb.jsa"
    left = jvm / "spark-driver-cccccccccccccccc.jsa.4242.partial"
    for stale in (old, recent, left):
        stale.write_bytes(b"x")
    two_days_ago = time.time() - 2 * 86_400
    os.utime(old, (two_days_ago, two_days_ago))
    os.utime(left, (two_days_ago, two_days_ago))

    def works(partial: Path) -> bool:
        partial.write_bytes(b"whole")
        return True

    made = made_once(jvm / "spark-driver-dddddddddddddddd.jsa", works)
    assert made is not None and sorted(p.name for p in jvm.iterdir()) == sorted([made.name, recent.name])
