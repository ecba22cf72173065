"""Scale-out: the same snapshot backup and restore on a Spark standalone cluster of 1 and of 2 workers (1 core each).

Run from the repository root: ``./dev bench scale`` (or ``python -m benchmarks.scale_bench``).

N records (default 2,000,000, 200-byte values, 4 partitions) are produced once into a local Apache Kafka node (or
``--bootstrap``). The raw baseline is the benchmark's one-process consume-and-encode loop
(``benchmarks.backup_bench``). Then, for each worker count in ``--workers`` (default ``1,2``), a fresh Spark
standalone cluster (:mod:`devkit.spark_cluster`: master and workers on loopback, one core each) runs
``spark-submit --master spark://... jobs/backup.py --snapshot`` into a fresh target, then ``jobs/restore.py`` of that
backup into a new topic of the same cluster (``--topic-map``). Both are checked: the backup holds N records, the
restored topic's partitions hold the backed-up partitions' counts (read committed).

Printed per worker count and job: records/s while Spark's tasks work (the backup's micro-batches; the restore from
its first task's start to its last task's end) and end to end, that rate per executor core, and the speed-up over
the first worker count; and the CPU seconds per million records of the executors (a cgroup holding the workers,
so that every executor JVM and Python worker they start is counted), of the driver's process tree, and the cores
the whole machine kept busy on average. Kafka, the driver and the workers share the machine: with two cores, two
workers compete with the broker and the driver for them, which the speed-up shows as it is; the executors' CPU per
record is what a cluster of separate machines pays per record.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.backup_bench import TOPIC, produce, raw_consume_and_encode, run_backup
from benchmarks.cluster import add_arguments, cluster
from benchmarks.process_tree import CpuGroup
from benchmarks.restore_bench import run_restore
from devkit.spark_cluster import SparkCluster
from spark_kafka_backup.partition.layout import list_partitions
from spark_kafka_backup.partition.reader import PartitionReader


def backed_up_counts(target: Path) -> dict[int, int]:
    """Records the backup holds, per partition."""
    topic_dir = target / TOPIC
    return {
        p: sum(len(batch) for batch in PartitionReader(topic_dir, p).record_batches())
        for p in list_partitions(topic_dir)
    }


def restored_counts(settings: dict[str, str], topic: str, partitions: int) -> dict[int, int]:
    """Records in each partition of ``topic``, read committed (its end offsets count the transactions' markers too)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({**settings, "group.id": "kbackup-scale-bench", "enable.auto.commit": "false",
                         "isolation.level": "read_committed", "enable.partition.eof": "true"})  # fmt: skip
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        counts = dict.fromkeys(range(partitions), 0)
        ended: set[int] = set()
        deadline = time.monotonic() + 300
        while len(ended) < partitions:
            if time.monotonic() > deadline:
                raise SystemExit(f"reading {topic}: partitions {sorted(set(counts) - ended)} not read to their end")
            for message in consumer.consume(10_000, timeout=5):
                error = message.error()
                if error is None:
                    counts[message.partition()] += 1
                elif error.code() == error._PARTITION_EOF:
                    ended.add(message.partition())
                else:
                    raise SystemExit(f"reading {topic}: {error}")
        return counts
    finally:
        consumer.close()


