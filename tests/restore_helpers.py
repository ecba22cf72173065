"""Running the restore job in tests, and the cluster restores go to."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spark_kafka_backup.format.record import Record
from spark_kafka_backup.partition.offsets_file import write_consumer_offsets
from spark_kafka_backup.partition.writer import PartitionWriter
from spark_kafka_backup.spark_submit import spark_submit_command
from tests.broker import BrokerUnderTest
from tests.kafka_helpers import client_config_file, job_env, job_spark_conf, start_job

REPO = Path(__file__).resolve().parent.parent  # the checkout (tests.conftest imports this module)


@dataclass
class Target:
    """Where restores go: a cluster and a prefix for topic names."""

    broker: BrokerUnderTest
    prefix: str = ""
    counter: list[int] = field(default_factory=lambda: [0])

    def name(self, topic: str) -> str:
        return self.prefix + topic

    def args(self, tmp_path: Path) -> list[str]:
        config = tmp_path / "target.properties"
        client_config_file(config, self.broker.extra_settings)
        return ["--bootstrap-server", self.broker.bootstrap_servers, "--command-config", str(config)]


def restore_command(*args: str | Path, master: str = "local[2]") -> list[str]:
    return spark_submit_command("restore", *args, master=master, conf=job_spark_conf(master))


def run_restore(
    *args: str | Path, master: str = "local[2]", in_process: bool = True
) -> subprocess.CompletedProcess[str]:
    """The restore to its end: its exit code and output. On ``local[2]`` it runs in this worker's process (see
    :mod:`tests.in_process`) unless ``in_process`` is False or :func:`~tests.in_process.can_run_in_process` says no;
    elsewhere as ``spark-submit``."""
    from tests.in_process import job_in_process

    if in_process and master == "local[2]" and (done := job_in_process("restore", args)) is not None:
        return done
    command = restore_command(*args, master=master)
    return subprocess.run(command, capture_output=True, text=True, env=job_env(), cwd=REPO, timeout=600)


def restore_python(*args: str | Path, in_process: bool = True) -> subprocess.CompletedProcess[str]:
    """The restore without ``spark-submit``: for dry runs and errors, which never start Spark. In this process
    (see :mod:`tests.in_process`) unless ``in_process`` is False or :func:`~tests.in_process.can_run_in_process`
    says no; else ``python jobs/restore.py``."""
    from tests.in_process import job_in_process

    if in_process and (done := job_in_process("restore", args)) is not None:
        return done
    return subprocess.run(
        [sys.executable, str(REPO / "jobs" / "restore.py"), *map(str, args)],
        capture_output=True,
        text=True,
        env=job_env(),
        timeout=120,
    )


def group_offsets(broker: BrokerUnderTest, group: str) -> dict[tuple[str, int], int]:
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(broker.client_settings())
    result = {}
    for future in admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).values():
        for tp in future.result().topic_partitions:
            if tp.offset >= 0:
                result[(tp.topic, tp.partition)] = tp.offset
    return result


def comparable(records: list[dict[str, Any]], *, topic: str | None = None) -> list[tuple[Any, ...]]:
    """What must survive a restore: partition, order, key, value, headers, timestamp and its type."""
    return [
        (r["partition"], r["key"], r["value"], r["headers"], r["timestampType"], r["timestamp"])
        for r in records
        if topic is None or r["topic"] == topic
    ]


def committed_end(broker: BrokerUnderTest, topic: str, partitions: int = 2) -> int:
    """The end of committed data summed over the partitions (grows with every committed transaction)."""
    from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient(broker.client_settings())
    if topic not in admin.list_topics(timeout=10).topics:
        return 0
    request = {TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)}
    for _ in range(40):  # a topic just created may not have its leaders yet
        try:
            futures = admin.list_offsets(request, isolation_level=IsolationLevel.READ_COMMITTED)
            return sum(f.result().offset for f in futures.values())
        except KafkaException:
            time.sleep(0.25)
    raise AssertionError(f"cannot list the offsets of {topic}")


def start_restore(*args: str | Path, log: Path, master: str = "local[2]") -> subprocess.Popen[bytes]:
    """Start a restore in its own process group, output to ``log``."""
    return start_job(restore_command(*args, master=master), log)


def killed_after_first_commit(
    broker: BrokerUnderTest, topic: str, partitions: int, *args: str | Path, log: Path
) -> None:
    """Run a restore into ``topic`` until it has committed a transaction there, then SIGKILL its process group (its
    arguments should throttle it, so that it is still producing)."""
    process = start_restore(*args, log=log)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and process.poll() is None and committed_end(broker, topic, partitions) == 0:
        time.sleep(0.1)
    assert process.poll() is None, log.read_text()[-3000:]
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(60)


def write_backup(backup: Path, topic: str, partitions: int, records: int) -> dict[str, dict[int, int]]:
    """A backup with keys, values, headers, gaps, and groups at the start, inside and at the end of each partition."""
    base = (int(time.time()) // 60 - 60) * 60_000
    for partition in range(partitions):
        with PartitionWriter(backup / topic, topic, partition, fsync=False) as writer:
            for i in range(records):
                headers = (("p", b"%d" % partition), ("n", None)) if i % 7 == 0 else ()
                value = None if i % 13 == 0 else b"value-%d-%d-" % (partition, i) * (1 + i % 4)
                writer.append(Record(i * 2, 0, base + i, None if i % 11 == 0 else b"k%d" % i, value, headers))
    groups = {
        "cluster-zero": dict.fromkeys(range(partitions), 0),
        "cluster-mid": {p: 2 * (records // (p + 2)) + 1 for p in range(partitions)},  # inside a gap
        "cluster-end": dict.fromkeys(range(partitions), 2 * records),
    }
    for partition in range(partitions):
        positions = {group: offsets[partition] for group, offsets in groups.items()}
        write_consumer_offsets(backup / topic, partition, positions, sync=False)
    return groups


def check_groups(
    target: Target,
    name: str,
    source: list[dict[str, Any]],
    restored: list[dict[str, Any]],
    groups: dict[str, dict[int, int]],
) -> None:
    """Each group's new offset has exactly the records below its old offset before it, and is inside the log.

    With the records equal (checked by the caller), that pins what a consumer of the group reads next: the first
    record at or after its old offset, or nothing when it had read everything.
    """
    ends = high_watermarks(target.broker, name)
    for group, offsets in groups.items():
        committed = group_offsets(target.broker, group)
        for partition, offset in offsets.items():
            new = committed[(name, partition)]
            before = [r for r in restored if r["partition"] == partition and r["offset"] < new]
            wanted = [r for r in source if r["partition"] == partition and r["offset"] < offset]
            assert comparable(before) == comparable(wanted), (group, partition, offset, new)
            assert new <= ends[partition], f"{group} {name}/{partition}: {new} is past the log end {ends[partition]}"


def high_watermarks(broker: BrokerUnderTest, topic: str) -> dict[int, int]:
    """Each partition's log end offset (transaction markers included)."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient(broker.client_settings())
    partitions = admin.list_topics(topic, timeout=30).topics[topic].partitions
    futures = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in partitions})
    return {tp.partition: future.result().offset for tp, future in futures.items()}
