"""Class-data-sharing archives for the tests' Kafka nodes (the Spark drivers map the jobs' own archive).

The suite starts Kafka nodes and Spark drivers dozens of times and is CPU-bound on two cores. A JVM mapping a
dynamic CDS archive of the classes it loads (Java 13+: ``-XX:ArchiveClassesAtExit`` once, ``-XX:SharedArchiveFile``
after) skips parsing and verifying them. The Spark drivers of test jobs map the archive every job's driver maps
(:mod:`spark_kafka_backup.jvm_archive`, made by the controlling pytest process before workers start, as the launcher
makes it on a user's first job). The Kafka nodes' archive is the tests' own: made once per machine, Java and Kafka
jars in spark-kafka-backup's cache, by the controlling process. A JVM that cannot use it (another Java behind ``java``)
runs without it: sharing stays in its default ``auto`` mode, and ``cds`` logging is off.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from spark_kafka_backup.jvm_archive import made_once, sharing_options


def _java() -> Path | None:
    home = os.environ.get("JAVA_HOME")
    found = Path(home) / "bin" / "java" if home else shutil.which("java")
    return Path(found).resolve() if found else None


#: The variable through which workers learn the Kafka nodes' archive (set by the controlling process).
KAFKA_ARCHIVE_ENV = "KBACKUP_TEST_KAFKA_ARCHIVE"


def kafka_archive_path(cache: Path) -> Path | None:
    """Where the archive of the test Kafka nodes' classes lives for this Java and these Kafka jars (``None``
    without a Java)."""
    from devkit.kafka_cluster import KAFKA_VERSION, kafka_jars

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

    from devkit.kafka_cluster import KafkaCluster, KafkaClusterError

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

    return made_once(kafka_archive_path(cache), make)


def kafka_node_options() -> tuple[str, ...]:
    """JVM options of the tests' Kafka nodes: the archive, when the controlling process made one."""
    return sharing_options(os.environ.get(KAFKA_ARCHIVE_ENV))
