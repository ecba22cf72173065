"""Class-data-sharing archives for the tests' ``spark-submit`` driver JVMs and their Kafka nodes.

The suite starts a Spark driver dozens of times and is CPU-bound on two cores. A
JVM mapping a dynamic CDS archive of the classes a Spark driver loads (Java 13+:
``-XX:ArchiveClassesAtExit`` once, ``-XX:SharedArchiveFile`` after) skips parsing
and verifying them: a trivial job measured 9.1 s of wall and 9.4 s of CPU time
without it, 5.9 s and 5.9 s with it (this machine, PySpark 4.3, Java 17).

The archive is made once per machine, Java and PySpark (named by a hash of
them) in spark-kafka-backup's cache, by the controlling pytest process before workers
start. A JVM that cannot use it (another Java behind ``java``) runs without it:
sharing stays in its default ``auto`` mode, and ``cds`` logging is off so that
such a JVM prints no warning into a job's output. Only the tests use it; the jobs,
the demo and the benchmarks keep the JVM's defaults.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

#: The variable through which workers learn the archive's path (set by the controlling process).
ARCHIVE_ENV = "KBACKUP_TEST_SPARK_ARCHIVE"

#: Work that loads what spark-kafka-backup's jobs load: a SQL session, a DataFrame from Python rows, an RDD job.
_WARM_UP = """
from pyspark.sql import SparkSession
spark = SparkSession.builder.appName("kbackup-test-archive").getOrCreate()
spark.createDataFrame([(1, b"k", "t")], "offset long, key binary, topic string").groupBy("topic").count().collect()
spark.sparkContext.parallelize(range(4), 2).map(lambda x: x * 2).collect()
spark.stop()
"""


def _java() -> Path | None:
    home = os.environ.get("JAVA_HOME")
    found = Path(home) / "bin" / "java" if home else shutil.which("java")
    return Path(found).resolve() if found else None


def archive_path(cache: Path, jvm_options: str) -> Path | None:
    """Where the archive for this Java, PySpark and JVM options lives (``None`` without a Java)."""
    import pyspark

    java = _java()
    if java is None:
        return None
    # A dynamic archive is valid only for the very jar files it was made from (the JVM checks their sizes and
    # times and refuses it otherwise): a new install of the same PySpark needs a new one.
    # And for the class path as the JVM is given it, which names the jars through the jobs' Spark home.
    from spark_kafka_backup.spark_submit import spark_home

    jars = sorted((Path(pyspark.__file__).parent / "jars").glob("*.jar"))
    stamps = "".join(f"{jar.name}:{jar.stat().st_size}:{jar.stat().st_mtime_ns};" for jar in jars)
    key = f"{java}:{java.stat().st_mtime_ns}:{pyspark.__version__}:{spark_home()}:{stamps}:{jvm_options}"
    return cache / f"spark-driver-{hashlib.sha256(key.encode()).hexdigest()[:16]}.jsa"


def ensure_archive(cache: Path, jvm_options: str, env: dict[str, str]) -> Path | None:
    """The archive, made now (one short Spark job, about 10 s) unless it exists; ``None`` when it cannot be made."""
    from spark_kafka_backup.spark_submit import spark_home

    def make(partial: Path) -> bool:
        script = cache / f"warm-up-{os.getpid()}.py"
        script.write_text(_WARM_UP)
        command = [str(spark_home() / "bin" / "spark-submit"), "--master", "local[2]",
                   "--conf", "spark.ui.enabled=false", str(script)]  # fmt: skip
        made = subprocess.run(
            command,
            env={**env, "SPARK_SUBMIT_OPTS": f"{jvm_options} -XX:ArchiveClassesAtExit={partial}"},
            capture_output=True,
            timeout=300,
        )
        script.unlink(missing_ok=True)
        return made.returncode == 0

    return _made_once(archive_path(cache, jvm_options), make)


def _made_once(path: Path | None, make: Callable[[Path], bool]) -> Path | None:
    """``path`` when it exists, else made by ``make(partial)`` (a JVM writing its archive to ``partial`` as it exits,
    True when it ended well) and put in place whole; ``None`` when there is no path or it could not be made."""
    if path is None:
        return None
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    if not make(partial) or not partial.is_file():
        partial.unlink(missing_ok=True)
        return None
    os.replace(partial, path)  # whole or absent: a JVM never maps a half-written archive
    # Archives of other installs (50-150 MB each) are removed once nobody has made one for a day: another checkout's
    # suite running at the same time maps its own (removing it would make that run's JVMs start without it).
    day_ago = time.time() - 86_400
    family = path.name.rsplit("-", 1)[0]
    for old in path.parent.glob(f"{family}-*.jsa"):
        with contextlib.suppress(OSError):
            if old != path and old.stat().st_mtime < day_ago:
                old.unlink()
    return path


#: The variable through which workers learn the Kafka nodes' archive (set by the controlling process).
KAFKA_ARCHIVE_ENV = "KBACKUP_TEST_KAFKA_ARCHIVE"


def kafka_archive_path(cache: Path) -> Path | None:
    """Where the archive of the test Kafka nodes' classes lives for this Java and these Kafka jars (``None``
    without a Java)."""
    from spark_kafka_backup.devkit.kafka_cluster import KAFKA_VERSION, kafka_jars

    java = _java()
    if java is None:
        return None
    jars = sorted(kafka_jars().glob("*.jar"))
    stamps = "".join(f"{jar}:{jar.stat().st_size}:{jar.stat().st_mtime_ns};" for jar in jars)
    key = f"{java}:{java.stat().st_mtime_ns}:{KAFKA_VERSION}:{stamps}"
    return cache / f"kafka-node-{hashlib.sha256(key.encode()).hexdigest()[:16]}.jsa"


def ensure_kafka_archive(cache: Path) -> Path | None:
    """The archive of the classes a test Kafka node loads (its storage tool's too), made now by starting one node
    and stopping it with SIGTERM (the JVM writes the archive as it exits), unless it exists; ``None`` when it cannot
    be made. Measured here (Kafka 4.1.1, Java 17, quick JIT): a node's start 3.5 -> 2.4 CPU-s, 3.9 -> 3.0 s."""
    import signal

    from spark_kafka_backup.devkit.kafka_cluster import KafkaCluster, KafkaClusterError

    def make(partial: Path) -> bool:
        cluster = KafkaCluster(quick_jit=True, java_options=(f"-XX:ArchiveClassesAtExit={partial}",))
        try:
            cluster.start()
            cluster.kill_node(cluster.nodes[0].node_id, signal.SIGTERM)
            return True
        except (KafkaClusterError, OSError):
            return False
        finally:
            cluster.stop()

    return _made_once(kafka_archive_path(cache), make)


def kafka_node_options() -> tuple[str, ...]:
    """JVM options of the tests' Kafka nodes: the archive, when the controlling process made one."""
    return sharing_options(os.environ.get(KAFKA_ARCHIVE_ENV))


def sharing_options(archive: str | None) -> tuple[str, ...]:
    """The JVM options that map ``archive`` (none without one), with cds logging off: a JVM that cannot map it runs
    without it and says nothing into a job's output."""
    return (f"-XX:SharedArchiveFile={archive}", "-Xlog:cds=off", "-Xlog:cds+dynamic=off") if archive else ()
