"""Scale-out: the same snapshot backup on a Spark standalone cluster of 1 and of 2 workers (1 core each).

Run from the repository root: ``./dev bench scale`` (or ``python -m benchmarks.scale_bench``).

N records (default 2,000,000, 200-byte values, 4 partitions) are produced once into a local Apache Kafka node (or
``--bootstrap``). The raw baseline is the benchmark's one-process consume-and-encode loop
(``benchmarks.backup_bench``). Then, for each worker count in ``--workers`` (default ``1,2``), a fresh Spark
standalone cluster (:mod:`devkit.spark_cluster`: master and workers on loopback, one core each) runs
``spark-submit --master spark://... jobs/backup.py --snapshot`` into a fresh target.

Printed per worker count: records/s over the batches (start-up excluded) and end to end, the ratio to the raw
loop, and the speed-up over one worker. Kafka, the driver and the workers share the machine: with two cores,
two workers compete with the broker and the driver for them, which the speed-up shows as it is.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from benchmarks.backup_bench import TOPIC, BackupRun, produce, raw_consume_and_encode, run_backup
from benchmarks.cluster import add_arguments, cluster
from devkit.spark_cluster import SparkCluster
from spark_kafka_backup.partition.layout import list_partitions
from spark_kafka_backup.partition.reader import PartitionReader


def count_backed_up(target: Path) -> int:
    topic_dir = target / TOPIC
    return sum(
        len(batch) for p in list_partitions(topic_dir) for batch in PartitionReader(topic_dir, p).record_batches()
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    parser.set_defaults(records=2_000_000)
    parser.add_argument("--workers", default="1,2", help="worker counts to measure (comma-separated)")
    args = parser.parse_args()
    counts = [int(w) for w in args.workers.split(",")]

    runs: dict[int, BackupRun] = {}
    with tempfile.TemporaryDirectory() as tmp, cluster(args.bootstrap) as settings:
        produce(settings, args.records, args.partitions, args.value_size)
        raw_seconds, _, _ = raw_consume_and_encode(settings, args.records, args.partitions)
        for workers in counts:
            with SparkCluster(workers=workers, cores=1) as spark:
                print(f"spark: {spark.describe()}", flush=True)
                target = Path(tmp) / f"backup-{workers}"
                runs[workers] = run_backup(settings, target, "--topics", TOPIC, master=spark.master_url)
            held = count_backed_up(target)
            if held != args.records:
                raise SystemExit(f"the backup with {workers} worker(s) holds {held:,} records, not {args.records:,}")

    n, mb = args.records, args.records * args.value_size / 1e6
    print(f"{n:,} records, {args.value_size}-byte values, {args.partitions} partitions")
    print(f"raw consume+encode (one process) {n / raw_seconds:>10,.0f} records/s {mb / raw_seconds:7.1f} MB/s")
    first = counts[0]
    for workers, run in runs.items():
        wall, batch_seconds, startup = run.usage.wall_seconds, run.batch_seconds, run.startup_seconds
        driver_rss = run.usage.peak_rss_mib
        speedup = runs[first].batch_seconds / batch_seconds
        print(
            f"{workers} worker(s), batches     {n / batch_seconds:>10,.0f} records/s {mb / batch_seconds:7.1f} MB/s  "
            f"ratio {raw_seconds / batch_seconds:5.2f}  speed-up over {first}: {speedup:4.2f}"
        )
        print(
            f"{workers} worker(s), end to end  {n / wall:>10,.0f} records/s  start-up {startup:5.1f} s  "
            f"driver peak {driver_rss:6.0f} MiB"
        )


if __name__ == "__main__":
    main()
