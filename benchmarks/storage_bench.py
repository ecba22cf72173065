"""Request cost on object storage: requests per GB and per hour of a continuous backup, a restore, a merge and a
prune into an S3 API server (``./dev bench storage``, or ``python -m benchmarks.storage_bench``).

A local Apache Kafka node (or ``--bootstrap``) and moto's S3 server in server mode, with a counting proxy in front
of it (``tests/fault_proxy.py``, injecting nothing): every request a job sends reaches the server through it, and it
counts them by kind (PUT, POST, GET, HEAD, LIST, DELETE). For each trigger interval in ``--triggers`` and each
segment size in ``--segment-sizes``, a topic of ``--partitions`` partitions receives ``--rate`` MB/s of 1 KB records
for ``--seconds`` while a continuous backup (``--trigger-interval``, ``--max-segment-size``) writes it to a fresh
prefix; the load stops, the backup gets one more trigger interval and is stopped as an operator stops it (SIGTERM to
its Python driver). Then, each from the same backup: a restore into a new topic, a ``merge`` and a ``prune
--older-than 1s``. The counts are per GB of record bytes produced (keys and values), and the backup's also per hour
of the load; the monthly cost of that load kept up for a month is priced at the list prices in :data:`PRICES`.

Not part of CI: a run takes about 3 minutes per combination (4 by default).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from benchmarks.cluster import cluster
from spark_kafka_backup.spark_submit import job_environment, spark_submit_command
from tests.fault_proxy import FaultProxy
from tests.kafka_helpers import client_config_file
from tests.s3_server import s3_server_under_test

#: List prices per 1,000 requests and per GB-month, US regions, as their pages give them (December 2026): S3
#: Standard (us-east-1), Google Cloud Storage Standard (us-central1). PUT, POST, COPY and LIST are S3's dearer class
#: (GCS's Class A), GET and HEAD the cheaper (Class B); DELETE is free on both.
PRICES = {
    "S3 Standard": {"write": 0.005, "read": 0.0004, "gb_month": 0.023},
    "GCS Standard": {"write": 0.005, "read": 0.0004, "gb_month": 0.020},
}
WRITES, READS = ("PUT", "POST", "LIST"), ("GET", "HEAD")
KINDS = ("PUT", "POST", "GET", "HEAD", "LIST", "DELETE")
RECORD_BYTES = 1000  # a 10-byte key and a 990-byte value
_DRIVER_PID = re.compile(rb"stop with SIGTERM to the driver process (\d+)")


@dataclass(frozen=True)
class Window:
    """The backup's requests while it kept up with the load: from its first batch that wrote records to the load's
    end (start-up, the last batch and the stop left out), and that window's length."""

    counts: Counter[str]
    hours: float


@dataclass(frozen=True)
class Phase:
    name: str
    counts: Counter[str]
    gigabytes: float
    steady: Window | None = None

    def per_gb(self, kind: str) -> float:
        return self.counts[kind] / self.gigabytes

    def cost_per_gb(self, prices: dict[str, float]) -> float:
        writes = sum(self.counts[k] for k in WRITES)
        reads = sum(self.counts[k] for k in READS)
        return (writes * prices["write"] + reads * prices["read"]) / 1000 / self.gigabytes


