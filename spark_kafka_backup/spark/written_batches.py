"""Committing the backup's micro-batches in the job's own process, behind a source whose tasks wrote the files.

Behind spark-kafka-backup's source given ``writeTo`` (:mod:`spark_kafka_backup.spark.kafka_task`), a micro-batch's
rows are the tasks' reports, one per partition written (:data:`~spark_kafka_backup.spark.backup_files.WRITES_SCHEMA`);
the records themselves never leave the tasks. Committing such a batch is reading those few rows and saying what they
wrote, which needs no sink of Python workers of its own: the job hands Spark :func:`commit_written_batches` through
``foreachBatch``, and Spark calls it in the driver's Python process with each micro-batch. Spark's Python sink would
cost a daemon, its workers and a commit runner (separate Python processes importing PySpark and pyarrow) for the same.

Exactly once as behind the ``kbackup_v1`` sink: collecting the rows runs the batch's tasks, which place every record
by its offset and sync each partition before they report; Spark records the batch in its checkpoint only after the
function returns, so a batch it replays after a crash finds its records stored and skips them.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spark_kafka_backup.spark.backup_files import writes_from_batch
from spark_kafka_backup.spark.v1_sink import record_schema_ids, report_batch
from spark_kafka_backup.storage import parse_location

#: What a batch raises when the query was stopped under it. Spark's stream thread tells a stop from a failure by
#: matching the text Python hands back through Py4J against the Py4J error of an interrupted call (``Py4JJavaError: An
#: error occurred while calling`` ... ``java.lang.InterruptedException``), with a pattern that recurses once per
#: character: on the whole traceback of a cancelled job (its Java stack trace included) the stream thread died of
#: ``StackOverflowError``. This text says the same in one short line.
INTERRUPTED_BATCH = (
    "py4j.protocol.Py4JJavaError: An error occurred while calling the batch function of batch {batch}: "
    "java.lang.InterruptedException (the query was stopped; the batch is read again at the next start)"
)


class BatchInterrupted(Exception):  # noqa: N818 (the name says what happened, as Spark's InterruptedException)
    """The query was stopped while a batch ran (see :data:`INTERRUPTED_BATCH`)."""


#: How a Spark call stopped under a stop fails: its job cancelled with the query's job group, or its thread
#: interrupted (Py4J's text of the Java error begins its second line with the Java exception).
_STOPPED = re.compile(
    r"Job \d+ cancelled part of cancelled job group"
    r"|^: java\.(?:lang\.InterruptedException|io\.InterruptedIOException|nio\.channels\.ClosedByInterruptException)",
    re.M,
)


def stopped_under(error: BaseException) -> bool:
    """Whether a Spark call failed because the query was stopped: its job cancelled, or its thread interrupted."""
    return _STOPPED.search(str(error)) is not None


def run_batch(run: Callable[[], None], batch_id: int, stopping: threading.Event) -> None:
    """``run`` one batch; a failure once the job is ``stopping`` (or one Spark's stop caused) is
    :class:`BatchInterrupted`, raised outside the handler so that no long traceback of its cause goes with it."""
    try:
        run()
        return
    except Exception as exc:
        if not (stopping.is_set() or stopped_under(exc)):
            raise
    raise BatchInterrupted(INTERRUPTED_BATCH.format(batch=batch_id))


def foreach_batch(writer: Any, spark: Any, func: Callable[[Any, int], None], stopping: threading.Event) -> Any:
    """``writer.foreachBatch(func)``, with PySpark's wrapper of ``func`` (``ForeachBatchFunction``, what the JVM calls
    back) extended so that every failure of a batch stopped under it, also in PySpark's own calls before ``func``,
    goes through :func:`run_batch`. The registration is PySpark's own (``DataStreamWriter.foreachBatch``)."""
    from py4j.java_gateway import java_import  # type: ignore[import-untyped]
    from pyspark.java_gateway import ensure_callback_server_started
    from pyspark.sql.utils import ForeachBatchFunction

    class StoppableBatches(ForeachBatchFunction):
        def call(self, jdf: Any, batch_id: int) -> None:
            run_batch(lambda: super(StoppableBatches, self).call(jdf, batch_id), batch_id, stopping)

    gateway = spark.sparkContext._gateway
    java_import(gateway.jvm, "org.apache.spark.sql.execution.streaming.sources.*")
    gateway.jvm.PythonForeachBatchHelper.callForeachBatch(writer._jwrite, StoppableBatches(spark, func))
    ensure_callback_server_started(gateway)  # type: ignore[no-untyped-call]
    return writer


def commit_written_batches(
    root: str, stats_dir: Path | None, *, schema_ids: bool = False
) -> Callable[[Any, int], None]:
    """The ``foreachBatch`` function of a backup into ``root`` whose source's tasks write the files (``writeTo``
    ``root``): runs each batch, then reports what it wrote (:func:`~spark_kafka_backup.spark.v1_sink.report_batch`)
    and, with ``schema_ids``, adds the schema ids its records name to the backup's list
    (:func:`~spark_kafka_backup.spark.v1_sink.record_schema_ids`) before Spark records the batch."""

    def commit(frame: Any, batch_id: int) -> None:
        table = frame.toArrow()
        writes = [write for batch in table.to_batches() for write in writes_from_batch(batch, root)]
        report_batch(batch_id, writes, stats_dir)
        if schema_ids:
            record_schema_ids(parse_location(root), writes)

    return commit
