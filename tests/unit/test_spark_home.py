"""The jobs' Spark home: PySpark's installation without the zip archives Spark would put first on Python's path."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_kafka_backup import spark_submit
from spark_kafka_backup.spark_submit import archive_free_home


def _installed(root: Path) -> Path:
    """The layout pip gives PySpark: its modules, ``bin``, ``jars``, and ``python/lib`` with the archives."""
    installed = root / "site-packages" / "pyspark"
    for directory in ("bin", "jars", "sql", "python/lib", "python/pyspark"):
        (installed / directory).mkdir(parents=True)
    (installed / "__init__.py").write_text("")
    (installed / "bin" / "spark-submit").write_text("#!/bin/sh\n")
    (installed / "jars" / "spark-core.jar").write_bytes(b"PK")
    (installed / "python" / "lib" / "pyspark.zip").write_bytes(b"PK")
    (installed / "python" / "lib" / "py4j-0.10.9.9-src.zip").write_bytes(b"PK")
    return installed


def test_the_home_links_everything_but_the_archives(tmp_path: Path) -> None:
    installed = _installed(tmp_path)
    home = archive_free_home(installed, tmp_path / "cache", "4.3.0")
    assert home is not None and home.parent == tmp_path / "cache" and "4.3.0" in home.name
    assert (home / "bin" / "spark-submit").read_text() == "#!/bin/sh\n"
    # Its jars: hard links to the install's, in a set every install of this version shares (one class archive).
    assert (home / "jars").resolve() == tmp_path / "spark-jars" / (home / "jars").resolve().name
    assert (home / "jars" / "spark-core.jar").stat().st_ino == (installed / "jars" / "spark-core.jar").stat().st_ino
    assert (home / "__init__.py").resolve() == installed / "__init__.py"
    assert (home / "python" / "pyspark").resolve() == installed / "python" / "pyspark"
    assert not (home / "python" / "lib").exists()
    assert (installed / "python" / "lib" / "pyspark.zip").exists()  # the installation itself is left as it was
    # Made once: the next job finds it; nothing half-made is left beside it.
    assert archive_free_home(installed, tmp_path / "cache", "4.3.0") == home
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [home.name]


def test_another_installation_or_version_gets_its_own_home(tmp_path: Path) -> None:
    first = archive_free_home(_installed(tmp_path / "a"), tmp_path / "cache", "4.3.0")
    second = archive_free_home(_installed(tmp_path / "b"), tmp_path / "cache", "4.3.0")
    upgraded = archive_free_home(tmp_path / "a" / "site-packages" / "pyspark", tmp_path / "cache", "4.3.1")
    assert None not in (first, second, upgraded)
    assert len({first, second, upgraded}) == 3


def test_installs_of_the_same_jars_share_one_set_and_other_jars_get_their_own(tmp_path: Path) -> None:
    first = archive_free_home(_installed(tmp_path / "a"), tmp_path / "cache", "4.3.0")
    second = archive_free_home(_installed(tmp_path / "b"), tmp_path / "cache", "4.3.0")
    assert first is not None and second is not None and first != second
    assert (first / "jars").resolve() == (second / "jars").resolve()
    other = _installed(tmp_path / "c")
    (other / "jars" / "spark-sql.jar").write_bytes(b"PK\x03")
    third = archive_free_home(other, tmp_path / "cache", "4.3.0")
    assert third is not None and (third / "jars").resolve() != (first / "jars").resolve()
    assert sorted(p.name for p in (third / "jars").iterdir()) == ["spark-core.jar", "spark-sql.jar"]
    # A home made again finds its shared jars as they are (not stale), and nothing half-made is left.
    assert archive_free_home(tmp_path / "a" / "site-packages" / "pyspark", tmp_path / "cache", "4.3.0") == first
    assert not [p for p in (tmp_path / "spark-jars").iterdir() if p.name.startswith(".")]
    # A set no living install's home points at (that install removed) goes when another is made; one a home of a
    # living install points at stays (its jobs may be running).
    import shutil

    shutil.rmtree(tmp_path / "c")
    upgraded = _installed(tmp_path / "d")
    (upgraded / "jars" / "spark-core.jar").write_bytes(b"PK\x03\x04")
    assert archive_free_home(upgraded, tmp_path / "cache", "4.3.1") is not None
    assert (first / "jars").resolve().is_dir() and not (third / "jars").resolve().exists()


def test_jars_that_cannot_be_linked_stay_the_installs_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def other_file_system(source: object, target: object) -> None:
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr("spark_kafka_backup.spark_submit.os.link", other_file_system)
    installed = _installed(tmp_path)
    home = archive_free_home(installed, tmp_path / "cache", "4.3.0")
    assert home is not None and (home / "jars").resolve() == installed / "jars"
    assert archive_free_home(installed, tmp_path / "cache", "4.3.0") == home
    assert not (tmp_path / "spark-jars").exists() or not list((tmp_path / "spark-jars").iterdir())


def test_a_home_made_meanwhile_by_another_process_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    installed = _installed(tmp_path)
    made = archive_free_home(installed, tmp_path / "other", "4.3.0")
    assert made is not None
    home = tmp_path / "cache" / made.name
    real_rename = Path.rename

    def other_process_first(self: Path, target: Path) -> Path:
        real_rename(made, home)  # the other process's rename lands first; this one's is refused
        return real_rename(self, target)

    monkeypatch.setattr(Path, "rename", other_process_first)
    assert archive_free_home(installed, tmp_path / "cache", "4.3.0") == home
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [home.name]


def test_a_cache_that_is_a_file_gives_none(tmp_path: Path) -> None:
    (tmp_path / "cache").write_text("not a directory")
    assert archive_free_home(_installed(tmp_path), tmp_path / "cache", "4.3.0") is None


def test_a_given_spark_home_is_used_as_it_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARK_HOME", str(tmp_path / "spark-4"))
    assert spark_submit.spark_home() == tmp_path / "spark-4"
    monkeypatch.delenv("SPARK_HOME")
    monkeypatch.setenv("KBACKUP_CACHE", str(tmp_path / "cache"))
    home = spark_submit.spark_home()
    assert home.parent == tmp_path / "cache" / "spark-home"
    assert (home / "bin" / "spark-submit").is_file() and not (home / "python" / "lib").exists()


def test_yarn_gets_the_installation_with_its_archives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """spark-submit ships SPARK_HOME/python/lib/pyspark.zip to YARN's containers and refuses to start without it."""
    import pyspark

    monkeypatch.delenv("SPARK_HOME", raising=False)
    monkeypatch.setenv("KBACKUP_CACHE", str(tmp_path / "cache"))
    installed = Path(pyspark.__file__).resolve().parent
    assert spark_submit.spark_home("yarn") == installed
    assert spark_submit.job_environment(master="yarn")["SPARK_HOME"] == str(installed)
    assert spark_submit.spark_submit_command("backup", master="yarn")[0] == str(installed / "bin" / "spark-submit")
    local = spark_submit.spark_submit_command("backup", master="local[2]")[0]
    assert local.startswith(str(tmp_path / "cache" / "spark-home"))


def test_a_damaged_home_is_made_again(tmp_path: Path) -> None:
    installed = _installed(tmp_path)
    home = archive_free_home(installed, tmp_path / "cache", "4.3.0")
    assert home is not None
    (home / "sql").unlink()  # a link lost
    assert archive_free_home(installed, tmp_path / "cache", "4.3.0") == home
    assert (home / "sql").resolve() == installed / "sql"
    (home / "bin").unlink()
    (home / "bin").mkdir()  # a link replaced by a directory
    assert archive_free_home(installed, tmp_path / "cache", "4.3.0") == home
    assert (home / "bin" / "spark-submit").is_file()
    (home / "python" / "lib").mkdir()  # the archives' directory back
    assert archive_free_home(installed, tmp_path / "cache", "4.3.0") == home
    assert not (home / "python" / "lib").exists()
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [home.name]


def test_a_relative_cache_gives_an_absolute_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARK_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KBACKUP_CACHE", "relative-cache")
    home = spark_submit.spark_home()
    assert home.is_absolute() and home.parent == tmp_path / "relative-cache" / "spark-home"
