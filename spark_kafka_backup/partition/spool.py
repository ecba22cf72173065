"""Local copies of segments on an object store, for a reader that reads each segment more than once (its checksum,
then its records): one download instead of a request per read. The spool directory is ``KBACKUP_SPOOL_DIR``
(default the system temporary directory); a copy is removed when its reader ends. Memory: one 8 MiB chunk per
download.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from spark_kafka_backup.format.naming import INDEX_SUFFIX, RECORDS_SUFFIX
from spark_kafka_backup.partition.object_writer import SPOOL_DIR_ENV
from spark_kafka_backup.storage import Location, ObjectPath, exists, read_chunks

CHUNK = 8 << 20


@contextlib.contextmanager
def staged_segments(topic_dir: Location, names: tuple[str, ...]) -> Iterator[Location]:
    """Where to read the segments ``names`` of ``topic_dir`` from: the directory itself on disk; on an object store a
    local copy of just those segments' files (no partition index), removed after."""
    if not isinstance(topic_dir, ObjectPath):
        yield topic_dir
        return
    spool = Path(tempfile.mkdtemp(prefix="spark-kafka-backup-scan-", dir=os.environ.get(SPOOL_DIR_ENV)))
    try:
        local = spool / topic_dir.name
        local.mkdir()
        for name in names:
            for suffix in (RECORDS_SUFFIX, INDEX_SUFFIX):
                # An object that is not there stays missing in the copy: the checksum check, or the read, names it.
                if exists(topic_dir / f"{name}{suffix}"):
                    download(topic_dir / f"{name}{suffix}", local / f"{name}{suffix}")
        yield local
    finally:
        shutil.rmtree(spool, ignore_errors=True)


def download(source: Location, destination: Path) -> None:
    """Copy one object to a local file in chunks."""
    with open(destination, "wb") as out:
        for chunk in read_chunks(source, CHUNK):
            out.write(chunk)
