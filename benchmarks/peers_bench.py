"""Peers benchmark: spark-kafka-backup beside kcat and OSO kafka-backup, the same topic, machine and run.

Run from the repository root: ``./dev bench peers`` (or ``python -m benchmarks.peers_bench``). ``./dev`` installs
Debian's kcat; OSO kafka-backup's engine (the crate ``kafka-backup-core`` from crates.io, pinned with its lock file
in ``benchmarks/peers/oso``) is built once with cargo into the cache (``KBACKUP_CACHE``, default
``~/.cache/spark-kafka-backup``): its command-line crate is not published, so ``benchmarks/peers/oso/src/main.rs``
loads a YAML configuration and runs its backup or restore engine as that CLI does.

For each shape (``--shapes RECORDS:VALUE_BYTES``, default ``1000000:200``) a topic of 4 partitions is produced into
one local Apache Kafka node (or ``--bootstrap``), then, one after the other:

- ``kcat dump``: every record (key, value, headers) to ``/dev/null``;
- ``OSO backup``: a snapshot (``stop_at_current_offsets``) to a local directory, no compression;
- ``skb backup``: ``spark-kafka-backup backup --snapshot`` to a local directory (``local[2]``, no compression);
- ``kcat produce``: the same number of records from a text file, idempotent;
- ``OSO restore``: its backup into a new topic (``topic_mapping``, ``create_topics``);
- ``skb restore``: its backup into a new topic (``--topic-map``), exactly once (transactions);

each with wall seconds, CPU seconds of its whole process tree, peak resident memory of that tree (the sum of its
processes' RSS, and of their PSS, which counts pages forked processes share once), and the ratio to
kcat's wall time. Every restore is counted back: the run fails unless each restored topic holds as many records as
the source.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from benchmarks.backup_bench import TOPIC, kcat_dump, produce, run_backup
from benchmarks.cluster import cluster
from benchmarks.process_tree import TreeUsage, measure
from benchmarks.restore_bench import kcat_produce, run_restore
from spark_kafka_backup.jars import cache_root

REPO = Path(__file__).resolve().parent.parent
OSO_SOURCE = REPO / "benchmarks" / "peers" / "oso"
#: The crate's version, as pinned in benchmarks/peers/oso/Cargo.toml (the cache is keyed by it).
OSO_VERSION = "0.25.2"


def oso_binary() -> Path:
    """OSO kafka-backup's engine behind benchmarks/peers/oso/src/main.rs, built once (cargo, release) into the
    cache."""
    built = cache_root() / f"oso-kafka-backup-core-{OSO_VERSION}"
    binary = built / "oso-peer"
    if binary.is_file():
        return binary
    cargo = shutil.which("cargo")
    if cargo is None:
        raise SystemExit("cargo is not on PATH: it builds OSO kafka-backup's engine from crates.io (rustup.rs)")
    print(f"building OSO kafka-backup's engine (kafka-backup-core {OSO_VERSION}, crates.io) into {built}; "
          "several minutes once", flush=True)  # fmt: skip
    target = cache_root() / "oso-build"
    subprocess.run(
        [cargo, "build", "--release", "--locked", "--quiet", "--target-dir", str(target)], cwd=OSO_SOURCE, check=True
    )
    built.mkdir(parents=True, exist_ok=True)
    staged = built / ".oso-peer.partial"
    shutil.copy2(target / "release" / "oso-kafka-backup-peer", staged)
    staged.rename(binary)
    return binary


def _oso_config(mode: str, cluster: str, servers: list[str], topic: str, directory: Path, options: str) -> str:
    """OSO's YAML: ``mode`` on ``topic`` of the cluster at ``servers`` (its ``source`` or ``target``), the backup in
    ``directory``, no metrics server, then ``options``."""
    listed = "".join(f"\n    - {server}" for server in servers)
    return f"""mode: {mode}
backup_id: bench
{cluster}:
  bootstrap_servers:{listed}
  topics:
    include:
      - {topic}
storage:
  backend: filesystem
  path: {directory}
metrics:
  enabled: false
{options}"""


def oso_backup_config(servers: list[str], topic: str, directory: Path) -> str:
    """A snapshot of ``topic`` to a local directory, uncompressed, OSO's other defaults kept. Its progress database
    (by backup id; default ``./offsets.db``, where a later run would resume from it and back up nothing) goes into
    ``directory``."""
    options = f"""backup:
  compression: none
  stop_at_current_offsets: true
offset_storage:
  backend: sqlite
  db_path: {directory / "offsets.db"}
"""
    return _oso_config("backup", "source", servers, topic, directory, options)


def oso_restore_config(servers: list[str], topic: str, into: str, directory: Path) -> str:
    """The backup of ``topic`` into a new topic ``into``, created by OSO, its other defaults kept (acks=all)."""
    options = f"""restore:
  create_topics: true
  topic_mapping:
    {topic}: {into}
