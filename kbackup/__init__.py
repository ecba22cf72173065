"""kbackup: backup and restore of Apache Kafka topics in the kafka-backup v1 format.

The format codecs live in :mod:`kbackup.format` (pure, bytes in and out), the
on-disk partition reader and crash-safe writer in :mod:`kbackup.partition`,
errors in :mod:`kbackup.errors`.
"""

__version__ = "0.1.0"
