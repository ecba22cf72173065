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

from collections.abc import Callable
from pathlib import Path
from typing import Any

from spark_kafka_backup.spark.backup_files import writes_from_batch
from spark_kafka_backup.spark.v1_sink import record_schema_ids, report_batch
from spark_kafka_backup.storage import parse_location


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