"""
    return _oso_config("restore", "target", servers, topic, directory, options)


def run_oso(binary: Path, config: str, scratch: Path, name: str) -> TreeUsage:
    path = scratch / f"{name}.yaml"
    path.write_text(config)
    usage, output = measure([str(binary), str(path)], env={**os.environ, "RUST_LOG": "warn"}, capture=True)
    if usage.returncode != 0:
        raise SystemExit(f"OSO {name} failed:\n{output[-3000:]}")
    if os.environ.get("PEERS_BENCH_VERBOSE"):
        print(output[-3000:], flush=True)
    return usage


def count_records(settings: dict[str, str], topic: str) -> int:
    """Records a read_committed consumer reads from ``topic`` (every partition, from the beginning to the end)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**settings, "group.id": f"peers-count-{topic}", "enable.auto.commit": "false",
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest"})  # fmt: skip
    try:
        ends = end_offsets(settings, topic)
        partitions = sorted(ends)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        counted, done = 0, {p for p in partitions if ends[p] == 0}
        while len(done) < len(partitions):
            for message in consumer.consume(10_000, timeout=5):
                if message.error() is not None:
                    raise SystemExit(f"counting {topic}: {message.error()}")
                counted += 1
                if message.offset() + 1 >= ends[message.partition()] - 1:  # the last record, or before its marker
                    done.add(message.partition())
            if not done >= set(partitions):
                positions = consumer.position([TopicPartition(topic, p) for p in partitions])
                done |= {tp.partition for tp in positions if tp.offset >= ends[tp.partition]}
        return counted
    finally:
        consumer.close()


def end_offsets(settings: dict[str, str], topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**settings, "group.id": f"peers-ends-{topic}"})
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in sorted(partitions)}
    finally:
        consumer.close()


@dataclass(frozen=True)
class Row:
    name: str
    usage: TreeUsage | None
    yardstick: TreeUsage | None
    records: int

    def line(self) -> str:
        if self.usage is None:
            return f"  {self.name:<13} not run (kcat is not installed)"
        usage = self.usage
        ratio = f"{self.yardstick.wall_seconds / usage.wall_seconds:5.2f}" if self.yardstick else "    -"
        return (
            f"  {self.name:<13} {usage.wall_seconds:8.1f} s {self.records / usage.wall_seconds:>11,.0f} rec/s "
            f"{ratio}   {usage.cpu_seconds:7.1f} {usage.per_million(self.records):7.1f} {usage.peak_rss_mib:8.0f} "
            f"{usage.peak_pss_mib:8.0f}"
        )


def run_shape(settings: dict[str, str], binary: Path, records: int, value_size: int, scratch: Path) -> list[Row]:
    servers = settings["bootstrap.servers"].split(",")
    print(f"producing {records:,} records of {value_size} B into {TOPIC!r} (4 partitions)", flush=True)
    produce(settings, records, 4, value_size)
    kcat = kcat_dump(settings, records)
    oso_dir = scratch / "oso-backup"
    oso = run_oso(binary, oso_backup_config(servers, TOPIC, oso_dir), scratch, "backup")
    skb_dir = scratch / "skb-backup"
    skb = run_backup(settings, skb_dir, "--topics", TOPIC).usage
    kcat_in = kcat_produce(settings, scratch, records, 4, value_size)
    oso_in = run_oso(binary, oso_restore_config(servers, TOPIC, "oso-target", oso_dir), scratch, "restore")
    skb_in, _ = run_restore(settings, skb_dir, extra=("--topic-map", f"{TOPIC}=skb-target"))
    for restored in (oso_dir, skb_dir):  # the 10 KB shape's copies would otherwise hold 20 GB until the end
        shutil.rmtree(restored)
    for topic in ("oso-target", "skb-target"):
        found = count_records(settings, topic)
        if found != records:
            raise SystemExit(f"{topic} holds {found:,} records after the restore, not {records:,} "
                             f"(end offsets: {end_offsets(settings, topic)})")  # fmt: skip
    return [
        Row("kcat dump", kcat, kcat, records),
        Row("OSO backup", oso, kcat, records),
        Row("skb backup", skb, kcat, records),
        Row("kcat produce", kcat_in, kcat_in, records),
        Row("OSO restore", oso_in, kcat_in, records),
        Row("skb restore", skb_in, kcat_in, records),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--shapes",
        default="1000000:200",
        help="RECORDS:VALUE_BYTES[,...] (the issue's run: 1000000:200,10000000:200,1000000:10240)",
    )
    parser.add_argument("--bootstrap", help="an external cluster instead of a local Apache Kafka node")  # fmt: skip
    args = parser.parse_args()
    shapes = [tuple(int(part) for part in shape.split(":")) for shape in args.shapes.split(",")]
    binary = oso_binary()
    tables = []
    for records, value_size in shapes:
        with cluster(args.bootstrap) as settings, tempfile.TemporaryDirectory(prefix="peers-bench-") as scratch:
            tables.append(((records, value_size), run_shape(settings, binary, records, value_size, Path(scratch))))
    print(f"\nkafka-backup-core {OSO_VERSION} (OSO), kcat {_kcat_version()}, spark-kafka-backup on local[2]; "
          f"{os.cpu_count()} cores", flush=True)  # fmt: skip
    header = (f"  {'':<13} {'wall':>10} {'records/s':>15} {'kcat/x':>5} {'CPU-s':>9} {'CPU-s/M':>7} {'peak MiB':>8} "
              f"{'PSS MiB':>8}")  # fmt: skip
    for (records, value_size), rows in tables:
        print(f"\n{records:,} records of {value_size} B, 4 partitions, one node; every restore counted back")
        print(header)
        for row in rows:
            print(row.line())


def _kcat_version() -> str:
    from benchmarks.cluster import kcat_command

    kcat = kcat_command()
    if kcat is None:
        return "not installed"
    output = subprocess.run([kcat, "-V"], capture_output=True, text=True).stdout
    found = re.search(r"Version (\S+)", output)
    return found[1] if found else "?"


if __name__ == "__main__":
    main()
