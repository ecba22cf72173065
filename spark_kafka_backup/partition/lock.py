"""The partition writer's lock: an exclusive ``flock`` on the partition index file.

One writer per partition at a time (a backup's task, a merge, a prune). ``flock`` is reliable on local disks only.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from spark_kafka_backup.errors import PlacementError
from spark_kafka_backup.storage.local import check_inside


def lock_partition_index(path: Path, *, timeout: float, topic: str, partition: int) -> int:
    """Open the partition index and take its ``flock``; the open descriptor (closing it unlocks).

    Waits up to ``timeout`` seconds for another holder (a writer, or a prune
    updating the partition). A prune replaces the file by renaming a new one
    into place while it holds the lock, so a lock won on a file no longer at
    ``path`` is dropped and taken again on the current one.
    """
    deadline = time.monotonic() + timeout
    while True:
        check_inside(path)
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError as exc:
                if time.monotonic() < deadline:
                    time.sleep(0.05)
                    continue
                os.close(fd)
                raise PlacementError(
                    "partition is already open for writing by another writer",
                    topic=topic,
                    partition=partition,
                    offset=-1,
                ) from exc
        held = os.fstat(fd)
        try:
            current = os.stat(path)
        except FileNotFoundError:
            current = None
        if current is not None and (current.st_ino, current.st_dev) == (held.st_ino, held.st_dev):
            return fd
        os.close(fd)  # replaced while we waited: lock the new one
