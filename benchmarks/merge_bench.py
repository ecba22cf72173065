"""``spark-kafka-backup merge``: how fast small segments become large ones, against copying the same bytes.

A partition of ``--segments`` small segments (what a backup on object storage leaves: one per micro-batch) of
``--records-per-segment`` records of ``--value-bytes`` random values is written with :class:`PartitionWriter` and
cataloged. Then, on a copy each:

- **baseline**: the records files concatenated with plain file copies (``shutil.copyfileobj`` into one file, fsynced),
  the least any merge has to do with the bytes;
- **merge**: :func:`spark_kafka_backup.catalog.merge.merge` into segments of ``--target-mib`` (checksums of every
  source checked against the catalog, merged records and index written and synced, partition index switched, catalog
  updated, old files deleted), then every record read back and compared with the records before.

Reported: plain MB/s of both and their ratio, segments before and after, and the peak RSS growth of the merge (it
streams: it must not grow with the partition).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path

import crc32c

from spark_kafka_backup.catalog.ledger import CatalogLedger
from spark_kafka_backup.catalog.merge import merge, plan_merge
from spark_kafka_backup.format.record import Record
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.writer import PartitionWriter


def _write(root: Path, segments: int, per_segment: int, value_bytes: int) -> int:
    """The partition ``t/0`` in about ``segments`` segments of ``per_segment`` records; returns its plain bytes."""
    size = per_segment * (value_bytes + 40)
    with PartitionWriter(root / "t", "t", 0, max_segment_size=size, fsync=False, ledger=CatalogLedger(root)) as w:
        for offset in range(segments * per_segment):
            w.append(Record(offset, 0, 1_700_000_000_000 + offset, b"key-%d" % offset, os.urandom(value_bytes)))
    return sum(path.stat().st_size for path in (root / "t").glob("*_records"))


def _digest(root: Path) -> tuple[int, int]:
    """Record count and a CRC32C of every record's bytes in order (streamed)."""
    records = value = 0
    for batch in PartitionReader(root / "t", 0).record_batches():
        records += len(batch)
        value = crc32c.crc32c(batch.data, value)
    return records, value


def _baseline(root: Path, into: Path) -> float:
    started = time.perf_counter()
    with open(into, "wb") as out:
        for path in sorted((root / "t").glob("*_records")):
            with open(path, "rb") as source:
                shutil.copyfileobj(source, out, 8 << 20)
        out.flush()
        os.fsync(out.fileno())
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--segments", type=int, default=2000)
    parser.add_argument("--records-per-segment", type=int, default=100)
    parser.add_argument("--value-bytes", type=int, default=500)
    parser.add_argument("--target-mib", type=int, default=32)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kbackup-merge-bench-"))
    try:
        root = work / "backup"
        plain = _write(root, args.segments, args.records_per_segment, args.value_bytes)
        before = _digest(root)
        count = len(PartitionReader(root / "t", 0).segments)
        base = _baseline(root, work / "concatenated")
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        started = time.perf_counter()
        groups = plan_merge(root, ["t"], max_segment_size=args.target_mib << 20)
        merge(root, groups)
        took = time.perf_counter() - started
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss
        assert _digest(root) == before, "records differ after the merge"
        mb = plain / 1e6
        print(f"{count} segments, {plain:,} plain bytes, {args.segments * args.records_per_segment:,} records")
        print(f"baseline concatenation: {base:.2f} s, {mb / base:.0f} MB/s")
        after = len(PartitionReader(root / "t", 0).segments)
        print(f"merge: {took:.2f} s, {mb / took:.0f} MB/s ({took / base:.1f}x the baseline's time), "
              f"{after} segments after, peak RSS +{grown / 1024:.0f} MiB")  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
