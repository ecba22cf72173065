"""A class-data-sharing archive for the jobs' Spark driver JVM, made once per machine, Java and PySpark version.

Before a job's first line, its driver JVM loads, parses and verifies some ten thousand of Spark's classes: a fixed
cost of every backup and restore, paid in CPU on the machine that runs the driver. A dynamic CDS archive
(``-XX:ArchiveClassesAtExit`` once, ``-XX:SharedArchiveFile`` after; Java 13+) holds those classes ready to map.

:func:`ensure_driver_archive` makes it the first time ``spark-kafka-backup backup|restore`` runs on a machine (one short
Spark job, 10 s to a few minutes, announced on standard error; 150-170 MB), in spark-kafka-backup's cache, named by a
hash of the Java, PySpark and its jars; :func:`sharing_options` are the options every later driver starts with
(:func:`spark_kafka_backup.spark_submit.spark_submit_command`). A JVM that cannot map the archive (another Java, jars
changed since) runs without it and says nothing: sharing stays in the JVM's default ``auto`` mode and its ``cds``
logging is off. ``KBACKUP_JVM_ARCHIVE=off`` turns the archive off; a ``SPARK_SUBMIT_OPTS`` that names an archive of its
own keeps it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from spark_kafka_backup.jars import cache_root

#: ``off`` in the environment: no archive is made or mapped.
ARCHIVE_SETTING = "KBACKUP_JVM_ARCHIVE"

#: Work that loads what the jobs' drivers load: a SQL session, a DataFrame from Python rows, an RDD job, a
#: streaming query.
WARM_UP = """
from pyspark.sql import SparkSession
spark = SparkSession.builder.appName("spark-kafka-backup-class-archive").getOrCreate()
spark.createDataFrame([(1, b"k", "t")], "offset long, key binary, topic string").groupBy("topic").count().collect()
spark.sparkContext.parallelize(range(4), 2).map(lambda x: x * 2).collect()
stream = spark.readStream.format("rate").option("rowsPerSecond", 1).load()
stream.writeStream.format("noop").trigger(once=True).start().awaitTermination()
spark.stop()
"""


def sharing_options(archive: Path | str | None) -> tuple[str, ...]:
    """The JVM options that map ``archive`` (none without one), with cds logging off: a JVM that cannot map it runs
    without it and says nothing into a job's output."""
    return (f"-XX:SharedArchiveFile={archive}", "-Xlog:cds=off", "-Xlog:cds+dynamic=off") if archive else ()


def chooses_its_own(env: Mapping[str, str]) -> bool:
    """Whether the environment turns the archive off, or names a class archive for spark-submit's JVM itself."""
    if env.get(ARCHIVE_SETTING, "").strip().lower() == "off":
        return True
    given = env.get("SPARK_SUBMIT_OPTS", "")
    return "SharedArchiveFile" in given or "ArchiveClassesAtExit" in given


def _java(env: Mapping[str, str]) -> Path | None:
    home = env.get("JAVA_HOME")
    found = Path(home) / "bin" / "java" if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def driver_archive_path(cache: Path, spark_home: Path, env: Mapping[str, str], jvm_options: str = "") -> Path | None:
    """Where the driver archive for this Java, PySpark, Spark home and JVM options lives (``None`` without a
    Java)."""
    import pyspark

    java = _java(env)
    if java is None:
        return None
    # A dynamic archive is valid only for the very jar files it was made from (the JVM checks their sizes and times,
    # and finds them through any path to them): named by the files the Spark home's jars are, so that the homes of
    # every checkout, which share one set of jars (spark_submit.shared_jars), share one archive.
    directory = (spark_home / "jars").resolve()
    jars = sorted(directory.glob("*.jar"))
    stamps = "".join(f"{jar.name}:{jar.stat().st_size}:{jar.stat().st_mtime_ns};" for jar in jars)
    key = f"{java}:{java.stat().st_mtime_ns}:{pyspark.__version__}:{directory}:{stamps}"
    if jvm_options:
        key += f":{jvm_options}"
    return cache / f"spark-driver-{hashlib.sha256(key.encode()).hexdigest()[:16]}.jsa"


def existing_driver_archive(env: Mapping[str, str], spark_home: Path) -> Path | None:
    """The archive for drivers of ``spark_home`` when it was made and the environment does not choose otherwise;
    its time is set to now (archives unused for a day are removed when another is made)."""
    if chooses_its_own(env):
        return None
    path = driver_archive_path(cache_root() / "jvm", spark_home, env)
    if path is None or not path.is_file() or not _plain(path):
        return None
    with contextlib.suppress(OSError):
        os.utime(path)
    return path


