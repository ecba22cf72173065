"""The ``kbackup`` Spark data source: a backup's records as the rows of Spark's Kafka source (batch reads).

::

    from spark_kafka_backup.datasource import register
    register(spark)
    df = spark.read.format("kbackup").option("topics", "orders").load("/backups/prod")

The classes here are what Spark pickles: the reader holds the typed options, :meth:`BackupReader.partitions` plans
on the driver (:mod:`spark_kafka_backup.datasource.scan_plan`) and :meth:`BackupReader.read` reads one task's
segments on an executor (:mod:`spark_kafka_backup.datasource.segment_scan`); each imports its side's module only when
called.

What a scan reads is decided by the options alone, never by a query's filters. PySpark (seen in 4.3.0) keeps the plan
it got from a reader's ``pushFilters`` on the DataFrame's source object and hands that same plan to every later scan
of the DataFrame (or of a view over it) whose filters it does not push: a query without a filter, with an ``OR``, or
another branch of the same query. A reader that pruned by one query's filters would answer the next query with the
first one's segments. So this reader takes no filter (Spark checks every filter on the rows), and every scan of one
DataFrame plans the same segments; the options (``topics``, ``partitions``, ``fromOffset``... ``toTimestamp``) are
fixed when the DataFrame is loaded, and prune safely.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from spark_kafka_backup.datasource.kafka_rows import KAFKA_ROWS_DDL, KAFKA_ROWS_SIMPLE
from spark_kafka_backup.datasource.scan_options import in_option_words, scan_options
from spark_kafka_backup.errors import SparkKafkaBackupError, UsageError

#: The format name: ``spark.read.format(FORMAT)``.
FORMAT = "kbackup"


class _ScanPartition(InputPartition):
    """A :class:`~spark_kafka_backup.datasource.segment_scan.SegmentScan` as Spark's input partition."""

    def __init__(self, scan: Any) -> None:
        super().__init__(scan)


class BackupReader(DataSourceReader):
    """Reads the segments the options select; takes none of a query's filters (module docstring)."""

    def __init__(self, options: dict[str, str]) -> None:
        self.options = scan_options(options)

    def partitions(self) -> Sequence[InputPartition]:
        from spark_kafka_backup.datasource.scan_plan import plan_scans

        with _option_words():
            scans = plan_scans(self.options)
        # Spark needs at least one partition: an empty one reads nothing.
        return [_ScanPartition(scan) for scan in scans] or [_ScanPartition(None)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from spark_kafka_backup.datasource.segment_scan import read_scan

        if partition.value is not None:
            with _option_words():
                yield from read_scan(partition.value)


class BackupDataSource(DataSource):
    """``spark.read.format("kbackup").load(ROOT)``: the records of a spark-kafka-backup (or kafka-backup) backup."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return KAFKA_ROWS_DDL

    def reader(self, schema: Any) -> DataSourceReader:
        _check_schema(schema)
        return BackupReader(dict(self.options))


@contextlib.contextmanager
def _option_words() -> Iterator[None]:
    """Errors raised while planning or reading, in the data source's words: the library names the jobs' flags
    (``--encryption-key-file``), a reader sets options (``encryptionKeyFile``)."""
    try:
        yield
    except SparkKafkaBackupError as exc:
        reworded = in_option_words(str(exc))
        if reworded == str(exc):
            raise
        # Not copy.copy: it calls the class with the args alone, which fails for errors of keyword-only fields.
        translated = type(exc).__new__(type(exc))
        translated.__dict__.update(exc.__dict__)
        translated.args = (reworded,)
        raise translated from exc


def _check_schema(schema: Any) -> None:
    """A schema the user gave (``spark.read.schema(...)``) must be the source's own: the rows have no other."""
    shown = schema.simpleString() if hasattr(schema, "simpleString") else str(schema)
    if shown != KAFKA_ROWS_SIMPLE:
        raise UsageError(
            f"kbackup data source: its rows have the schema {KAFKA_ROWS_SIMPLE}, not {shown} (leave out .schema(...); "
            "select or cast columns after loading)"
        )


def register(spark: Any) -> None:
    """Make ``spark.read.format("kbackup")`` read backups in this session (the session's settings are left as they
    are: with Python filter pushdown on or off, the source reads the same rows)."""
    spark.dataSource.register(BackupDataSource)
