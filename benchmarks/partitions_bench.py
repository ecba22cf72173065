"""Many small partitions: a snapshot backup of T topics x P partitions holding R records each.

Run from the repository root: ``./dev bench partitions`` (or ``python -m benchmarks.partitions_bench``).

For each shape in ``--shapes`` (``partitions:records``, default ``1000:1,1000:100,10000:1,10000:100``)
the topics are created on a local Apache Kafka node (or ``--bootstrap``) in
topics of ``--partitions-per-topic`` partitions, filled, and backed up with
``spark-submit jobs/backup.py --snapshot`` (``local[2]``). Printed per shape:
the job's wall time (Spark start-up included), its time less start-up (submit to
the end of the first batch, less that batch), and seconds per partition.
The backup is checked to hold every record.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from benchmarks.backup_bench import run_backup
from benchmarks.cluster import cluster
from spark_kafka_backup.partition.layout import list_topics
from spark_kafka_backup.partition.reader import PartitionReader


def fill(settings: dict[str, str], prefix: str, partitions: int, per_topic: int, records: int) -> list[str]:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(settings)
    topics = [f"{prefix}-{t:05d}" for t in range((partitions + per_topic - 1) // per_topic)]
    for start in range(0, len(topics), 200):
        futures = admin.create_topics([NewTopic(topic, per_topic, 1) for topic in topics[start : start + 200]])
        for future in futures.values():
            future.result(120)
    # A created topic is not yet known everywhere: produce only once every partition has a leader.
    deadline = time.monotonic() + 300
    while True:
        listed = admin.list_topics(timeout=60).topics
        waiting = [
            t
            for t in topics
            if t not in listed or sum(p.leader >= 0 for p in listed[t].partitions.values()) < per_topic
        ]
        if not waiting:
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"{len(waiting)} topics have no leader for every partition after 300 s")
        time.sleep(1)
    failures: list[str] = []

    def delivered(error: object, message: object) -> None:
        if error is not None:
            failures.append(str(error))

    producer = Producer({**settings, "linger.ms": "100", "message.timeout.ms": "1200000", "on_delivery": delivered})
    for topic in topics:
        for partition in range(per_topic):
            for i in range(records):
                while True:
                    try:
                        producer.produce(topic, key=b"k%d" % i, value=b"v" * 100, partition=partition)
                        break
                    except BufferError:
                        producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(300) == 0, "records still unacknowledged after 300 s"
    assert not failures, f"{len(failures)} records not produced: {failures[0]}"
    return topics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="1000:1,1000:100,10000:1,10000:100")
    parser.add_argument("--partitions-per-topic", type=int, default=10)
    parser.add_argument("--bootstrap", help="an external cluster instead of a local Apache Kafka node")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp, cluster(args.bootstrap) as settings:
        for number, shape in enumerate(args.shapes.split(",")):
            partitions, records = (int(part) for part in shape.split(":"))
            prefix = f"many{number}"
            fill(settings, prefix, partitions, args.partitions_per_topic, records)
            target = Path(tmp) / prefix
            run = run_backup(settings, target, "--topics-regex", f"{prefix}-.*")
            wall, startup = run.usage.wall_seconds, run.startup_seconds
            stored = sum(
                sum(1 for _ in PartitionReader(target / topic, p).records())
                for topic in list_topics(target)
                for p in range(args.partitions_per_topic)
            )
            assert stored == partitions * records, f"{stored} records backed up, {partitions * records} produced"
            results.append((partitions, records, wall, startup))
            print(
                f"{partitions:>6,} partitions x {records:>3} records: {wall:7.1f} s end to end, "
                f"{wall - startup:7.1f} s after start-up ({startup:4.1f} s), "
                f"{(wall - startup) / partitions * 1000:6.1f} ms per partition",
                flush=True,
            )


if __name__ == "__main__":
    main()