def machine_cpu_seconds() -> float:
    """CPU seconds the whole machine has been busy since boot (``/proc/stat``: all but idle and I/O wait)."""
    with open("/proc/stat") as stat:
        fields = [int(f) for f in stat.readline().split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Measured:
    """One job on one cluster: seconds while its tasks worked and end to end, and who used the CPU meanwhile."""

    job: str
    workers: int
    cores: int
    task_seconds: float
    wall_seconds: float
    startup_seconds: float | None
    driver_peak_mib: float
    #: CPU seconds of the executors (JVMs and their Python workers), of the driver's process tree, of the machine.
    executor_cpu: float | None
    driver_cpu: float
    machine_cpu: float


class CpuMeter:
    """CPU seconds of a cluster's executors (a cgroup holding the workers, so that every executor they start and its
    Python are in it) and of the whole machine, between two readings."""

    def __init__(self) -> None:
        self.group = CpuGroup("-executors")

    def watch(self, spark: SparkCluster) -> None:
        for node in spark.nodes:
            if node.process is None or not self.group.add(node.process.pid):
                print("executors' CPU: not measured (a worker could not join the cgroup)", flush=True)
                return

    def read(self) -> tuple[float | None, float]:
        return (self.group.seconds() if self.group.path is not None else None), machine_cpu_seconds()

    def close(self) -> None:
        self.group.remove(wait=30)


def measure_on(
    settings: dict[str, str], workdir: Path, workers: int, records: int, partitions: int
) -> tuple[Measured, Measured]:
    """A snapshot backup and its restore on a fresh cluster of ``workers`` workers of 1 core, both checked."""
    with contextlib.ExitStack() as stack:
        meter = CpuMeter()
        stack.callback(meter.close)  # after the cluster has stopped (last in, first out)
        spark = stack.enter_context(SparkCluster(workers=workers, cores=1))
        print(f"spark: {spark.describe()}", flush=True)
        cores = workers * spark.cores
        meter.watch(spark)
        target = workdir / f"backup-{workers}"
        before = meter.read()
        backup = run_backup(settings, target, "--topics", TOPIC, master=spark.master_url)
        between = meter.read()
        held = backed_up_counts(target)
        if (total := sum(held.values())) != records:
            raise SystemExit(f"the backup with {workers} worker(s) holds {total:,} records, not {records:,}")
        restored_topic = f"{TOPIC}-restored-{workers}"
        mid = meter.read()
        usage, task_seconds = run_restore(
            settings, target, extra=("--topic-map", f"{TOPIC}={restored_topic}"), master=spark.master_url
        )
        after = meter.read()
    ends = restored_counts(settings, restored_topic, partitions)
    if ends != held:
        raise SystemExit(f"the restore with {workers} worker(s) left {ends} in {restored_topic}; the backup: {held}")
    return (
        Measured("backup", workers, cores, backup.batch_seconds, backup.usage.wall_seconds, backup.startup_seconds,
                 backup.usage.peak_rss_mib, difference(before[0], between[0]), backup.usage.cpu_seconds,
                 between[1] - before[1]),
        Measured("restore", workers, cores, task_seconds, usage.wall_seconds, None, usage.peak_rss_mib,
                 difference(mid[0], after[0]), usage.cpu_seconds, after[1] - mid[1]),
    )  # fmt: skip


def difference(first: float | None, second: float | None) -> float | None:
    return None if first is None or second is None else second - first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    parser.set_defaults(records=2_000_000)
    parser.add_argument("--workers", default="1,2", help="worker counts to measure (comma-separated)")
    args = parser.parse_args()
    counts = [int(w) for w in args.workers.split(",")]

    runs: list[Measured] = []
    with tempfile.TemporaryDirectory() as tmp, cluster(args.bootstrap) as settings:
        produce(settings, args.records, args.partitions, args.value_size)
        raw_seconds, _, _ = raw_consume_and_encode(settings, args.records, args.partitions)
        for workers in counts:
            runs.extend(measure_on(settings, Path(tmp), workers, args.records, args.partitions))

    n, mb = args.records, args.records * args.value_size / 1e6
    print(f"{n:,} records, {args.value_size}-byte values, {args.partitions} partitions; both checked record counts")
    print(f"raw consume+encode (one process) {n / raw_seconds:>10,.0f} records/s {mb / raw_seconds:7.1f} MB/s")
    for job in ("backup", "restore"):
        first = next(run for run in runs if run.job == job)
        for run in (run for run in runs if run.job == job):
            rate = n / run.task_seconds
            speedup = first.task_seconds / run.task_seconds
            startup = "" if run.startup_seconds is None else f"  start-up {run.startup_seconds:5.1f} s"
            print(
                f"{job:7} {run.workers} worker(s), tasks       {rate:>10,.0f} records/s {mb / run.task_seconds:7.1f} "
                f"MB/s  per executor core {rate / run.cores:>9,.0f}  speed-up over {first.workers}: {speedup:4.2f}"
            )
            print(
                f"{job:7} {run.workers} worker(s), end to end  {n / run.wall_seconds:>10,.0f} records/s "
                f"{run.wall_seconds:6.1f} s{startup}  driver peak {run.driver_peak_mib:6.0f} MiB"
            )
            executors = "not measured (no cgroup)"
            if run.executor_cpu is not None:
                executors = f"{run.executor_cpu / n * 1e6:5.2f} s/M ({n / run.executor_cpu:>9,.0f} records per CPU-s)"
            print(
                f"{job:7} {run.workers} worker(s), CPU         executors {executors}, driver "
                f"{run.driver_cpu / n * 1e6:5.2f} s/M, machine {run.machine_cpu / run.wall_seconds:4.2f} of "
                f"{os.cpu_count()} cores busy"
            )


if __name__ == "__main__":
    main()
