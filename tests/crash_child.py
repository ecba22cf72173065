"""Child process for the SIGKILL tests: appends records, printing each synced index.

Usage: python -m tests.crash_child TOPIC_DIR FROM_INDEX COUNT SYNC_EVERY MAX_SEGMENT BUFFER [KILL_AT]

Prints ``resumed <last_offset>`` after opening, then ``acked <i>`` each time
records up to index ``i`` are synced, then ``done``.

With ``KILL_AT = n`` the process SIGKILLs itself at its n-th file system call
(write, pwrite, fsync, ftruncate, replace) after opening; a dying ``write``
first writes half of its bytes, as a torn write would. With the environment
variable ``KBACKUP_TEST_CATALOG`` set, the writer also maintains the catalog; with
``KBACKUP_TEST_COMPRESSION=CODEC`` it compresses finished segments.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spark_kafka_backup.catalog.ledger import CatalogLedger
from spark_kafka_backup.partition.writer import PartitionWriter
from tests.recordgen import sample_record


def arm_kill(kill_at: int, names: tuple[str, ...] = ("write", "pwrite", "fsync", "ftruncate", "replace")) -> None:
    """SIGKILL this process at its ``kill_at``-th call of the ``os`` functions named (a dying write writes half)."""
    calls = 0

    def wrap(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def dying(*args: Any, **kwargs: Any) -> Any:
            nonlocal calls
            calls += 1
            if calls == kill_at:
                if name == "write":
                    fd, data = args
                    real(fd, bytes(data)[: len(data) // 2])
                os.kill(os.getpid(), signal.SIGKILL)
            return real(*args, **kwargs)

        return dying

    for name in names:
        setattr(os, name, wrap(name, getattr(os, name)))


def main() -> None:
    topic_dir, start, count, sync_every, max_segment, buffer = sys.argv[1:7]
    ledger = CatalogLedger(Path(topic_dir).parent) if os.environ.get("KBACKUP_TEST_CATALOG") else None
    writer = PartitionWriter(
        Path(topic_dir),
        "crash",
        0,
        max_segment_size=int(max_segment),
        buffer_size=int(buffer),
        ledger=ledger,
        compression=os.environ.get("KBACKUP_TEST_COMPRESSION") or None,
    )
    print(f"resumed {writer.last_offset}", flush=True)
    if len(sys.argv) > 7:
        arm_kill(int(sys.argv[7]))
    for i in range(int(start), int(count)):
        writer.append(sample_record(i))
        if (i + 1) % int(sync_every) == 0:
            writer.sync()
            print(f"acked {i}", flush=True)
    writer.close()
    print("done", flush=True)


if __name__ == "__main__":
    main()
