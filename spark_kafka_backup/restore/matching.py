"""``restore --where PREDICATE``: the records a Spark SQL predicate holds for, found before the plan.

Spark reads the backup through the ``kbackup`` data source (:mod:`spark_kafka_backup.datasource`), evaluates the
predicate on every record of the restored topics and hands each task's flags to
:func:`~spark_kafka_backup.datasource.match_runs.matched_runs`, which keeps runs of consecutive matching records.
The driver collects the runs (16 bytes each, at most :data:`MAX_RUNS`) into each partition's
:class:`~spark_kafka_backup.partition.selection.MatchedRuns`: the plan, the tasks and the group offset remapping
then select exactly those records, as they select a time window's, and a rerun after a kill evaluates the predicate
again on the same records and finds the same ones.

Refused before anything is produced, in one line: a predicate Spark cannot parse or resolve, one that is not a
condition (not a boolean), and one whose result could change between runs (``rand()``, ``current_timestamp()``):
a restore killed and run again must select the same records.
"""

from __future__ import annotations

import contextlib
import logging
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from spark_kafka_backup.datasource import register
from spark_kafka_backup.datasource.match_runs import RUNS_DDL, matched_runs
from spark_kafka_backup.errors import KbackupError, UsageError
from spark_kafka_backup.partition.selection import MatchedRuns
from spark_kafka_backup.restore.settings import RestoreSettings
from spark_kafka_backup.text import count

log = logging.getLogger("spark_kafka_backup.restore")

#: Runs held on the driver at most (16 bytes each: 80 MB); a predicate matching more scattered records is refused.
MAX_RUNS = 5_000_000


def match_records(settings: RestoreSettings, spark: Any, topics: list[str]) -> RestoreSettings:
    """``settings`` with the records ``settings.where`` holds for in ``topics``; logs how many per partition."""
    assert settings.where is not None
    where = settings.where
    register(spark)
    reader = spark.read.format("kbackup").option("topics", ",".join(topics))
    files = [file for file, _ in settings.key_sources if file is not None]
    envs = [env for _, env in settings.key_sources if env is not None]
    if files:
        reader = reader.option("encryptionKeyFile", ",".join(files))
    if envs:
        reader = reader.option("encryptionKeyEnv", ",".join(envs))
    reader = reader.option("skipBadSegments", str(settings.skip_bad_segments).lower())
    reader = reader.option("allowUnauthenticated", str(settings.allow_unauthenticated).lower())
    reader = reader.option("legacyNoMagic", str(settings.legacy).lower())
    flagged = _flagged(spark, reader.load(str(settings.source)), where)
    try:
        table = flagged.mapInArrow(matched_runs, RUNS_DDL).toArrow()
    except KbackupError:
        raise
    except Exception as exc:
        raise KbackupError(f"--where: Spark could not evaluate {where!r} on the backup: {_first_line(exc)}") from exc
    if table.num_rows > MAX_RUNS:
        raise UsageError(
            f"--where {where!r} matches records scattered over {table.num_rows:,} runs, more than the "
            f"{MAX_RUNS:,} a restore holds; narrow it (an offset or time window, fewer topics)"
        )
    runs: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
    records: dict[tuple[str, int], int] = defaultdict(int)
    for row in table.to_pylist():
        key = (row["topic"], row["partition"])
        runs[key].append((row["first"], row["last"]))
        records[key] += row["records"]
    for key in sorted(records):
        log.info("--where: %s/%d: %s matched", key[0], key[1], count(records[key], "record"))
    log.info("--where: %s matched in %s", count(sum(records.values()), "record"), count(len(records), "partition"))
    return replace(settings, matched={key: MatchedRuns.of(found, where) for key, found in runs.items()})


def _flagged(spark: Any, rows: Any, where: str) -> Any:
    """``topic, partition, offset, matched`` of every row; the predicate checked first."""
    from pyspark.errors import PySparkException
    from pyspark.sql import functions
    from pyspark.sql.types import BooleanType

    try:
        with _quiet_query_context():
            condition = functions.expr(where)
            flagged = rows.select("topic", "partition", "offset", condition.alias("matched"))
            kind = flagged.schema["matched"].dataType
    except PySparkException as exc:
        raise UsageError(f"--where {where!r}: {_first_line(exc)}") from exc
    if not isinstance(kind, BooleanType):
        raise UsageError(f"--where {where!r} is not a condition: it gives {kind.simpleString()}, not true or false")
    resolved = flagged._jdf.queryExecution().analyzed().expressions().last()
    if not resolved.deterministic():
        raise UsageError(
            f"--where {where!r} may hold for other records on another run (rand(), current_timestamp() ...): a "
            "restore run again after a stop must select the same records"
        )
    return flagged


@contextlib.contextmanager
def _quiet_query_context() -> Iterator[None]:
    """PySpark logs an error it raises with a query context (the predicate's text) itself, on standard error: the
    refusal is the one line said about it."""
    loggers = [logging.getLogger(name) for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger")]
    kept = [logger.disabled for logger in loggers]
    for logger in loggers:
        logger.disabled = True
    try:
        yield
    finally:
        for logger, disabled in zip(loggers, kept, strict=True):
            logger.disabled = disabled


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
