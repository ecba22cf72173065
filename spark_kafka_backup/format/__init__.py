"""Codecs of the kafka-backup v1 files: pure functions over bytes, no file access.

- :mod:`~spark_kafka_backup.format.record`: one record of a segment records file
- :mod:`~spark_kafka_backup.format.segment_index`: a segment index file
- :mod:`~spark_kafka_backup.format.partition_index`: a partition index file
- :mod:`~spark_kafka_backup.format.consumer_offsets`: a consumer offsets JSON file
- :mod:`~spark_kafka_backup.format.naming`: file names
- :mod:`~spark_kafka_backup.format.magic`: the v1 magic byte
"""

from spark_kafka_backup.format.record import Header, Record, TimestampType

__all__ = ["Header", "Record", "TimestampType"]
