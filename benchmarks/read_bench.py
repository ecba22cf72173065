"""Read benchmark: the ``kbackup`` Spark data source beside ``cat`` and the restore's reader, on one backup.

Run from the repository root: ``./dev bench read`` (or ``python -m benchmarks.read_bench``).

A backup of N records (default 1,000,000; 100-byte values, small keys, one header; 4 partitions; a catalog) is
written with the format library; then, in the same invocation, each reader reads all of it:

- ``cat``: ``spark-kafka-backup cat ROOT > /dev/null``, one process, JSON lines (checksums checked first);
- ``reader``: the restore's read path in one Python process, what a restore task does before it produces: each
  partition's segments in columnar batches (:meth:`PartitionReader.record_batches`) turned into the producer's Arrow
  columns (:func:`~spark_kafka_backup.partition.segment_batches.produce_columns`); checksums checked first, as a
  task checks them;
- ``source``: ``spark.read.format("kbackup").load(ROOT)`` in a ``local[2]`` session, every column of every row
  read and handed to Spark (``write.format("noop")``); end to end (JVM and Python worker start-up included), and
  the query alone, twice (the first starts the executors' Python workers);
- ``pruned``: one partition and one hour of it (the reader's options) through the same session, the query alone.

Printed: records/s (MB/s of value bytes), the ratios source / cat and source / reader, CPU seconds per million
records and the peak resident memory of each one's whole process tree (:mod:`benchmarks.process_tree`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.process_tree import TreeUsage, measure
from spark_kafka_backup.catalog.ledger import CatalogLedger
from spark_kafka_backup.format.record import Record
from spark_kafka_backup.partition.writer import PartitionWriter
from spark_kafka_backup.spark_submit import job_environment

REPO = Path(__file__).resolve().parent.parent
#: Records per hour of timestamps in the backup (the pruned query reads one hour of one partition).
PER_HOUR = 100_000

READER = """
import json, sys, time
from pathlib import Path
from spark_kafka_backup.catalog.integrity import bad_segments
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.segment_batches import produce_columns
root, partitions = Path(sys.argv[1]), int(sys.argv[2])
start = time.perf_counter()
rows = 0
for p in range(partitions):
    assert not bad_segments(root, "bench", p)
    for batch in PartitionReader(root / "bench", p).record_batches():
        rows += produce_columns(batch).num_rows
print(json.dumps([time.perf_counter() - start, rows]))
"""

SOURCE = """
import json, sys, time
from pyspark.sql import SparkSession
from spark_kafka_backup.datasource import register
root, hour_from = sys.argv[1], int(sys.argv[2])
spark = SparkSession.builder.master("local[2]").config("spark.log.level", "ERROR").getOrCreate()
register(spark)
timings = []
for _ in range(2):
    start = time.perf_counter()
    spark.read.format("kbackup").load(root).write.format("noop").mode("overwrite").save()
    timings.append(time.perf_counter() - start)
hour_to = hour_from + 3_600_000 - 1
for _ in range(2):
    start = time.perf_counter()
    hour = {"partitions": "1", "fromTimestamp": str(hour_from), "toTimestamp": str(hour_to)}
    rows = spark.read.format("kbackup").options(**hour).load(root).count()
    timings.append(time.perf_counter() - start)
print(json.dumps([*timings, rows]))
spark.stop()
"""


def write_backup(root: Path, count: int, partitions: int, value_size: int) -> int:
    """The backup; returns the timestamp its records start at (``PER_HOUR`` records per hour, over all partitions)."""
    value = (b"0123456789abcdef" * (value_size // 16 + 1))[:value_size]
    header = (("trace-id", b"0123456789abcdef"),)
    start = (int(time.time() * 1000) // 3_600_000 - 48) * 3_600_000
    ledger = CatalogLedger(root)
    writers = [PartitionWriter(root / "bench", "bench", p, fsync=False, ledger=ledger) for p in range(partitions)]
    for i in range(count):
        stamp = start + i * 3_600_000 // PER_HOUR
        writers[i % partitions].append(Record(i // partitions, 0, stamp, b"key-%07d" % i, value, header))
    for writer in writers:
        writer.close()
    return start


def _line(name: str, records: int, seconds: float, value_bytes: int, usage: TreeUsage | None) -> str:
    rate = records / seconds
    text = f"{name:<22} {rate:>12,.0f} records/s {value_bytes / seconds / 1e6:>8.1f} MB/s"
    if usage is not None:
        text += f"   CPU {usage.per_million(records):6.2f} s/M   peak RSS {usage.peak_rss_mib:7.0f} MiB"
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--value-size", type=int, default=100)
    args = parser.parse_args()
    env = {**job_environment(), "PYTHONPATH": str(REPO)}
    with tempfile.TemporaryDirectory(prefix="kbackup-read-bench-") as tmp:
        root = Path(tmp) / "backup"
        start = write_backup(root, args.records, args.partitions, args.value_size)
        value_bytes = args.records * args.value_size

        cat_usage, _ = measure(["/bin/sh", "-c", f'"{sys.executable}" -m spark_kafka_backup cat "{root}" > /dev/null'],
                               env=env)  # fmt: skip
        if cat_usage.returncode != 0:
            raise SystemExit("cat failed")
        reader_usage, output = measure([sys.executable, "-c", READER, str(root), str(args.partitions)], env=env,
                                       capture=True)  # fmt: skip
        reader_seconds, reader_rows = json.loads(output.strip().splitlines()[-1])
        hour_from = start + 3_600_000 * (args.records // PER_HOUR // 2)
        source_usage, output = measure([sys.executable, "-c", SOURCE, str(root), str(hour_from)], env=env,
                                       capture=True)  # fmt: skip
        if source_usage.returncode != 0:
            raise SystemExit(f"the data source failed:\n{output[-3000:]}")
        whole, again, pruned_seconds, pruned_again, pruned_rows = json.loads(output.strip().splitlines()[-1])
    assert reader_rows == args.records, reader_rows
    n = args.records
    print(
        f"{n:,} records of {args.value_size} B in {args.partitions} partitions; Spark local[2]; {os.cpu_count()} CPUs"
    )
    print(_line("cat", n, cat_usage.wall_seconds, value_bytes, cat_usage))
    print(_line("restore's reader", n, reader_seconds, value_bytes, reader_usage))
    print(_line("source, end to end", n, source_usage.wall_seconds, value_bytes, source_usage))
    print(_line("source, first query", n, whole, value_bytes, None))
    print(_line("source, second query", n, again, value_bytes, None))
    print(f"source / cat: {cat_usage.wall_seconds / again:.2f}x (second query), "
          f"{cat_usage.wall_seconds / whole:.2f}x (first query), "
          f"{cat_usage.wall_seconds / source_usage.wall_seconds:.2f}x (end to end); "
          f"source / reader: {reader_seconds / again:.2f}x (second query)")  # fmt: skip
    print(f"pruned (partition 1, one hour: {pruned_rows:,} rows): {pruned_seconds:.2f} s, then {pruned_again:.2f} s "
          "(the query alone)")  # fmt: skip


if __name__ == "__main__":
    main()
