"""Spark's own Kafka source (``spark-sql-kafka-0-10``) for the installed PySpark.

The connector is a JVM package that ``spark-submit`` has to be given before
the JVM starts: ``--packages`` + :func:`package_coordinate` (Spark's Ivy
resolves it from Maven Central), or ``--jars`` with the files that
:func:`connector_jars` caches. The backup job checks that the classes are
there before it starts a query with ``--kafka-source spark``.

Maven Central does not hold a connector for every PySpark release (PySpark
4.3.0 is on PyPI, ``spark-sql-kafka-0-10_2.13:4.3.0`` is not). The
connector's version is the installed Spark's when Central has it, else the
newest of :data:`CENTRAL_CONNECTOR_VERSIONS` of the same major version below
it; the backup tests run with exactly that pair.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from spark_kafka_backup.errors import ArtifactError
from spark_kafka_backup.jars import Artifact, resolve, resolved_dir

#: Connector releases known to be on Maven Central (newest last), for a Spark without its own.
CENTRAL_CONNECTOR_VERSIONS = ("4.0.4", "4.1.3", "4.2.0")

_VERSIONED_JAR = re.compile(r"^(?P<name>.+?)-\d[\w.]*(?:-[\w.]+)?\.jar$")

#: The data source name the connector registers.
SPARK_KAFKA_FORMAT = "kafka"

_PROVIDER_CLASS = "org.apache.spark.sql.kafka010.KafkaSourceProvider"


def spark_version() -> str:
    import pyspark

    return str(pyspark.__version__)


def scala_version() -> str:
    """``2.13`` for a PySpark whose jars hold ``scala-library-2.13.x.jar``."""
    for jar in _pyspark_jars().glob("scala-library-*.jar"):
        return ".".join(jar.stem.removeprefix("scala-library-").split(".")[:2])
    return "2.13"


def connector_versions() -> list[str]:
    """Connector versions to try, best first: the installed Spark's, then older ones of its major version."""
    spark = spark_version()
    major = spark.split(".")[0]
    older = [v for v in CENTRAL_CONNECTOR_VERSIONS if v.split(".")[0] == major and _key(v) < _key(spark)]
    return [spark, *reversed(older)]


def connector_artifact(version: str | None = None) -> Artifact:
    """``org.apache.spark:spark-sql-kafka-0-10_SCALA:VERSION`` (default: the installed Spark's)."""
    return Artifact("org.apache.spark", f"spark-sql-kafka-0-10_{scala_version()}", version or spark_version())


def package_coordinate() -> str:
    """What to pass to ``spark-submit --packages``: the connector :func:`connector_jars` resolves."""
    return str(connector_artifact(_resolve()[0]))


def connector_jars() -> list[Path]:
    """The connector's jars and its runtime dependencies (kafka-clients, commons-pool2, ...), cached.

    Jars of libraries that Spark already carries (any version) are left out: the
    connector runs inside Spark, on Spark's copies.
    """
    directory = _resolve()[1]
    carried = {_base_name(jar.name) for jar in _pyspark_jars().glob("*.jar")}
    return sorted(jar for jar in directory.glob("*.jar") if _base_name(jar.name) not in carried)


#: Consumer settings Spark's Kafka source sets itself and refuses as options.
_SET_BY_SPARK = frozenset(
    {
        "group.id",
        "auto.offset.reset",
        "key.deserializer",
        "value.deserializer",
        "enable.auto.commit",
        "interceptor.classes",
    }
)


def spark_source_client(java: Mapping[str, str]) -> dict[str, str]:
    """Java client settings for Spark's Kafka source (as ``kafka.*`` options).

    Reads committed records only unless the settings say otherwise, as
    spark-kafka-backup's own source does; settings the source manages itself are dropped.
    """
    settings = {key: value for key, value in java.items() if key not in _SET_BY_SPARK}
    settings.setdefault("isolation.level", "read_committed")
    return settings


def connector_loaded(spark: object) -> bool:
    """True when the running JVM can load Spark's Kafka source."""
    jvm = spark._jvm  # type: ignore[attr-defined]
    try:
        jvm.java.lang.Class.forName(
            _PROVIDER_CLASS, False, jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
        )
    except Exception:
        return False
    return True


def _resolve() -> tuple[str, Path]:
    candidates = [(version, connector_artifact(version)) for version in connector_versions()]
    for version, artifact in candidates:
        done = resolved_dir(f"{artifact.name}-{version}", [artifact])
        if done is not None:
            return version, done
    failures = []
    for number, (version, artifact) in enumerate(candidates):
        if number:
            print(
                f"spark-kafka-backup: {candidates[number - 1][1]} could not be fetched (Maven Central does not hold a "
                "connector "
                f"for every PySpark release); trying {version}, the newest before it of Spark {version.split('.')[0]}",
                flush=True,
            )
        try:
            return version, resolve(f"{artifact.name}-{version}", [artifact])
        except ArtifactError as exc:
            failures.append(str(exc))
    raise ArtifactError("Spark's Kafka connector: " + "; ".join(failures))


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def _base_name(jar_name: str) -> str:
    match = _VERSIONED_JAR.match(jar_name)
    return match.group("name") if match else jar_name


def _pyspark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"
