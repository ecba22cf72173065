"""``./dev demo``: the backup job end to end on Apache Kafka, local Spark and local files.

1. Starts Apache Kafka (one KRaft node, from its own jars, fetched from Maven
   Central into a cache on first use) on free loopback ports.
2. Creates sample topics: ``orders`` (3 partitions, keys, headers, a null
   value now and then), ``payments`` (LogAppendTime, written by a
   transactional producer with one aborted transaction) and an empty
   ``audit``; commits offsets for two consumer groups.
3. Runs ``spark-submit jobs/backup.py --snapshot`` into ``demo-backup/``.
4. Shows ``spark-kafka-backup ls`` and ``spark-kafka-backup offsets`` of the result.

Each step says what it does as it starts, and a quiet step says it is still at it every 20 s
(:mod:`devkit.heartbeat`): on a fresh machine fetching Kafka's jars and the class archive of the first job take
minutes.
"""

from __future__ import annotations

import argparse
import contextlib
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from devkit.heartbeat import Heartbeat, run_relayed
from devkit.kafka_cluster import KAFKA_VERSION, KafkaCluster
from spark_kafka_backup.jars import cache_root


def fill(settings: dict[str, str]) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(settings)
    topics = [
        NewTopic("orders", 3, 1),
        NewTopic("payments", 1, 1, config={"message.timestamp.type": "LogAppendTime"}),
        NewTopic("audit", 2, 1),
    ]
    for future in admin.create_topics(topics).values():
        future.result(30)
    producer = Producer(settings)
    now = int(time.time() * 1000)
    for i in range(3000):
        producer.produce(
            "orders",
            key=f"customer-{i % 17}".encode(),
            value=None if i % 50 == 0 else f'{{"order": {i}}}'.encode(),
            headers=[("source", b"demo"), ("trace", None)] if i % 3 == 0 else None,
            partition=i % 3,
            timestamp=now - 3000 + i,
        )
    producer.flush(30)
    transactional = Producer({**settings, "transactional.id": "demo-payments"})
    transactional.init_transactions(30)
    for batch, commit in ((range(0, 40), True), (range(40, 50), False), (range(50, 90), True)):
        transactional.begin_transaction()
        for i in batch:
            transactional.produce("payments", key=f"payment-{i}".encode(), value=f"{i * 10} EUR".encode())
        if commit:
            transactional.commit_transaction(30)
        else:
            # Sent before the abort, so the aborted records take offsets in the log (a purge would drop them).
            transactional.flush(30)
            transactional.abort_transaction(30)
    for group, offsets in (("billing", {0: 1000, 1: 1000, 2: 1000}), ("shipping", {0: 250, 1: 0, 2: 999})):
        consumer = Consumer({**settings, "group.id": group, "enable.auto.commit": "false"})
        consumer.commit(offsets=[TopicPartition("orders", p, o) for p, o in offsets.items()], asynchronous=False)
        consumer.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="demo-backup", help="where to write the backup (replaced)")
    args = parser.parse_args()
    target = Path(args.target).resolve()
    shutil.rmtree(target, ignore_errors=True)
    python = sys.executable
    cache = cache_root()
    print(f"spark-kafka-backup keeps what it fetches and makes once in {cache} (KBACKUP_CACHE moves it): Apache "
          f"Kafka's jars for this demo (about 45 MB), and at the first job a class archive for Spark's JVM (about "
          f"160 MB, one for all checkouts; 10 s to a few minutes to make; one no job used for a day is removed when "
          f"another is made)",
          flush=True)  # fmt: skip
    print(f"starting Apache Kafka {KAFKA_VERSION} (one KRaft node; its jars from Maven Central the first time)",
          flush=True)  # fmt: skip
    with contextlib.ExitStack() as running:
        with Heartbeat("starting Apache Kafka"):
            broker = running.enter_context(KafkaCluster())
        settings = broker.client_settings()
        print(f"{broker.describe()} on {broker.bootstrap_servers}; creating topics orders, payments, audit", flush=True)
        with Heartbeat("writing the sample records"):
            fill(settings)
        shown = ["backup", "--bootstrap-server", broker.bootstrap_servers, "--target-dir", str(target),
                 "--topics", "orders,payments,audit", "--snapshot", "--master", "local[2]"]  # fmt: skip
        command = [str(Path(python).parent / "spark-kafka-backup"), *shown]
        print(f"$ spark-kafka-backup {shlex.join(shown)}", flush=True)
        # Its log lines and the launcher's own (a class archive being made) as they come; Spark's are off.
        result = run_relayed(command, "running the backup job", shown=_worth_showing)
        if result.returncode != 0:
            print("".join(result.stdout)[-5000:] + "".join(result.stderr)[-5000:], file=sys.stderr)
            return result.returncode
    for view in (["ls", str(target)], ["offsets", str(target)]):
        print(f"\n$ spark-kafka-backup {' '.join(view)}", flush=True)
        subprocess.run([python, "-m", "spark_kafka_backup", *view], check=True)
    activate = Path(sys.prefix) / "bin" / "activate"
    print(
        f"\nthe backup is in {target}/. To look further, in a new shell (once per shell: puts spark-kafka-backup on "
        "PATH):"
    )
    print(f"  source {shlex.quote(str(activate))}")
    print(f"  spark-kafka-backup cat {shlex.quote(str(target))} --topic payments")
    return 0


def _worth_showing(line: str) -> bool:
    """The job's log lines and the launcher's (``spark-kafka-backup: ...``), not Spark's console progress bars."""
    return " spark-kafka-backup " in line or line.startswith("spark-kafka-backup")


if __name__ == "__main__":
    sys.exit(main())
