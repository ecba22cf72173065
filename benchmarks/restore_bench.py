"""Restore benchmark: the restore job beside a raw produce loop over the same records.

Run from the repository root: ``./dev bench restore`` (or ``python -m benchmarks.restore_bench``).

A backup of N records (default 5,000,000; 200-byte values, small keys, one
header; 4 partitions) is written with the format library and cataloged, as the
backup job leaves one; then, in the same invocation, against fresh topics on a
local Apache Kafka node (or ``--bootstrap``):

- ``raw``: one Python process producing the same records, read from the same
  backup files, with an idempotent confluent-kafka producer and the same
  batch settings. The least work a Python restore must do per record.
- ``native``: the same, through the native Kafka edge: the backup read in
  columnar batches, each produced by one call from its Arrow columns
  (:mod:`spark_kafka_backup.kafka.columnar_producer`), delivery reports counted
  in C. What the restore's tasks will cost once they produce this way.
- ``restore``: ``spark-submit jobs/restore.py`` with ``local[2]``, end to end
  (Spark and Python worker start-up included), and the tasks' own producing
  time (the longest task, from the job's summary). ``--repartition MODE`` (with
  ``--into N`` target partitions) restores through the merged stream instead;
  ``--edge reference`` through confluent-kafka (``KBACKUP_KAFKA_EDGE``).

- ``kcat``: Debian's kcat producing the same keys, values and header from a
  text file (written before the clock starts), idempotent, to a third topic.
- ``--schema-registry``: the values are in a schema registry's wire format (ten
  schema ids, in turn), the backup holds a copy of a registry with those ten
  schemas, and the restore runs twice: without a registry, then with
  ``--schema-registry`` into a local Apicurio Registry (devkit) where every id
  differs, so that every value's id is rewritten (on columns). The second
  restore's rows are printed beside the first's.

Printed: records/s and MB/s of value bytes, the ratio restore / raw (and
restore / kcat), CPU seconds per million records and peak resident memory of
each one's whole process tree (:mod:`benchmarks.process_tree`; the broker is
not in it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.cluster import add_arguments, cluster, kcat_command, kcat_settings
from benchmarks.process_tree import TreeUsage, measure
from spark_kafka_backup.catalog.ledger import CatalogLedger
from spark_kafka_backup.format.record import Record
from spark_kafka_backup.jvm_archive import ensure_driver_archive
from spark_kafka_backup.partition.writer import PartitionWriter
from spark_kafka_backup.spark_submit import job_environment, spark_home, spark_submit_command
from tests.kafka_helpers import client_config_file

REPO = Path(__file__).resolve().parent.parent


def bench_value(value_size: int) -> bytes:
    return (b"0123456789abcdef" * (value_size // 16 + 1))[:value_size]


#: Schema ids the values name with ``--schema-registry`` (1 to this).
SCHEMAS = 10


def write_backup(root: Path, count: int, partitions: int, value_size: int, *, wired: bool = False) -> None:
    """The backup; ``wired``: values in the wire format of :data:`SCHEMAS` ids, and a registry copy holding them."""
    value = bench_value(value_size)
    values = [b"\x00" + i.to_bytes(4, "big") + value[5:] for i in range(1, SCHEMAS + 1)] if wired else [value]
    header = (("trace-id", b"0123456789abcdef"),)
    now = int(time.time() * 1000)
    ledger = CatalogLedger(root)  # cataloged, as a backup job leaves it: the restore's plan answers from the catalog
    writers = [PartitionWriter(root / "bench", "bench", p, fsync=False, ledger=ledger) for p in range(partitions)]
    for i in range(count):
        record = Record(i // partitions, 0, now + i // 1000, b"key-%07d" % i, values[i % len(values)], header)
        writers[i % partitions].append(record)
    for writer in writers:
        writer.close()
    if wired:
        from spark_kafka_backup.schema_registry.capture import registry_copy_path
        from spark_kafka_backup.schema_registry.registry_copy import RegistryCopy, Schema, Subject, SubjectVersion

        schemas = {i: Schema(i, json.dumps({"type": "record", "name": f"Bench{i}", "fields": []}))
                   for i in range(1, SCHEMAS + 1)}  # fmt: skip
        versions = tuple(SubjectVersion(i, i) for i in range(1, SCHEMAS + 1))
        copy = RegistryCopy(
            "http://bench-source", 0, None, None, schemas, {"bench-value": Subject("bench-value", versions)}
        )
        path = registry_copy_path(root)
        assert isinstance(path, Path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(copy.encode())


def kcat_produce(
    settings: dict[str, str], directory: Path, count: int, partitions: int, value_size: int
) -> TreeUsage | None:
    """kcat producing the same keys, values and header from a text file (idempotent); ``None`` without kcat."""
    kcat = kcat_command()
    if kcat is None:
        return None
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(settings)
    for future in admin.create_topics([NewTopic("kcat-target", partitions, 1)]).values():
        future.result(30)
    lines = directory / "kcat-input.txt"
    value = bench_value(value_size)
    with open(lines, "wb") as out:
        for start in range(0, count, 100_000):
            out.write(b"".join(b"key-%07d\t%s\n" % (i, value) for i in range(start, min(count, start + 100_000))))
    command = [kcat, "-P", "-q", "-t", "kcat-target", "-K", "\t", "-H", "trace-id=0123456789abcdef", "-l"]
    command += [*kcat_settings(settings), "-X", "enable.idempotence=true", str(lines)]
    usage, output = measure(command, capture=True)
    lines.unlink()
    if usage.returncode != 0:
        raise SystemExit(f"kcat failed:\n{output[-3000:]}")
    return usage


RAW = """
import json, sys, time
from pathlib import Path
from confluent_kafka import Producer
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.restore.task import producer_settings
from benchmarks.backup_bench import peak_rss_mib
settings, root, partitions, topic = json.loads(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
producer = Producer(producer_settings(settings, 1 << 20))
started = time.perf_counter()
n = 0
for p in range(partitions):
    for r in PartitionReader(root / "bench", p).records():
        while True:
            try:
                producer.produce(topic, r.value, r.key, p, timestamp=r.timestamp, headers=list(r.headers))
                break
            except BufferError:
                producer.poll(0.1)
        n += 1
assert producer.flush(300) == 0
print(json.dumps([time.perf_counter() - started, n, peak_rss_mib()]))
"""


NATIVE = """
import json, sys, time
from pathlib import Path
from spark_kafka_backup.kafka.columnar import native_edge
from spark_kafka_backup.kafka.columnar_producer import ColumnarProducer
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.segment_batches import produce_columns
from spark_kafka_backup.restore.task import producer_settings
from benchmarks.backup_bench import peak_rss_mib
settings, root, partitions, topic = json.loads(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
native = native_edge()
assert native is not None, "the native Kafka edge is not built"
producer = ColumnarProducer({k: str(v) for k, v in producer_settings(settings, 1 << 20).items()})
started = time.perf_counter()
n = 0
for p in range(partitions):
    for batch in PartitionReader(root / "bench", p).record_batches():
        columns = produce_columns(batch)
        producer.produce(topic, p, columns, n)
        n += columns.num_rows
assert producer.flush(300) == 0
reports = producer.deliveries()
assert reports.reported == n and not reports.failures, (reports.reported, reports.failures[:3])
print(json.dumps([time.perf_counter() - started, n, peak_rss_mib()]))
"""


def raw_produce(
    settings: dict[str, str], root: Path, partitions: int, *, native: bool = False
) -> tuple[float, float, float]:
    """Seconds producing, peak RSS (MiB) and CPU seconds of the whole process (start-up included)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(settings)  # kept alive until the topic exists
    target = "native-target" if native else "raw-target"
    for future in admin.create_topics([NewTopic(target, partitions, 1)]).values():
        future.result(30)
    usage, output = measure(
        [sys.executable, "-c", NATIVE if native else RAW, json.dumps(settings), str(root), str(partitions), target],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture=True,
    )
    if usage.returncode != 0:
        raise SystemExit(f"the raw loop failed:\n{output[-3000:]}")
    seconds, _, rss = json.loads(output.strip().splitlines()[-1])
    return float(seconds), float(rss), usage.cpu_seconds


def run_restore(
    settings: dict[str, str],
    root: Path,
    *,
    repartition: str | None = None,
    into: int = 0,
    edge: str | None = None,
    extra: tuple[str, ...] = (),
    want_output: bool = False,
    master: str = "local[2]",
) -> Any:
    """The restore, measured (whole process tree), and its producing time (the longest topic's, from its first
    task's start to its last task's end; with ``output``, also what it printed). ``master``: where Spark runs (on a
    standalone cluster the figures are the driver's tree alone)."""
    config = client_config_file(root.parent / "target.properties", settings)
    target = next((a.split("=", 1)[1] for a in extra if a.startswith("bench=")), "bench")
    spread = ["--repartition", repartition, "--partitions", f"{target}={into}"] if repartition else []
    command = spark_submit_command(
        "restore", "--bootstrap-server", settings["bootstrap.servers"], "--command-config", config,
        "--source-dir", root, *spread, *extra, master=master,
    )  # fmt: skip
    env = job_environment()
    if edge:
        env["KBACKUP_KAFKA_EDGE"] = edge
    usage, output = measure([str(part) for part in command], env=env, capture=True)
    if usage.returncode != 0:
        raise SystemExit(f"restore failed:\n{output[-3000:]}")
    busy = [
        float(s) for s in re.findall(r"restored \S+: \d+ records, \d+ bytes of keys and values in ([\d.]+) s", output)
    ]
    return (usage, max(busy, default=0.0), output) if want_output else (usage, max(busy))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    parser.add_argument("--repartition", choices=["murmur2", "round-robin"], help="restore through the merged stream")
    parser.add_argument("--into", type=int, default=0, help="target partitions with --repartition (default: as many)")
    parser.add_argument("--edge", choices=["native", "reference"], help="the restore's producer (default: native)")
    parser.add_argument(
        "--schema-registry", action="store_true", help="values in the wire format; a second restore rewrites every id"
    )
    parser.add_argument(
        "--where", metavar="PREDICATE", help="a second restore of the records PREDICATE holds for (restore --where)"
    )
    args = parser.parse_args()
    # As a user's second job on the machine finds it (KBACKUP_JVM_ARCHIVE=off measures without).
    archive = ensure_driver_archive(job_environment(), spark_home(), announce=print)
    print(f"driver class archive: {archive or 'none'}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "backup"
        write_backup(root, args.records, args.partitions, args.value_size, wired=args.schema_registry)
        with cluster(args.bootstrap) as settings, contextlib.ExitStack() as stack:
            raw_seconds, raw_rss, raw_cpu = raw_produce(settings, root, args.partitions)
            native_seconds, native_rss, native_cpu = raw_produce(settings, root, args.partitions, native=True)
            kcat = kcat_produce(settings, Path(tmp), args.records, args.partitions, args.value_size)
            restore, busy = run_restore(settings, root, repartition=args.repartition,
                                        into=args.into or args.partitions, edge=args.edge)  # fmt: skip
            selective = None
            if args.where:
                chosen = ("--where", args.where, "--topic-map", "bench=bench-where")
                selective = run_restore(settings, root, extra=chosen, want_output=True)
            rewritten = None
            if args.schema_registry:
                registry = stack.enter_context(registry_with_other_ids())
                rewritten = run_restore(settings, root, repartition=args.repartition, into=args.into or args.partitions,
                                        edge=args.edge, extra=("--schema-registry", registry,
                                                               "--topic-map", "bench=bench-ids"))  # fmt: skip
    n, mb = args.records, args.records * args.value_size / 1e6
    wall = restore.wall_seconds
    print(f"{n:,} records, {args.value_size}-byte values, {args.partitions} partitions")
    if args.repartition:
        print(f"restored with --repartition {args.repartition} into {args.into or args.partitions} partitions")
    if args.edge:
        print(f"restored through the {args.edge} edge")
    print("CPU: user + system seconds of each one's whole process tree, per million records (the broker excluded)")
    raw_rate = f"{n / raw_seconds:>10,.0f} records/s {mb / raw_seconds:7.1f} MB/s"
    print(f"raw produce          {raw_rate}  CPU {raw_cpu / n * 1e6:5.2f} s/M  peak {raw_rss:6.0f} MiB")
    native_rate = f"{n / native_seconds:>10,.0f} records/s {mb / native_seconds:7.1f} MB/s"
    print(f"native produce       {native_rate}  CPU {native_cpu / n * 1e6:5.2f} s/M  peak {native_rss:6.0f} MiB")
    if kcat is None:
        print("kcat produce         not installed (apt-get install kcat)")
    else:
        kcat_rate = f"{n / kcat.wall_seconds:>10,.0f} records/s {mb / kcat.wall_seconds:7.1f} MB/s"
        print(
            f"kcat produce         {kcat_rate}  CPU {kcat.per_million(n):5.2f} s/M  peak {kcat.peak_rss_mib:6.0f} MiB"
        )
    print(f"restore, task time   {n / busy:>10,.0f} records/s {mb / busy:7.1f} MB/s  ratio {raw_seconds / busy:5.2f}")
    print(
        f"restore, end to end  {n / wall:>10,.0f} records/s {mb / wall:7.1f} MB/s  ratio {raw_seconds / wall:5.2f}"
        + ("" if kcat is None else f"  vs kcat {kcat.wall_seconds / wall:5.2f}")
    )
    cpu_versus = "" if kcat is None else f" ({restore.cpu_seconds / kcat.cpu_seconds:4.1f}x kcat's)"
    print(
        f"restore, whole tree  CPU {restore.per_million(n):5.2f} s/M{cpu_versus} ({restore.cpu_source}) in "
        f"{restore.processes} processes, "
        f"peak {restore.peak_rss_mib:6.0f} MiB resident ({restore.peak_pss_mib:.0f} MiB proportional)"
    )
    if selective is not None:
        usage, _, said = selective
        matched = re.findall(r"--where: ([\d,]+) records? matched", said)
        print(f"with --where {args.where!r} ({matched[-1] if matched else '?'} records selected):")
        print(f"restore, end to end  {usage.wall_seconds:7.1f} s  vs the whole restore {wall:7.1f} s "
              f"({usage.wall_seconds / wall:4.2f}x), CPU {usage.cpu_seconds:6.1f} s")  # fmt: skip
    if rewritten is not None:
        usage, ids_busy = rewritten
        ids_wall = usage.wall_seconds
        print(f"with --schema-registry (every value's id rewritten, {SCHEMAS} ids):")
        print(f"restore, task time   {n / ids_busy:>10,.0f} records/s  vs without a registry {busy / ids_busy:5.2f}")
        print(f"restore, end to end  {n / ids_wall:>10,.0f} records/s  vs without a registry {wall / ids_wall:5.2f}")
        print(
            f"restore, whole tree  CPU {usage.per_million(n):5.2f} s/M "
            f"({usage.cpu_seconds / restore.cpu_seconds:4.2f}x without a registry), peak {usage.peak_rss_mib:6.0f} MiB"
        )


@contextlib.contextmanager
def registry_with_other_ids() -> Iterator[str]:
    """A local Apicurio Registry (its Confluent API's URL) where the backup's ids are taken by other schemas."""
    from devkit.apicurio import ApicurioRegistry
    from spark_kafka_backup.schema_registry.client import RegistryAddress, RegistryClient

    with ApicurioRegistry() as registry:
        client = RegistryClient(RegistryAddress.parse(registry.url))
        for i in range(SCHEMAS + 3):
            schema = json.dumps({"type": "record", "name": f"Taken{i}", "fields": []})
            client.post(f"/subjects/taken-{i}/versions", {"schema": schema})
        yield registry.url


if __name__ == "__main__":
    main()