def ensure_driver_archive(
    env: Mapping[str, str], spark_home: Path, *, announce: Callable[[str], None] | None = None
) -> Path | None:
    """The archive for drivers of ``spark_home``, made now unless it exists (``announce`` is told first, and why
    when it could not be made); ``None`` when the environment chooses otherwise or it could not be made (the job
    then runs without it; a failed attempt is not repeated for a day)."""
    if chooses_its_own(env):
        return None
    return make_driver_archive(cache_root() / "jvm", env, spark_home, announce=announce)


def make_driver_archive(
    cache: Path,
    env: Mapping[str, str],
    home: Path,
    *,
    jvm_options: str = "",
    announce: Callable[[str], None] | None = None,
) -> Path | None:
    """The archive in ``cache`` for drivers of the Spark home ``home`` started with ``jvm_options``, made now (one
    short Spark job) unless it exists; ``None`` when it cannot be made."""
    path = driver_archive_path(cache, home, env, jvm_options)
    if path is None or not _plain(path):
        return None  # Spark splits JVM options at spaces: a path with one could not be given to the JVM
    failed = path.with_suffix(".failed")
    with contextlib.suppress(OSError):
        if not path.is_file() and time.time() - failed.stat().st_mtime < FAILED_WAIT_SECONDS:
            return None  # tried and failed within the day: the jobs run without it, without asking again

    def make(partial: Path) -> bool:
        if announce is not None:
            announce(f"making a class-sharing archive for Spark's driver JVM in {cache}, once per version of "
                     f"PySpark and Java (about 160 MB; 10 s to a few minutes on a busy machine; one no job used for "
                     f"a day is removed when another is made; {ARCHIVE_SETTING}=off skips it)")  # fmt: skip
        script = cache / f"warm-up-{os.getpid()}.py"
        command = [str(home / "bin" / "spark-submit"), "--master", "local[2]",
                   "--conf", "spark.ui.enabled=false", str(script)]  # fmt: skip
        options = " ".join(part for part in (env.get("SPARK_SUBMIT_OPTS", ""), jvm_options) if part)
        why = ""
        try:
            script.write_text(WARM_UP)
            made = subprocess.run(
                command,
                env={**env, "SPARK_SUBMIT_OPTS": f"{options} -XX:ArchiveClassesAtExit={partial}".strip()},
                capture_output=True,
                text=True,
                timeout=300,
            )
            if made.returncode == 0:
                return True
            lines = [line.strip() for line in (made.stderr or made.stdout or "").splitlines() if line.strip()]
            why = f"the warm-up job exited {made.returncode}" + (f": {lines[-1][:300]}" if lines else "")
        except (OSError, subprocess.SubprocessError) as exc:
            why = f"the warm-up job could not run: {exc}"
        finally:
            script.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            failed.write_text(why + "\n")
        if announce is not None:
            announce(f"no class-sharing archive ({why}); jobs run without it, and it is tried again in a day "
                     f"(or once {failed} is deleted)")  # fmt: skip
        return False

    return made_once(path, make)


#: How long a failed attempt at the driver archive keeps the launcher from trying again.
FAILED_WAIT_SECONDS = 86_400


def _plain(path: Path) -> bool:
    """Whether ``path`` can be given inside Spark's JVM options as it is (no space or quote to split it)."""
    return not any(char.isspace() or char in "\"'\\" for char in str(path))


def made_once(path: Path | None, make: Callable[[Path], bool]) -> Path | None:
    """``path`` when it exists, else made by ``make(partial)`` (a JVM writing its archive to ``partial`` as it exits,
    True when it ended well) and put in place whole; ``None`` when there is no path or it could not be made."""
    if path is None:
        return None
    if path.is_file():
        return path
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not make(partial) or not partial.is_file():
            partial.unlink(missing_ok=True)
            return None
        os.replace(partial, path)  # whole or absent: a JVM never maps a half-written archive
    except OSError:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
        return None
    # Archives of other installs (150-170 MB each) are removed once none has been used for a day (a job's launch
    # sets its archive's time), and so are partial ones a killed attempt left.
    day_ago = time.time() - 86_400
    family = path.name.rsplit("-", 1)[0]
    for old in [*path.parent.glob(f"{family}-*.jsa"), *path.parent.glob(f"{family}-*.partial")]:
        with contextlib.suppress(OSError):
            if old != path and old.stat().st_mtime < day_ago:
                old.unlink()
    return path
