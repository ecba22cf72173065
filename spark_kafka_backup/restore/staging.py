"""Where a restore task reads a partition from: the backup itself, or a local copy of what it needs.

On disk the task reads the backup's own files. On an object store every
read is a request, and the task reads each segment twice (the CRC32C check
before producing anything, then the records), so it first downloads, once,
the partition index and every segment its window reads into a local spool
directory (``KBACKUP_SPOOL_DIR``, default the system temporary directory),
checks the copies, produces from them and removes them when it ends. Only the
copied segments are checked: the driver has already refused a partition whose
index lost a segment the catalog names.

Disk: the spool holds the selected segments of the partitions being
restored at the same time (one per running task). Memory: one 8 MiB chunk
per download.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from spark_kafka_backup.format.naming import INDEX_SUFFIX, RECORDS_SUFFIX
from spark_kafka_backup.partition.layout import partition_index_path
from spark_kafka_backup.partition.object_writer import SPOOL_DIR_ENV
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.selection import Window
from spark_kafka_backup.partition.spool import download
from spark_kafka_backup.storage import Location, ObjectPath, as_local


@dataclass(frozen=True)
class Staged:
    """Where to read a partition: ``topic_dir``, holding only the segments ``names`` when it is a local copy."""

    topic_dir: Location
    names: frozenset[str] | None = None


@contextlib.contextmanager
def staged_topic_dir(source_dir: Location, partition: int, window: Window, *, legacy: bool) -> Iterator[Staged]:
    """Where to read ``partition`` from (see the module docstring); a local copy is removed after."""
    if not isinstance(source_dir, ObjectPath):
        yield Staged(source_dir)
        return
    spool = Path(tempfile.mkdtemp(prefix="spark-kafka-backup-restore-", dir=os.environ.get(SPOOL_DIR_ENV)))
    try:
        local = spool / source_dir.name
        local.mkdir()
        download(partition_index_path(source_dir, partition), as_local(partition_index_path(local, partition)))
        segments = PartitionReader(source_dir, partition, legacy=legacy).segments
        names = set()
        for number, segment in enumerate(segments):
            following = segments[number + 1].start_offset if number + 1 < len(segments) else None
            if segment.name in window.skip_segments:
                continue
            if window.from_offset is not None and following is not None and following <= window.from_offset:
                continue  # wholly below the window
            if window.to_offset is not None and segment.start_offset > window.to_offset:
                break
            for suffix in (RECORDS_SUFFIX, INDEX_SUFFIX):
                download(source_dir / f"{segment.name}{suffix}", local / f"{segment.name}{suffix}")
            names.add(segment.name)
        yield Staged(local, frozenset(names))
    finally:
        shutil.rmtree(spool, ignore_errors=True)
