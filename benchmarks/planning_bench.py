"""Planning at scale: what the driver does per trigger and per consumer-offset round, over many partitions and groups.

Run from the repository root: ``./dev bench planning`` (or ``python -m benchmarks.planning_bench``).

On a local Apache Kafka node (or ``--bootstrap``): ``--topics`` topics (default 200) of ``--partitions-per-topic``
partitions (default 50: 10,000 partitions), one record in each partition, and ``--groups`` consumer groups (default
1,000), group ``i`` holding a committed offset on every partition of topic ``i mod topics``. Then, in this one
Python process, the driver-side code of the backup, timed ``--repeat`` times each:

- ``plan a trigger``: the Python Kafka source's ``latestOffset`` (partition list, earliest and
  latest offsets of every partition) and ``partitions`` (the packed tasks of a micro-batch that reads one new record
  everywhere);
- ``consumer-offset round``: ``take_round``, every group's committed offsets and every partition's end;
- ``raw``: the baseline, the bare admin calls a planner cannot avoid (one metadata request and one latest-offsets
  request for every partition) in the same process.

Printed: median and worst seconds of each, the ratio to ``raw``, and this process's peak resident memory
(the Python half of the driver; the JVM half is Spark's and does not grow with what spark-kafka-backup plans).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from benchmarks.backup_bench import peak_rss_mib
from benchmarks.cluster import cluster
from spark_kafka_backup.backup.group_offsets import take_round
from spark_kafka_backup.kafka.cluster import admin_client, list_offsets, partition_counts
from spark_kafka_backup.kafka.topics import TopicSelection
from spark_kafka_backup.spark.kafka_source import KafkaStreamReader, SourceOptions, decode_offsets, encode_offsets

PREFIX = "plan"


def fill(settings: dict[str, str], topics: int, per_topic: int, groups: int) -> list[str]:
    """Create the topics, put one record in every partition, commit every group's offsets."""
    from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(settings)
    names = [f"{PREFIX}-{t:04d}" for t in range(topics)]
    for start in range(0, len(names), 100):
        for future in admin.create_topics([NewTopic(n, per_topic, 1) for n in names[start : start + 100]]).values():
            future.result(300)
    deadline = time.monotonic() + 600
    while True:
        listed = admin.list_topics(timeout=120).topics
        if all(n in listed and all(p.leader >= 0 for p in listed[n].partitions.values()) for n in names):
            break
        if time.monotonic() > deadline:
            raise SystemExit("the topics have no leader everywhere after 600 s")
        time.sleep(1)
    producer = Producer({**settings, "linger.ms": "50"})
    for name in names:
        for partition in range(per_topic):
            producer.produce(name, value=b"x", partition=partition)
        producer.poll(0)
    if producer.flush(300):
        raise SystemExit("records not delivered")
    pending = []
    for group in range(groups):
        topic = names[group % topics]
        offsets = [TopicPartition(topic, p, 1) for p in range(per_topic)]
        pending.extend(
            admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(f"g-{group:05d}", offsets)]).values()
        )
        if len(pending) >= 100:
            for future in pending:
                future.result(120)
            pending = []
    for future in pending:
        future.result(120)
    return names


def timed(function: Callable[[], object], repeat: int) -> list[float]:
    seconds = []
    for _ in range(repeat):
        started = time.perf_counter()
        function()
        seconds.append(time.perf_counter() - started)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=200)
    parser.add_argument("--partitions-per-topic", type=int, default=50)
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--bootstrap", help="an external cluster instead of a local Apache Kafka node")
    args = parser.parse_args()

    with cluster(args.bootstrap) as settings:
        started = time.perf_counter()
        fill(settings, args.topics, args.partitions_per_topic, args.groups)
        filled = time.perf_counter() - started
        before = peak_rss_mib()
        pattern = f"{PREFIX}-.*"
        reader = KafkaStreamReader(
            SourceOptions.parse({"kafka.bootstrap.servers": settings["bootstrap.servers"], "subscribePattern": pattern,
                                 "includeHeaders": "true", "minPartitions": "2"})
        )  # fmt: skip
        # Each trigger starts one record behind everywhere, as a backup that is kept up to date does.
        start = encode_offsets({key: 0 for key in decode_offsets(reader.initialOffset())})
        from pyspark.sql.streaming.datasource import ReadAllAvailable

        plans: list[int] = []

        def plan() -> None:
            end = reader.latestOffset(start, ReadAllAvailable())
            plans.append(len(reader.partitions(start, end)))

        admin = admin_client(settings)
        selection = TopicSelection(pattern=pattern)
        rounds: list[int] = []

        def offset_round() -> None:
            rounds.append(sum(len(offsets) for offsets in take_round(admin, selection).groups.values()))

        def raw() -> None:
            counts = partition_counts(admin)
            list_offsets(admin, [(t, p) for t in counts if t.startswith(PREFIX) for p in range(counts[t])], latest=True)

        raw_seconds = timed(raw, args.repeat)
        plan_seconds = timed(plan, args.repeat)
        round_seconds = timed(offset_round, args.repeat)
        peak = peak_rss_mib()

    partitions = args.topics * args.partitions_per_topic
    print(f"{partitions:,} partitions in {args.topics} topics, {args.groups:,} groups "
          f"({rounds[0]:,} committed offsets); filled in {filled:.0f} s")  # fmt: skip
    base = statistics.median(raw_seconds)
    for name, seconds in (("raw metadata + latest offsets", raw_seconds), ("plan a trigger", plan_seconds),
                          ("consumer-offset round", round_seconds)):  # fmt: skip
        median = statistics.median(seconds)
        print(f"{name:30} median {median:6.2f} s  worst {max(seconds):6.2f} s  ratio to raw {median / base:5.2f}")
    print(
        f"tasks per micro-batch: {plans[0]}; driver-side Python peak RSS {peak:.0f} MiB ({before:.0f} before planning)"
    )


if __name__ == "__main__":
    main()
