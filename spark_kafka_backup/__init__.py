"""spark-kafka-backup: backup and restore of Apache Kafka topics in the kafka-backup v1 format.

The format codecs live in :mod:`spark_kafka_backup.format` (pure, bytes in and out), the
on-disk partition reader and crash-safe writer in :mod:`spark_kafka_backup.partition`,
errors in :mod:`spark_kafka_backup.errors`.
"""

__version__ = "0.1.0"

# In a job's processes (KBACKUP_WITHOUT_PANDAS=1), before anything imports pyarrow: no pandas.
from spark_kafka_backup import arrow_runtime as _arrow_runtime  # noqa: F401
