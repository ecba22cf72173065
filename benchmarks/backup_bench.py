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
  once per Kafka source (``--kafka-source python`` and ``spark``, or the one
  given with ``--sources``), end to end (Spark and Python worker start-up
  included), its batch time alone (from the job's per-batch log lines) and its
  start-up (submit to the first batch line).

- ``kcat``: Debian's kcat (librdkafka's tool, C) dumping every record to
  ``/dev/null`` (``./dev bench`` installs it; without it the row says so).

Printed: records/s and MB/s of value bytes, the ratio backup / raw (and
backup / kcat), and the peak resident memory of each (for the backup: the
whole process tree, the JVM and its Python workers, sampled every 0.2 s).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.cluster import add_arguments, cluster, kcat_command, kcat_settings
from spark_kafka_backup.format.record import Record, append_record
from spark_kafka_backup.spark_submit import job_environment, spark_submit_command
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


def raw_consume_and_encode(settings: dict[str, str], count: int, partitions: int) -> tuple[float, float]:
    """Seconds to read and encode every record, and the peak RSS (MiB) of a fresh process doing it."""
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
    output = subprocess.run(
        [sys.executable, "-c", code, json.dumps(settings)], capture_output=True, text=True, env=env, check=True
    ).stdout
    seconds, rss = json.loads(output.strip().splitlines()[-1])
    return float(seconds), float(rss)


def kcat_dump(settings: dict[str, str], count: int) -> float | None:
    """Seconds for kcat to read every record (key, value, headers) to /dev/null; ``None`` without kcat."""
    kcat = kcat_command()
    if kcat is None:
        return None
    command = [kcat, "-C", "-q", "-e", "-o", "beginning", "-t", TOPIC, "-f", "%k %s %h\\n", *kcat_settings(settings)]
    started = time.perf_counter()
    with open(os.devnull, "wb") as sink:
        subprocess.run(command, stdout=sink, check=True)
    return time.perf_counter() - started


def run_backup(
    settings: dict[str, str], target: Path, *job_args: str, master: str = "local[2]"
) -> tuple[float, float, float, float]:
    """Wall seconds, summed batch seconds, start-up seconds and peak tree RSS (MiB) of a snapshot backup.

    ``job_args``: the topics and any other option, e.g. ``("--topics", "bench", "--kafka-source", "spark")``.
    ``master``: where Spark runs (on a standalone cluster the RSS is the driver's alone).
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
    env = job_environment()
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    peak = [0.0]
    sampler = threading.Thread(target=_sample_tree, args=(process.pid, peak), daemon=True)
    sampler.start()
    assert process.stdout is not None
    lines, first_batch = [], 0.0
    for line in process.stdout:
        lines.append(line)
        if not first_batch and BATCH.search(line):
            first_batch = time.perf_counter() - started
    process.wait()
    wall = time.perf_counter() - started
    output = "".join(lines)
    if process.returncode != 0:
        raise SystemExit(f"backup failed:\n{output[-3000:]}")
    batches = [float(s) for s in BATCH.findall(output)]
    # Start-up: until the first batch ended, less that batch's own time.
    startup = first_batch - (batches[0] if batches else 0.0)
    return wall, sum(batches), startup, peak[0]


BATCH = re.compile(r"batch \d+: \d+ records read in ([\d.]+) s")


def _sample_tree(root: int, peak: list[float]) -> None:
    while True:
        try:
            os.kill(root, 0)
        except ProcessLookupError:
            return
        peak[0] = max(peak[0], _tree_rss_mib(root))
        time.sleep(0.2)


def _tree_rss_mib(root: int) -> float:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(parent, []).append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    total, stack = 0.0, [root]
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, []))
        try:
            with open(f"/proc/{pid}/status") as status:
                for line in status:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) / 1024
        except OSError:
            continue
    return total


def peak_rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    parser.add_argument("--sources", default="python,spark", help="Kafka sources to measure (comma-separated)")
    args = parser.parse_args()
    # Touch the codec once so the raw loop's import cost is not in its figures.
    append_record(bytearray(), Record(0, -1, None, None, None))

    with tempfile.TemporaryDirectory() as tmp, cluster(args.bootstrap) as settings:
        produce_seconds = produce(settings, args.records, args.partitions, args.value_size)
        raw_seconds, raw_rss = raw_consume_and_encode(settings, args.records, args.partitions)
        kcat_seconds = kcat_dump(settings, args.records)
        runs = {
            source: run_backup(settings, Path(tmp) / f"backup-{source}", "--topics", TOPIC, "--kafka-source", source)
            for source in args.sources.split(",")
        }
    n, mb = args.records, args.records * args.value_size / 1e6
    shape = f"{args.value_size}-byte values, {args.partitions} partitions"
    print(f"{n:,} records, {shape} (produced in {produce_seconds:.1f} s)")
    raw_rate = f"{n / raw_seconds:>10,.0f} records/s {mb / raw_seconds:7.1f} MB/s"
    print(f"raw consume+encode            {raw_rate}  peak {raw_rss:6.0f} MiB")
    if kcat_seconds is None:
        print("kcat dump                     not installed (apt-get install kcat)")
    else:
        print(f"kcat dump                     {n / kcat_seconds:>10,.0f} records/s {mb / kcat_seconds:7.1f} MB/s")
    for source, (wall, batch_seconds, startup, backup_rss) in runs.items():
        versus_kcat = "" if kcat_seconds is None else f"  vs kcat {kcat_seconds / batch_seconds:5.2f}"
        print(
            f"backup ({source:7}), batches  {n / batch_seconds:>10,.0f} records/s {mb / batch_seconds:7.1f} MB/s  "
            f"ratio {raw_seconds / batch_seconds:5.2f}{versus_kcat}"
        )
        print(
            f"backup ({source:7}), end to end {n / wall:>8,.0f} records/s {mb / wall:7.1f} MB/s  "
            f"ratio {raw_seconds / wall:5.2f}  start-up {startup:5.1f} s  peak {backup_rss:6.0f} MiB (JVM + workers)"
        )


if __name__ == "__main__":
    main()