def parse_size(text: str) -> int:
    number, unit = re.fullmatch(r"(\d+)\s*(KiB|MiB|GiB|)", text.strip()).groups()  # type: ignore[union-attr]
    return int(number) * {"": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[unit]


def produce_at_rate(settings: dict[str, str], topic: str, partitions: int, rate_mb: float, seconds: float) -> int:
    """``rate_mb`` MB/s of 1 KB records into ``topic`` for ``seconds``; the records produced."""
    from confluent_kafka import Producer

    producer = Producer({**settings, "linger.ms": "20", "compression.type": "none"})
    per_second = int(rate_mb * 1_000_000 / RECORD_BYTES)
    value = os.urandom(RECORD_BYTES - 10)
    sent = 0
    started = time.monotonic()
    while (elapsed := time.monotonic() - started) < seconds:
        due = int(elapsed * per_second) + 1
        while sent < due:
            try:
                producer.produce(topic, key=b"k%09d" % sent, value=value, partition=sent % partitions)
                sent += 1
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
        time.sleep(0.01)
    producer.flush(60)
    return sent


_WROTE = re.compile(rb"batch \d+: [\d,]+ records, [\d,]+ bytes written")


class _SteadyWindow(threading.Thread):
    """Notes the proxy's counts when the backup logs its first batch that wrote records; :meth:`close` at the load's
    end gives the window since."""

    def __init__(self, proxy: FaultProxy, log: Path) -> None:
        super().__init__(daemon=True)
        self.proxy, self.log = proxy, log
        self.began: tuple[float, Counter[str]] | None = None
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(0.2):
            if _WROTE.search(self.log.read_bytes()):
                self.began = (time.monotonic(), Counter(self.proxy.served))
                return

    def close(self) -> Window:
        ended = (time.monotonic(), Counter(self.proxy.served))
        self._done.set()
        self.join()
        if self.began is None:
            raise SystemExit(f"the backup wrote no batch while the load ran: see {self.log}")
        return Window(ended[1] - self.began[1], (ended[0] - self.began[0]) / 3600)


def create_topic(settings: dict[str, str], topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(settings)  # kept while the futures are answered
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(30)


def run_combination(settings: dict[str, str], proxy: FaultProxy, env: dict[str, str], bucket: str, work: Path,
                    args: argparse.Namespace, trigger: float, segment: int) -> list[Phase]:  # fmt: skip
    label = f"t{trigger:g}s-{segment >> 20}m"
    topic, root = f"cost-{label}", f"s3://{bucket}/{label}"
    create_topic(settings, topic, args.partitions)
    config = client_config_file(work / f"{label}.properties", settings)
    log = work / f"{label}-backup.log"
    command = spark_submit_command(
        "backup", "--bootstrap-server", settings["bootstrap.servers"], "--command-config", config,
        "--target-dir", root, "--topics", topic, "--trigger-interval", f"{trigger:g}",
        "--max-segment-size", str(segment), "--checkpoint-location", work / f"{label}-state",
    )  # fmt: skip
    proxy.reset_counts()
    with open(log, "ab") as out:
        job = subprocess.Popen([str(c) for c in command], stdout=out, stderr=subprocess.STDOUT, env=env,
                               start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while not _DRIVER_PID.search(log.read_bytes()):
            if job.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the backup did not start: see {log}")
            time.sleep(0.5)
        steady = _SteadyWindow(proxy, log)
        steady.start()
        records = produce_at_rate(settings, topic, args.partitions, args.rate, args.seconds)
        window = steady.close()
        time.sleep(trigger + 15)  # the last micro-batch
        os.kill(int(_DRIVER_PID.findall(log.read_bytes())[-1]), signal.SIGTERM)
        code = job.wait(120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)
    if code not in (0, 143):
        raise SystemExit(f"the backup ended with {code}: see {log}")
    gigabytes = records * RECORD_BYTES / 1e9
    phases = [Phase("backup", Counter(proxy.served), gigabytes, window)]

    proxy.reset_counts()
    restore = spark_submit_command(
        "restore", "--bootstrap-server", settings["bootstrap.servers"], "--command-config", config,
        "--source-dir", root, "--topic-map", f"{topic}={topic}-restored",
    )  # fmt: skip
    _run([str(c) for c in restore], env, work / f"{label}-restore.log")
    phases.append(Phase("restore", Counter(proxy.served), gigabytes))
    for name, cli in (("merge", ["merge", root]), ("prune", ["prune", root, "--older-than", "1s"])):
        proxy.reset_counts()
        _run([sys.executable, "-m", "spark_kafka_backup", *cli], env, work / f"{label}-{name}.log")
        phases.append(Phase(name, Counter(proxy.served), gigabytes))
    return phases


def _run(command: list[str], env: dict[str, str], log: Path) -> None:
    with open(log, "ab") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command[:3])} ... failed ({done.returncode}): see {log}")


def report(results: dict[tuple[float, int], list[Phase]], args: argparse.Namespace) -> None:
    print(f"\nrequests per GB of record bytes ({args.partitions} partitions, {args.rate:g} MB/s of 1 KB records "
          f"for {args.seconds:g} s per combination; moto's S3 behind a counting proxy)")  # fmt: skip
    print(f"{'trigger':>8} {'segment':>8} {'phase':>8} " + " ".join(f"{k:>8}" for k in KINDS) + "  $/GB (S3)")
    for (trigger, segment), phases in results.items():
        for phase in phases:
            cells = " ".join(f"{phase.per_gb(k):8.0f}" for k in KINDS)
            cost = phase.cost_per_gb(PRICES["S3 Standard"])
            print(f"{trigger:7g}s {segment >> 20:6d}Mi {phase.name:>8} {cells}  {cost:.4f}")
    print(f"\na month of this load ({args.rate:g} MB/s, {args.rate * 3600 * 730 / 1000:,.0f} GB a month), "
          "the continuous backup's requests while it keeps up, priced at each provider's list prices (the counts "
          "are S3's), and a month of its bytes stored:")  # fmt: skip
    for (trigger, segment), phases in results.items():
        steady = phases[0].steady
        assert steady is not None
        per_hour = {k: steady.counts[k] / steady.hours for k in KINDS}
        writes, reads = sum(per_hour[k] for k in WRITES), sum(per_hour[k] for k in READS)
        monthly_gb = args.rate * 3600 * 730 / 1000
        line = [f"  trigger {trigger:g} s, segments up to {segment >> 20} MiB: {writes:,.0f} PUT/POST/LIST and "
                f"{reads:,.0f} GET/HEAD an hour (over {steady.hours * 3600:.0f} s of keeping up)"]  # fmt: skip
        for provider, prices in PRICES.items():
            requests = writes * prices["write"] + reads * prices["read"]
            line.append(f"{provider}: ${requests * 730 / 1000:,.2f} requests + ${monthly_gb * prices['gb_month']:,.2f} "
                        "storage")  # fmt: skip
        print("; ".join(line))
        batches = trigger and steady.hours * 3600 / trigger
        print(
            f"    per partition and micro-batch (about {batches:.0f} batches): "
            + ", ".join(f"{steady.counts[k] / batches / args.partitions:.1f} {k}" for k in KINDS)
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", help="an external cluster instead of a local Apache Kafka node")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rate", type=float, default=1.0, help="MB/s of records while the load runs (default 1)")
    parser.add_argument("--seconds", type=float, default=60, help="how long the load runs per combination")
    parser.add_argument("--triggers", default="5,30", help="trigger intervals in seconds (default 5,30)")
    parser.add_argument("--segment-sizes", default="1MiB,16MiB", help="--max-segment-size values (default 1MiB,16MiB)")
    args = parser.parse_args()
    triggers = [float(t) for t in args.triggers.split(",")]
    sizes = [parse_size(s) for s in args.segment_sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="kbackup-storage-bench-") as scratch, cluster(args.bootstrap) as settings:
        work = Path(scratch)
        (work / "s3").mkdir()
        with s3_server_under_test(work / "s3") as server:
            proxy = FaultProxy(server.endpoint, "s3").start()
            try:
                env = {**job_environment(), **server.env, "AWS_ENDPOINT_URL": proxy.endpoint}
                os.environ.update({k: v for k, v in env.items() if k.startswith("AWS_")})
                bucket = server.new_bucket()
                results: dict[tuple[float, int], list[Phase]] = {}
                for trigger in triggers:
                    for size in sizes:
                        print(f"trigger {trigger:g} s, segments up to {size >> 20} MiB ...", flush=True)
                        results[(trigger, size)] = run_combination(settings, proxy, env, bucket, work, args,
                                                                   trigger, size)  # fmt: skip
                report(results, args)
            finally:
                proxy.close()


if __name__ == "__main__":
    main()
