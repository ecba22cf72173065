"""Backup benchmark: a snapshot backup of N records beside a raw consume-and-encode loop.

Run from the repository root: ``./dev bench backup`` (or ``python -m benchmarks.backup_bench``).

All run in the same invocation on the same data, produced first into a local
Apache Kafka node started from its jars (or ``--bootstrap`` for an external
cluster): N records (default 1,000,000) with 100-byte values, small keys and
one header, spread over 4 partitions.

- ``raw``: one Python process, a confluent-kafka consumer reading all
  partitions and encoding every message as a v1 record into memory. The
  least work any Python backup must do per record; no files, no Spark.
- ``backup``: ``spark-submit jobs/backup.py --snapshot`` with ``local[2]``,
  once per way in (``--sources``): spark-kafka-backup's source on the native
  Kafka edge (``native``) and on confluent-kafka (``python``, the reference
  path), and Spark's Kafka source (``spark``); end to end (Spark and Python
  worker start-up included), its batch time alone (from the job's per-batch
  log lines) and its start-up (submit to the first batch line).

- ``kcat``: Debian's kcat (librdkafka's tool, C) dumping every record to
  ``/dev/null`` (``./dev bench`` installs it; without it the row says so).

Printed: records/s and MB/s of value bytes, the ratio backup / raw (and
backup / kcat), CPU seconds per million records and peak resident memory of
each one's whole process tree (:mod:`benchmarks.process_tree`; the broker is
not in it).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.cluster import add_arguments, cluster, kcat_command, kcat_settings
from benchmarks.process_tree import TreeUsage, measure
from spark_kafka_backup.format.record import Record, append_record
from spark_kafka_backup.jvm_archive import ensure_driver_archive
from spark_kafka_backup.kafka.columnar import EDGE_ENV
from spark_kafka_backup.spark_submit import job_environment, spark_home, spark_submit_command
from tests.kafka_helpers import client_config_file

REPO = Path(__file__).resolve().parent.parent
TOPIC = "bench"


def produce(settings: dict[str, str], count: int, partitions: int, value_size: int) -> float:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(settings)
    for future in admin.create_topics([NewTopic(TOPIC, partitions, 1)]).values():
        future.result(30)
    producer = Producer({**settings, "linger.ms": "50", "batch.num.messages": "10000", "compression.type": "none"})
    value = (b"0123456789abcdef" * (value_size // 16 + 1))[:value_size]
    header = [("trace-id", b"0123456789abcdef")]
    started = time.perf_counter()
    for i in range(count):
        while True:
            try:
                producer.produce(TOPIC, key=b"key-%07d" % i, value=value, headers=header, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    producer.flush(300)
    return time.perf_counter() - started


def raw_consume_and_encode(settings: dict[str, str], count: int, partitions: int) -> tuple[float, float, float]:
    """Seconds to read and encode every record, the peak RSS (MiB) of a fresh process doing it, and its CPU seconds
    (the whole process: start-up and imports included)."""
    code = f"""
import json, time, sys
from confluent_kafka import Consumer, TopicPartition
from spark_kafka_backup.format.record import Record, append_record
from spark_kafka_backup.spark_submit import job_environment, spark_submit_command
from tests.kafka_helpers import client_config_file
from benchmarks.backup_bench import peak_rss_mib
settings = json.loads(sys.argv[1])
consumer = Consumer({{**settings, "group.id": "bench-raw", "enable.auto.commit": "false",
                     "isolation.level": "read_committed", "enable.partition.eof": "true"}})
consumer.assign([TopicPartition("{TOPIC}", p, 0) for p in range({partitions})])
done, seen, out = 0, 0, bytearray()
started = time.perf_counter()
while done < {partitions}:
    for m in consumer.consume(5000, 1.0):
        if m.error():
            done += 1
            continue
        kind, ts = m.timestamp()
        append_record(out, Record(m.offset(), 0, ts, m.key(), m.value(), tuple(m.headers() or ())))
        seen += 1
        if len(out) > 1 << 24:
            out.clear()
