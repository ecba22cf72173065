"""The ``kbackup`` Spark data source: a backup's records as the rows of Spark's Kafka source (batch reads).

::

    from spark_kafka_backup.datasource import register
    register(spark)
    df = spark.read.format("kbackup").option("topics", "orders").load("/backups/prod")

The classes here are what Spark pickles: the reader holds the typed options and the bounds of the pushed filters,
:meth:`BackupReader.partitions` plans on the driver (:mod:`spark_kafka_backup.datasource.scan_plan`) and
:meth:`BackupReader.read` reads one task's segments on an executor
(:mod:`spark_kafka_backup.datasource.segment_scan`); each imports its side's module only when called.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, Filter, InputPartition

from spark_kafka_backup.datasource.kafka_rows import KAFKA_ROWS_DDL, KAFKA_ROWS_SIMPLE
from spark_kafka_backup.datasource.scan_bounds import ScanBounds, scan_bounds
from spark_kafka_backup.datasource.scan_options import scan_options
from spark_kafka_backup.errors import UsageError

#: The format name: ``spark.read.format(FORMAT)``.
FORMAT = "kbackup"
#: Spark refuses a reader that takes filters unless this is true (it is false by default).
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


class _ScanPartition(InputPartition):
    """A :class:`~spark_kafka_backup.datasource.segment_scan.SegmentScan` as Spark's input partition."""

    def __init__(self, scan: Any) -> None:
        super().__init__(scan)


class BackupReader(DataSourceReader):
    """Reads a backup without taking the query's filters (when the session turned filter pushdown off)."""

    def __init__(self, options: dict[str, str]) -> None:
        self.options = scan_options(options)
        self.bounds = ScanBounds()

    def partitions(self) -> Sequence[InputPartition]:
        from spark_kafka_backup.datasource.scan_plan import plan_scans

        scans = plan_scans(self.options, self.bounds)
        # Spark needs at least one partition: an empty one reads nothing.
        return [_ScanPartition(scan) for scan in scans] or [_ScanPartition(None)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from spark_kafka_backup.datasource.segment_scan import read_scan

        if partition.value is not None:
            yield from read_scan(partition.value)


class FilteringBackupReader(BackupReader):
    """Reads a backup, pruning segments by the query's filters on topic, partition, offset and timestamp; every
    filter is given back to Spark, which checks it on the rows (so pruning only has to be safe)."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        self.bounds = scan_bounds(filters)
        return list(filters)


class BackupDataSource(DataSource):
    """``spark.read.format("kbackup").load(ROOT)``: the records of a spark-kafka-backup (or kafka-backup) backup."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return KAFKA_ROWS_DDL

    def reader(self, schema: Any) -> DataSourceReader:
        _check_schema(schema)
        return FilteringBackupReader(dict(self.options))


class UnfilteredBackupDataSource(BackupDataSource):
    """The same source for a session whose filter pushdown is off (its reader takes no filters)."""

    def reader(self, schema: Any) -> DataSourceReader:
        _check_schema(schema)
        return BackupReader(dict(self.options))


def _check_schema(schema: Any) -> None:
    """A schema the user gave (``spark.read.schema(...)``) must be the source's own: the rows have no other."""
    shown = schema.simpleString() if hasattr(schema, "simpleString") else str(schema)
    if shown != KAFKA_ROWS_SIMPLE:
        raise UsageError(
            f"kbackup data source: its rows have the schema {KAFKA_ROWS_SIMPLE}, not {shown} (leave out .schema(...); "
            "select or cast columns after loading)"
        )


def register(spark: Any) -> None:
    """Make ``spark.read.format("kbackup")`` read backups in this session.

    Filter pushdown (segments pruned by a query's filters) needs ``spark.sql.python.filterPushdown.enabled``: it is
    turned on unless the session set it to false, in which case the source reads without it. Which of the two is
    decided here: a session that changes the setting afterwards calls ``register`` again.
    """
    setting = spark.conf.get(PUSHDOWN_CONF, None)
    if setting is not None and setting.strip().lower() == "false":
        spark.dataSource.register(UnfilteredBackupDataSource)
        return
    spark.conf.set(PUSHDOWN_CONF, "true")
    spark.dataSource.register(BackupDataSource)
