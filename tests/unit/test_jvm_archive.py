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
