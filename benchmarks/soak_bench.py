"""A day in the life: a continuous backup through everything a cluster does, measured (``./dev bench soak``).

A 3-node Apache Kafka cluster and a Spark standalone cluster of 2 workers on this machine; a load across dozens of
topics (:mod:`benchmarks.soak.load`); a continuous backup with ``--compression zstd`` on the standalone cluster;
meanwhile the events of :mod:`benchmarks.soak.events` in rotation (each at least twice in a run of the default
length or longer); every few seconds the figures of :mod:`benchmarks.soak.samples`. At the end the load stops, the
backup catches up and stops, the backup is restored into a fresh Kafka cluster and compared record by record with
what the source holds (:mod:`benchmarks.soak.compare`). Writes ``samples.csv``, ``events.csv``, ``soak.svg`` and
``summary.json`` into ``--out``.

Not part of CI: a run takes ``--minutes`` plus the set-up and the restore.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import asdict
from pathlib import Path

from benchmarks.soak.chart import render
from benchmarks.soak.compare import compare, read_all
from benchmarks.soak.events import Chaos
from benchmarks.soak.load import LoadGenerator, LoadShape
from benchmarks.soak.samples import Sampler
from spark_kafka_backup.devkit.kafka_cluster import KafkaCluster
from spark_kafka_backup.devkit.spark_cluster import SparkCluster
from spark_kafka_backup.spark_submit import job_environment, spark_submit_command

REPLICATED = {
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    # A producer's queued records to a topic just deleted would create it again (another incarnation, which the
    # backup rightly refuses to mix in): topics are created by the soak alone.
    "auto.create.topics.enable": "false",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--topics", type=int, default=24)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--rate", type=float, default=400, help="records per second in all, between bursts")
    parser.add_argument("--out", type=Path, default=Path("soak-results"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="kbackup-soak-"))
    backup_dir, log_file, metrics_file = work / "backup", args.out / "backup.log", work / "metrics.json"
    with KafkaCluster(3, broker_config=REPLICATED) as kafka, SparkCluster(workers=2, cores=1) as spark:
        print(f"soak: {kafka.describe()} at {kafka.bootstrap_servers}; {spark.describe()}", flush=True)
        topics = [f"soak-{n:02d}" for n in range(args.topics)]
        _create(kafka, topics, args.partitions)
        load = LoadGenerator(kafka.client_settings(), topics, LoadShape(rate=args.rate))
        load.start()
        backup = _start_backup(kafka, spark, backup_dir, metrics_file, log_file, work)
        _wait_first_batch(metrics_file, backup, 600)
        started = time.monotonic()
        sampler = Sampler(args.out / "samples.csv", driver_pid=backup.pid,
                          worker_pids=[node.process.pid for node in spark.nodes if node.process is not None],
                          metrics_file=metrics_file, backup_dir=backup_dir, log_file=log_file)  # fmt: skip
        sampler.start()
        chaos = Chaos(kafka, spark, load, backup_dir, args.partitions)
        every = max(20.0, args.minutes * 60 / (2 * len(chaos.rotation()) + 1))
        # On this thread: a broker or worker started again by another thread would die with it (the devkit's
        # processes die with the thread that started them).
        stop = threading.Event()
        threading.Timer(args.minutes * 60, stop.set).start()
        chaos.run(stop, every, started)
        load.stop()
        caught_up = _wait_caught_up(sampler, 300)
        backup.send_signal(signal.SIGTERM)
        code = backup.wait(300)
        sampler.stop()
        source = read_all(kafka.client_settings(), _alive_topics(kafka))
        with KafkaCluster(1) as target:
            restored_code = _restore(target, spark, backup_dir, args.out / "restore.log")
            restored = read_all(target.client_settings(), _alive_topics(target))
        result = compare(source, restored)
    summary = {
        "minutes": args.minutes,
        "kafka": kafka.describe(),
        "spark": spark.describe(),
        "backup_exit": code,
        "caught_up": caught_up,
        "restore_exit": restored_code,
        "comparison": asdict(result),
        "sent": sum(load.counts.sent.values()),
        "failed_sends": sum(load.counts.failed.values()),
        "load_error": load.error,
        "aborted_transactions": sum(load.counts.aborted.values()),
        "event_failures": chaos.failures,
        "log_kinds": dict(sampler.kinds.most_common(30)),
    }
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    with open(args.out / "events.csv", "w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["at_s", "took_s", "event", "detail"])
        writer.writerows([h.at_s, h.took_s, h.name, h.detail] for h in chaos.happened)
    rows = [asdict(row) for row in sampler.rows]
    title = f"soak: {args.minutes:g} min, {kafka.describe()}, {spark.describe()}"
    (args.out / "soak.svg").write_text(render(rows, [(h.at_s, h.name) for h in chaos.happened], title))
    print(json.dumps(summary, indent=1), flush=True)


def _create(kafka: KafkaCluster, topics: list[str], partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(kafka.client_settings())
    for future in admin.create_topics([NewTopic(t, partitions, 3) for t in topics]).values():
        future.result(60)


def _alive_topics(kafka: KafkaCluster) -> list[str]:
    from confluent_kafka.admin import AdminClient

    topics = AdminClient(kafka.client_settings()).list_topics(timeout=30).topics
    return sorted(t for t in topics if not t.startswith("__"))


def _start_backup(kafka: KafkaCluster, spark: SparkCluster, backup_dir: Path, metrics_file: Path, log_file: Path,
                  work: Path) -> subprocess.Popen[bytes]:  # fmt: skip
    command = spark_submit_command(
        "backup", "--bootstrap-server", kafka.bootstrap_servers, "--topics-regex", "soak-.*",
        "--target-dir", backup_dir, "--checkpoint-location", work / "spark-checkpoint", "--compression", "zstd",
        "--trigger-interval", "5", "--offsets-interval", "30", "--metrics-file", metrics_file,
        "--metrics-interval", "5", "--max-segment-size", str(16 << 20),
        master=spark.master_url,
    )  # fmt: skip
    env = job_environment(master=spark.master_url)
    with open(log_file, "wb") as log:
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _wait_first_batch(metrics_file: Path, backup: subprocess.Popen[bytes], timeout: float) -> None:
    """Until the backup has written its first batch (the events start then: a checkpoint needs a running backup)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if backup.poll() is not None:
            raise SystemExit(f"soak: the backup exited ({backup.returncode}) before its first batch: see backup.log")
        try:
            metrics = json.loads(metrics_file.read_text()).get("metrics", [])
        except (OSError, ValueError):
            metrics = []
        if any(m["name"] == "kbackup_backup_last_batch_timestamp_seconds" and m["value"] for m in metrics):
            return
        time.sleep(2)
    raise SystemExit("soak: no batch from the backup in time: see backup.log")


def _wait_caught_up(sampler: Sampler, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = sampler.take()
        if row.lag_records == 0 and row.batch_age_s >= 0:
            return True
        time.sleep(5)
    return False


def _restore(target: KafkaCluster, spark: SparkCluster, backup_dir: Path, log_file: Path) -> int:
    command = spark_submit_command("restore", "--bootstrap-server", target.bootstrap_servers, "--source-dir",
                                   backup_dir, master=spark.master_url)  # fmt: skip
    with open(log_file, "wb") as log:
        env = job_environment(master=spark.master_url)
        return subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env, timeout=3600).returncode


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