seconds = time.perf_counter() - started
assert seen == {count}, seen
print(json.dumps([seconds, peak_rss_mib()]))
"""
    import json

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    usage, output = measure([sys.executable, "-c", code, json.dumps(settings)], env=env, capture=True)
    if usage.returncode != 0:
        raise SystemExit(f"the raw loop failed:\n{output[-3000:]}")
    seconds, rss = json.loads(output.strip().splitlines()[-1])
    return float(seconds), float(rss), usage.cpu_seconds


def kcat_dump(settings: dict[str, str], count: int) -> TreeUsage | None:
    """kcat reading every record (key, value, headers) to /dev/null; ``None`` without kcat."""
    kcat = kcat_command()
    if kcat is None:
        return None
    command = [kcat, "-C", "-q", "-e", "-o", "beginning", "-t", TOPIC, "-f", "%k %s %h\\n", *kcat_settings(settings)]
    usage, output = measure(["sh", "-c", 'exec "$@" > /dev/null', "kcat", *command], capture=True)
    if usage.returncode != 0:
        raise SystemExit(f"kcat failed:\n{output[-3000:]}")
    return usage


def run_backup(
    settings: dict[str, str],
    target: Path,
    *job_args: str,
    master: str = "local[2]",
    environment: dict[str, str] | None = None,
) -> BackupRun:
    """A snapshot backup, measured (whole process tree).

    ``job_args``: the topics and any other option, e.g. ``("--topics", "bench", "--kafka-source", "spark")``.
    ``master``: where Spark runs (on a standalone cluster the figures are the driver's tree alone).
    ``environment``: set for the job beside its own (``KBACKUP_KAFKA_EDGE``).
    """
    config = client_config_file(target.parent / f"{target.name}.properties", settings)
    command = spark_submit_command(
        "backup",
        "--bootstrap-server",
        settings["bootstrap.servers"],
        "--command-config",
        config,
        "--target-dir",
        target,
        "--snapshot",
        *job_args,
        master=master,
    )
    started = time.perf_counter()
    first_batch = [0.0]

    def watch(line: str) -> None:
        if not first_batch[0] and BATCH.search(line):
            first_batch[0] = time.perf_counter() - started

    env = {**job_environment(), **(environment or {})}
    usage, output = measure([str(part) for part in command], env=env, capture=True, on_line=watch)
    if usage.returncode != 0:
        raise SystemExit(f"backup failed:\n{output[-3000:]}")
    batches = [float(s) for s in BATCH.findall(output)]
    # Start-up: until the first batch ended, less that batch's own time.
    startup = first_batch[0] - (batches[0] if batches else 0.0)
    return BackupRun(usage, sum(batches), startup)


@dataclass(frozen=True)
class BackupRun:
    usage: TreeUsage
    batch_seconds: float
    startup_seconds: float


BATCH = re.compile(r"batch \d+: \d+ records read in ([\d.]+) s")


def peak_rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    parser.add_argument(
        "--sources",
        default="native,python,spark",
        help="what to measure (comma-separated): spark-kafka-backup's source on the native Kafka edge (native) or "
        "on confluent-kafka (python), and Spark's Kafka source (spark)",
    )
    args = parser.parse_args()
    # As a user's second job on the machine finds it (KBACKUP_JVM_ARCHIVE=off measures without).
    archive = ensure_driver_archive(job_environment(), spark_home(), announce=print)
    print(f"driver class archive: {archive or 'none'}", flush=True)
    # Touch the codec once so the raw loop's import cost is not in its figures.
    append_record(bytearray(), Record(0, -1, None, None, None))

    with tempfile.TemporaryDirectory() as tmp, cluster(args.bootstrap) as settings:
        produce_seconds = produce(settings, args.records, args.partitions, args.value_size)
        raw_seconds, raw_rss, raw_cpu = raw_consume_and_encode(settings, args.records, args.partitions)
        kcat = kcat_dump(settings, args.records)
        runs = {
            source: run_backup(
                settings,
                Path(tmp) / f"backup-{source}",
                *("--topics", TOPIC, "--kafka-source", "spark" if source == "spark" else "python"),
                environment={EDGE_ENV: "native" if source == "native" else "reference"},
            )
            for source in args.sources.split(",")
        }
    n, mb = args.records, args.records * args.value_size / 1e6
    shape = f"{args.value_size}-byte values, {args.partitions} partitions"
    print(f"{n:,} records, {shape} (produced in {produce_seconds:.1f} s)")
    print("CPU: user + system seconds of each one's whole process tree, per million records (the broker excluded)")
    raw_rate = f"{n / raw_seconds:>10,.0f} records/s {mb / raw_seconds:7.1f} MB/s"
    print(f"raw consume+encode            {raw_rate}  CPU {raw_cpu / n * 1e6:5.2f} s/M  peak {raw_rss:6.0f} MiB")
    if kcat is None:
        print("kcat dump                     not installed (apt-get install kcat)")
    else:
        kcat_rate = f"{n / kcat.wall_seconds:>10,.0f} records/s {mb / kcat.wall_seconds:7.1f} MB/s"
        print(f"kcat dump                     {kcat_rate}  CPU {kcat.per_million(n):5.2f} s/M  "
              f"peak {kcat.peak_rss_mib:6.0f} MiB")  # fmt: skip
    for source, run in runs.items():
        wall, batch_seconds, usage = run.usage.wall_seconds, run.batch_seconds, run.usage
        versus_kcat = "" if kcat is None else f"  vs kcat {kcat.wall_seconds / batch_seconds:5.2f}"
        print(
            f"backup ({source:7}), batches  {n / batch_seconds:>10,.0f} records/s {mb / batch_seconds:7.1f} MB/s  "
            f"ratio {raw_seconds / batch_seconds:5.2f}{versus_kcat}"
        )
        versus_kcat = "" if kcat is None else f"  vs kcat {kcat.wall_seconds / wall:5.2f}"
        cpu_versus = "" if kcat is None else f" ({usage.cpu_seconds / kcat.cpu_seconds:4.1f}x kcat's)"
        print(
            f"backup ({source:7}), end to end {n / wall:>8,.0f} records/s {mb / wall:7.1f} MB/s  "
            f"ratio {raw_seconds / wall:5.2f}{versus_kcat}  start-up {run.startup_seconds:5.1f} s"
        )
        print(
            f"backup ({source:7}), whole tree CPU {usage.per_million(n):5.2f} s/M{cpu_versus} ({usage.cpu_source}) in "
            f"{usage.processes} processes, peak {usage.peak_rss_mib:6.0f} MiB resident "
            f"({usage.peak_pss_mib:.0f} MiB proportional)"
        )


if __name__ == "__main__":
    main()
