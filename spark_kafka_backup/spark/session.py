"""The Spark session of a spark-kafka-backup job: its name, log level, the user's settings and redaction of secrets."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spark_kafka_backup.arrow_runtime import VARIABLE as WITHOUT_PANDAS
from spark_kafka_backup.kafka.client_settings import SECRET_KEY_PATTERN
from spark_kafka_backup.logsetup import LOG_FORMAT_VARIABLE, spark_log_level

#: Spark's own default for ``spark.redaction.regex``, which names the settings whose values the UI, the event log
#: and the logs show as ``*********(redacted)``.
_SPARK_DEFAULT_REDACTION = "(?i)secret|password|token|access[.]?key"

#: What spark-kafka-backup sets instead: Spark's default plus every Kafka client key that can hold a secret
#: (``sasl.jaas.config``, ``ssl.key.pem``, ``sasl.oauthbearer.config`` ...), also as a data source option
#: (``kafka.sasl.password``) in a query plan, through ``spark.sql.redaction.options.regex``.
SPARK_REDACTION = f"{_SPARK_DEFAULT_REDACTION}|{SECRET_KEY_PATTERN}"


def job_session(
    app_name: str,
    *,
    debug: bool,
    spark_conf: Mapping[str, str],
    umask: int,
    log_format: str = "text",
) -> Any:
    """The job's ``SparkSession`` (made, or the one ``spark-submit`` already made), with ``spark_conf`` applied.

    ``umask`` is also Hadoop's for the files Spark writes (the checkpoint); ``log_format`` reaches the executors'
    Python workers, which import no pandas (:mod:`spark_kafka_backup.arrow_runtime`; PySpark's ``mapInArrow``, on
    the ``--where`` path of a restore or an erase, asks for it on the driver only). Streaming queries report to
    Spark's metrics system (its sinks, e.g. the Prometheus servlet).
    A ``spark.redaction.regex``, ``spark.sql.redaction.options.regex``, ``spark.hadoop.fs.permissions.umask-mode``
    or ``spark.sql.streaming.metricsEnabled`` the user gives wins (so does
    ``spark.executorEnv.KBACKUP_WITHOUT_PANDAS=0``).
    """
    from pyspark.sql import SparkSession

    log_level = spark_log_level(debug=debug)
    builder = (
        SparkSession.builder.appName(app_name)
        .config("spark.log.level", log_level)
        .config("spark.redaction.regex", SPARK_REDACTION)
        .config("spark.sql.redaction.options.regex", SPARK_REDACTION)
        .config("spark.hadoop.fs.permissions.umask-mode", f"{umask:03o}")
        .config("spark.sql.streaming.metricsEnabled", "true")
        .config(f"spark.executorEnv.{LOG_FORMAT_VARIABLE}", log_format)
        .config(f"spark.executorEnv.{WITHOUT_PANDAS}", "1")
    )
    for key, value in spark_conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    return spark


def quiet_accumulator_server(spark: Any) -> None:
    """For a job that is stopping: when the JVM hangs up on PySpark's accumulator server while tasks still run, its
    thread prints an ``EOFError`` traceback (socketserver's ``handle_error``); nothing the job needs is lost by not
    printing it, and a stop prints no traceback."""
    server = getattr(spark.sparkContext, "_accumulatorServer", None)
    if server is not None:
        server.handle_error = lambda request, client_address: None
