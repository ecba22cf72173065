"""``restore --where PREDICATE``: the records a Spark SQL predicate holds for, found before the plan.

Spark parses, resolves and checks the predicate on a stand-in of the ``kbackup`` data source's rows (its schema, no
rows). Then, within ``--from-time``/``--to-time``, on every record of the restored topics:

- a predicate whose optimized plan translates (:mod:`spark_kafka_backup.restore.predicate_nodes`: comparisons,
  ``AND``/``OR``/``NOT``, ``IN``, null checks, integer arithmetic, ``LIKE`` prefixes... of the columns other than
  headers) is evaluated by Spark tasks that read their segments and evaluate it on the Arrow rows themselves
  (:func:`~spark_kafka_backup.datasource.match_runs.runs_of_scan`): no row goes to the JVM and back, and a predicate
  of topics, partitions and offsets reads the segments' indexes only. An overflow or a division by zero, which Spark
  answers by its mode, is left to Spark;
- any other predicate is evaluated by Spark on the data source's rows, and each task's flags, in offset order, go to
  :func:`~spark_kafka_backup.datasource.match_runs.matched_runs`.

Either way the result is runs of consecutive matching records. The driver collects the runs (16 bytes each, at most
:data:`MAX_RUNS`) into each partition's :class:`~spark_kafka_backup.partition.selection.MatchedRuns`: the plan, the
tasks and the group offset remapping then select exactly those records, as they select a time window's.

What keeps the runs exact:

- the predicate is evaluated row by row, in the data source's order: one that needs other rows (a window function,
  an aggregate, a subquery) is refused, and :func:`matched_runs` refuses offsets that do not increase;
- a rerun after a stop must select the same records: a predicate whose value may change between runs
  (``rand()``, ``current_timestamp()``, ``current_date()`` ...) is refused, and the session time zone is UTC, so that
  ``timestamp >= '2026-11-20'`` means the same on every host;
- a run claims every stored record from its first offset to its last; each run's record count is checked against
  the segment indexes, and runs are cut where a damaged segment was left out (``--skip-bad-segments``), so a run never
  bridges records that were not read.

Refused before anything is produced, in one line: a predicate Spark cannot parse or resolve, one that is not a
condition (not a boolean), and the two kinds above.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from spark_kafka_backup.catalog.integrity import bad_segments
from spark_kafka_backup.datasource import register
from spark_kafka_backup.datasource.kafka_rows import KAFKA_ROWS_DDL
from spark_kafka_backup.datasource.match_runs import RUNS_DDL, RUNS_SCHEMA, ScanMatch, matched_runs, runs_of_scan
from spark_kafka_backup.datasource.row_predicate import Node
from spark_kafka_backup.datasource.scan_options import in_flag_words, scan_options
from spark_kafka_backup.datasource.scan_plan import plan_scans
from spark_kafka_backup.errors import SparkKafkaBackupError, UsageError
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.records_file import load_keys
from spark_kafka_backup.partition.selection import MatchedRuns, Window, count_selected
from spark_kafka_backup.restore.predicate_nodes import translated
from spark_kafka_backup.restore.settings import RestoreSettings
from spark_kafka_backup.storage import Location
from spark_kafka_backup.text import count

log = logging.getLogger("spark_kafka_backup.restore")

#: Runs held on the driver at most (16 bytes each as arrays: 80 MB); a predicate matching more scattered records is
#: refused.
MAX_RUNS = 5_000_000
#: Expression nodes that read other rows than the one evaluated: the flags would not come in offset order.
_OTHER_ROWS = ("WindowExpression", "AggregateExpression", "ScalarSubquery", "ListQuery", "Exists", "InSubquery",
               "LateralSubquery", "OuterReference")  # fmt: skip
#: Expression nodes whose value depends on when or where they run (Spark calls some of them deterministic).
_MOMENT = ("CurrentTimestamp", "Now", "CurrentDate", "LocalTimestamp", "CurrentTimeZone", "CurrentUser",
           "CurrentDatabase", "CurrentCatalog", "CurrentBatchTimestamp", "Uuid")  # fmt: skip
#: The session time zone the predicate is evaluated in.
TIME_ZONE = "UTC"


@dataclass(frozen=True)
class MatchScope:
    """What a predicate is evaluated on: the backup at ``source`` (its keys given by ``key_sources``, pairs of a
    key file and an environment variable), within ``from_time``/``to_time``; damaged segments left out with
    ``skip_bad_segments``."""

    source: Location
    where: str
    key_sources: tuple[tuple[str | None, str | None], ...] = ()
    from_time: int | None = None
    to_time: int | None = None
    skip_bad_segments: bool = False
    allow_unauthenticated: bool = False
    legacy: bool = False


def match_records(settings: RestoreSettings, spark: Any, topics: list[str]) -> RestoreSettings:
    """``settings`` with the records ``settings.where`` holds for in ``topics``; logs how many per partition."""
    assert settings.where is not None
    scope = MatchScope(settings.source, settings.where, settings.key_sources, settings.from_time, settings.to_time,
                       settings.skip_bad_segments, settings.allow_unauthenticated, settings.legacy)  # fmt: skip
    matched = find_matches(scope, spark, topics)
    for (topic, partition), runs in sorted(matched.items()):
        log.info("--where: %s/%d: %s matched", topic, partition, count(runs.records, "record"))
    total = sum(runs.records for runs in matched.values())
    log.info("--where: %s matched in %s", count(total, "record"), count(len(matched), "partition"))
    return replace(settings, matched=matched)


def find_matches(
    scope: MatchScope,
    spark: Any,
    topics: list[str],
    *,
    use: str = "a restore",
    narrow: str = "--from-time/--to-time, --topics, a stricter predicate",
    evaluate_here: bool = True,
) -> dict[tuple[str, int], MatchedRuns]:
    """The runs of records ``scope.where`` holds for in ``topics``, per partition (module docstring); ``use`` names
    the command, and ``narrow`` its options that narrow the records, in the refusal of too many runs;
    ``evaluate_here=False`` has Spark evaluate even a predicate the tasks could (tests compare the two)."""
    where = scope.where
    spark.conf.set("spark.sql.session.timeZone", TIME_ZONE)
    options = {"topics": ",".join(topics)}
    for option, values in (
        ("encryptionKeyFile", [file for file, _ in scope.key_sources if file is not None]),
        ("encryptionKeyEnv", [env for _, env in scope.key_sources if env is not None]),
    ):
        if any("," in value for value in values):
            raise UsageError(f"--where: a key file or variable name with a comma cannot be handed to Spark: {values}")
        if values:
            options[option] = ",".join(values)
    if scope.from_time is not None:
        options["fromTimestamp"] = str(scope.from_time)
    if scope.to_time is not None:
        options["toTimestamp"] = str(scope.to_time)
    options["skipBadSegments"] = str(scope.skip_bad_segments).lower()
    options["allowUnauthenticated"] = str(scope.allow_unauthenticated).lower()
    options["legacyNoMagic"] = str(scope.legacy).lower()
    options["logPlan"] = "false"  # the job's own lines say what it matched
    # The predicate is checked, and translated where it can be, on rows of the data source's schema that Spark
    # never reads: the data source is loaded only when Spark evaluates it.
    flagged = _flagged(_stand_in(spark), where)
    # The rows fill only the columns the predicate reads: a predicate of offsets or keys costs no values to build.
    read = _referenced_columns(flagged)
    if read is not None:
        options["columns"] = ",".join(sorted(read))
    predicate = translated(flagged) if evaluate_here else None
    table = None if predicate is None else _runs_here(spark, {**options, "path": str(scope.source)}, predicate, where)
    if table is None:
        register(spark)
        rows = spark.read.format("kbackup").options(**options).load(str(scope.source))
        table = _runs_by_spark(_flagged(rows, where), where)
    if table.num_rows > MAX_RUNS:
        raise UsageError(
            f"--where {where!r} matches records scattered over more than {MAX_RUNS:,} runs, more than {use} "
            f"holds; narrow it ({narrow})"
        )
    return _checked_runs(scope, table)


def _stand_in(spark: Any) -> Any:
    """A DataFrame of the data source's schema over no rows (nothing Spark's optimizer could fold away)."""
    from pyspark.sql.types import StructType

    return spark.createDataFrame(spark.sparkContext.emptyRDD(), StructType.fromDDL(KAFKA_ROWS_DDL))


def _runs_here(spark: Any, options: dict[str, str], predicate: Node, where: str) -> Any:
    """The runs of a translated predicate, each task reading its segments and evaluating it on their Arrow rows;
    ``None`` when a task found that Spark must evaluate it (module docstring)."""
    import pyarrow as pa

    from spark_kafka_backup.spark.failures import failure_cause

    try:
        scans = plan_scans(scan_options(options))
    except SparkKafkaBackupError as exc:  # said as the Spark path says the data source's errors, in the restore's flags
        raise SparkKafkaBackupError(
            f"--where: Spark could not evaluate {where!r} on the backup: {_flags(f'{type(exc).__name__}: {exc}')}"
        ) from exc
    if not scans:
        return RUNS_SCHEMA.empty_table()
    tasks = [ScanMatch(scan, predicate) for scan in scans]
    context = spark.sparkContext
    try:
        found = context.parallelize(tasks, len(tasks)).map(runs_of_scan).collect()
    except Exception as exc:
        raise SparkKafkaBackupError(
            f"--where: Spark could not evaluate {where!r} on the backup: {_flags(failure_cause(exc))}"
        ) from exc
    reasons = [result for result in found if isinstance(result, str)]
    if reasons:
        log.info("--where: %s; Spark evaluates the predicate", reasons[0])
        return None
    batches = [batch for result in found for batch in result]
    return pa.Table.from_batches(batches, schema=RUNS_SCHEMA)


def _runs_by_spark(flagged: Any, where: str) -> Any:
    """The runs of the predicate, evaluated by Spark on its rows."""
    try:
        with _quiet_query_context():
            return flagged.mapInArrow(matched_runs, RUNS_DDL).limit(MAX_RUNS + 1).toArrow()
    except SparkKafkaBackupError:
        raise
    except Exception as exc:
        from spark_kafka_backup.spark.failures import failure_cause

        condition = _error_condition(exc)
        if condition is None:  # not the predicate's: the data source's own error, or Spark's
            raise SparkKafkaBackupError(
                f"--where: Spark could not evaluate {where!r} on the backup: {_flags(failure_cause(exc))}"
            ) from exc
        raise UsageError(
            f"--where {where!r} failed on the backup's records with Spark's error {condition}: {_first_line(exc)} "
            "(the predicate must give true, false or null for every record)"
        ) from exc


def _checked_runs(scope: MatchScope, table: Any) -> dict[tuple[str, int], MatchedRuns]:
    """The runs per partition, each cut where a segment left out as damaged lies inside it and checked against the
    segment indexes: a run holds exactly the records the scan saw matching."""
    found: dict[tuple[str, int], MatchedRuns] = {}
    if table.num_rows == 0:
        return found
    keys = load_keys(scope.key_sources)  # a time window's count reads sealed records' timestamps
    topics = np.array(table.column("topic").to_pylist(), dtype=object)
    partitions = table.column("partition").to_numpy()
    firsts = table.column("first").to_numpy()
    lasts = table.column("last").to_numpy()
    records = table.column("records").to_numpy()
    for topic in sorted(set(topics.tolist())):
        of_topic = topics == topic
        for partition in sorted(set(partitions[of_topic].tolist())):
            rows = of_topic & (partitions == partition)
            order = np.argsort(firsts[rows], kind="stable")
            runs = MatchedRuns(firsts[rows][order], lasts[rows][order], scope.where,
                               records=int(records[rows].sum()))  # fmt: skip
            reader = PartitionReader(scope.source / topic, partition, legacy=scope.legacy, keys=keys)
            left_out = (
                bad_segments(scope.source, topic, partition, legacy=scope.legacy, keys=keys)
                if scope.skip_bad_segments
                else []
            )
            runs = runs.without([(bad.first_offset, bad.last_offset) for bad in left_out])
            # The scan saw the records of the time window only: a run may bridge records outside it.
            seen = Window(from_time=scope.from_time, to_time=scope.to_time, matched=runs,
                          skip_segments=frozenset(bad.name for bad in left_out))  # fmt: skip
            if count_selected(reader, seen) != runs.records:
                raise SparkKafkaBackupError(
                    f"--where: topic {topic!r} partition {partition}: the records matched ({runs.records}) are not "
                    "the records the backup's indexes hold in their runs: the backup changed while it was read "
                    "(a merge, a prune, an erase or a repair); run it again"
                )
            found[(topic, partition)] = runs
    return found


def _flagged(rows: Any, where: str) -> Any:
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
    analyzed = flagged._jdf.queryExecution().analyzed()
    source = rows._jdf.queryExecution().analyzed()
    names, undetermined = _expression_nodes(analyzed.expressions())
    other_rows = sorted(set(names) & set(_OTHER_ROWS))
    over_rows = analyzed.getClass().getSimpleName() == "Project" and analyzed.child().sameResult(source)
    if other_rows or not over_rows:
        named = ", ".join(other_rows) or "a window or aggregate"
        raise UsageError(
            f"--where {where!r} reads other records than the one it is evaluated on ({named}): a predicate of one "
            "record at a time (its key, value, headers, time, offset)"
        )
    moments = sorted(set(names) & set(_MOMENT))
    if undetermined or moments:
        raise UsageError(
            f"--where {where!r} may hold for other records on another run ({', '.join(moments + undetermined)}): a "
            "restore run again after a stop must select the same records"
        )
    return flagged


def _referenced_columns(flagged: Any) -> frozenset[str] | None:
    """The columns of the rows the flags read (their projection's attributes), ``None`` when all are."""
    from spark_kafka_backup.datasource.scan_options import ROW_COLUMNS

    expressions = flagged._jdf.queryExecution().analyzed().expressions()
    names = {
        str(node.name()) for node in _nodes(expressions) if node.getClass().getSimpleName() == "AttributeReference"
    }
    read = frozenset(names) & frozenset(ROW_COLUMNS)
    return None if read >= frozenset(ROW_COLUMNS) else read


def _expression_nodes(expressions: Any) -> tuple[list[str], list[str]]:
    """The class names of every node under ``expressions`` (a Scala sequence of the JVM's expressions), and those of
    the nodes Spark calls nondeterministic."""
    names: list[str] = []
    undetermined: list[str] = []
    for node in _nodes(expressions):
        name = node.getClass().getSimpleName()
        names.append(name)
        children = _sequence(node.children())
        # The node that makes its parents nondeterministic: not deterministic, its children all are.
        if not node.deterministic() and all(child.deterministic() for child in children):
            undetermined.append(name)
    return names, sorted(set(undetermined))


def _nodes(expressions: Any) -> Iterator[Any]:
    """Every node of the trees of ``expressions`` (a Scala sequence of the JVM's expressions), roots included."""
    pending = _sequence(expressions)
    while pending:
        node = pending.pop()
        yield node
        pending.extend(_sequence(node.children()))


def _sequence(items: Any) -> list[Any]:
    """A Scala sequence's items."""
    return [items.apply(i) for i in range(items.size())]


def _flags(text: str) -> str:
    """The data source's words for its options, in the restore's flags."""
    return in_flag_words(text).replace(
        "verify=false reads what the files hold", "the restore reads nothing it cannot check"
    )


@contextlib.contextmanager
def _quiet_query_context() -> Iterator[None]:
    """PySpark logs an error it raises with a query context (the predicate's text) itself, on standard error: the
    refusal is the one line said about it."""
    from pyspark.logger import PySparkLogger

    # PySpark's own logger class: it logs the error with keywords of its own (errorClass=...), which a plain logger
    # made by logging.getLogger first would refuse, raising in place of the error.
    loggers = [PySparkLogger.getLogger(name) for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger")]
    kept = [logger.disabled for logger in loggers]
    for logger in loggers:
        logger.disabled = True
    try:
        yield
    finally:
        for logger, disabled in zip(loggers, kept, strict=True):
            logger.disabled = disabled


def _error_condition(exc: BaseException) -> str | None:
    """The SQL error class (Spark's "condition", e.g. ``CAST_INVALID_INPUT``) of an error Spark raised evaluating the
    predicate; ``None`` for an error of a Python worker (the data source's) or without one."""
    from pyspark.errors import PySparkException

    if not isinstance(exc, PySparkException):
        return None
    condition = exc.getCondition()
    if not condition or condition.startswith("PYTHON_") or "PythonException" in type(exc).__name__:
        return None
    # An error of an expression's evaluation points into the query (the predicate); a cancelled job, a lost executor
    # or a task's write does not.
    return condition if exc.getQueryContext() else None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
