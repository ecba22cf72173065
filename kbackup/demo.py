"""``./dev demo``: write a sample backup with the format library and look inside it.

Until the Spark backup job lands (issue 3), the demo cannot back up a broker;
it writes a small backup the way the job will (a crash-safe writer per
partition, consumer offsets beside it), then runs ``kbackup ls``,
``kbackup offsets`` and the first records of ``kbackup cat``.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from kbackup.format.record import Record, TimestampType
from kbackup.partition.offsets_file import write_consumer_offsets
from kbackup.partition.writer import PartitionWriter


def write_sample_backup(root: Path) -> None:
    """Two topics: 'orders' (3 partitions, headers, both timestamp types) and an empty 'audit'."""
    for partition in range(3):
        with PartitionWriter(root / "orders", "orders", partition, max_segment_size=4096) as writer:
            for i in range(100):
                offset = i * 2 if partition == 1 else i  # partition 1 has transaction-marker-like gaps
                writer.append(
                    Record(
                        offset=offset,
                        timestamp_type=TimestampType.LOG_APPEND_TIME if partition == 2 else TimestampType.CREATE_TIME,
                        timestamp=1_767_225_600_000 + i * 1000,
                        key=None if i % 10 == 0 else f"customer-{i % 7}".encode(),
                        value=f'{{"order": {i}, "partition": {partition}}}'.encode(),
                        headers=(("source", b"demo"), ("retry", None)) if i % 3 == 0 else (),
                    )
                )
        write_consumer_offsets(root / "orders", partition, {"billing": 100, "shipping": 40 + partition})
    with PartitionWriter(root / "audit", "audit", 0) as writer:
        writer.ensure_segment(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="demo-backup", help="where to write the sample backup")
    args = parser.parse_args()
    root = Path(args.target)
    shutil.rmtree(root, ignore_errors=True)
    write_sample_backup(root)
    print(f"wrote a sample backup to {root}/ (the Spark backup job arrives with issue 3)\n")
    for command in (
        ["ls", str(root)],
        ["offsets", str(root)],
        ["cat", str(root), "--topic", "orders", "--to-offset", "1"],
    ):
        print(f"$ kbackup {' '.join(command)}", flush=True)
        subprocess.run([sys.executable, "-m", "kbackup", *command], check=True)
        print()


if __name__ == "__main__":
    main()
