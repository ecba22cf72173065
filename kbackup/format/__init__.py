"""Codecs of the kafka-backup v1 files: pure functions over bytes, no file access.

- :mod:`~kbackup.format.record`: one record of a segment records file
- :mod:`~kbackup.format.segment_index`: a segment index file
- :mod:`~kbackup.format.partition_index`: a partition index file
- :mod:`~kbackup.format.consumer_offsets`: a consumer offsets JSON file
- :mod:`~kbackup.format.naming`: file names
- :mod:`~kbackup.format.magic`: the v1 magic byte
"""

from kbackup.format.record import Header, Record, TimestampType

__all__ = ["Header", "Record", "TimestampType"]
