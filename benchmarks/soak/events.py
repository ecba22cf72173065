"""What the cluster does to the backup during the soak, one event at a time, in rotation.

Each event is something a production cluster does while a continuous backup runs: a rolling restart of every
broker, a Spark worker (with its executors) killed and started again, topics created and deleted, partitions
added, retention deleting the head of a busy partition, consumer groups joining, committing and leaving, and the
operator's own checkpoints and prunes. :class:`Chaos` runs them in rotation and notes when each began and ended.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.soak.load import LoadGenerator
from devkit.kafka_cluster import KafkaCluster
from devkit.spark_cluster import SparkCluster

#: Checkpoints a prune keeps (the soak restores every one left at the end).
KEEP_CHECKPOINTS = 4


@dataclass
class Happened:
    at_s: float
    took_s: float
    name: str
    detail: str = ""


@dataclass
class Chaos:
    kafka: KafkaCluster
    spark: SparkCluster
    load: LoadGenerator
    backup_dir: Path
    metrics_file: Path
    partitions: int
    #: The topic whose replicas the reassignment moves (replication factor 2, so a move copies data).
    moved_topic: str
    happened: list[Happened] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    #: Each prune's end (unix time), and the first offset the backup held of each partition before and after it.
    #: An offset a group commits later in what a prune let go asks for records the backup no longer has, by the rule
    #: prune follows.
    held_from: list[tuple[float, dict[tuple[str, int], int], dict[tuple[str, int], int]]] = field(default_factory=list)
    _created: int = 0
    _groups: int = 0
    _admin_client: Any = None

    def rotation(self) -> list[tuple[str, Callable[[], str]]]:
        """What the cluster does, in turn (the operator's checkpoints and prunes have times of their own)."""
        return [
            ("topic created", self.create_topic),
            ("broker rolling restart", self.rolling_restart),
            ("consumer group joins and leaves", self.consumer_group),
            ("partitions added", self.add_partitions),
            ("retention deletes a head", self.delete_head),
            ("spark worker killed", self.kill_worker),
            ("topic deleted", self.delete_topic),
            ("partition reassignment", self.reassign),
        ]

    def run(self, stop: threading.Event, every: float, started: float, *, checkpoint_every: float,
            prune_every: float) -> None:  # fmt: skip
        """Events in rotation, one every ``every`` seconds, a checkpoint every ``checkpoint_every`` and a prune every
        ``prune_every`` seconds, until ``stop``; whatever is due runs when the one before it ends."""
        rotation = self.rotation()
        number = 0
        due = {"rotation": started + every / 2, "checkpoint": started + 10, "prune": started + prune_every}
        while True:
            kind = min(due, key=lambda k: due[k])
            if stop.wait(max(0.0, due[kind] - time.monotonic())):
                return
            if kind == "rotation":
                name, event = rotation[number % len(rotation)]
                number += 1
                due[kind] += every
            else:
                name, event = kind, self.checkpoint if kind == "checkpoint" else self.prune
                due[kind] += checkpoint_every if kind == "checkpoint" else prune_every
            begun = time.monotonic()
            try:
                detail = event()
            except Exception as exc:  # noted, the soak goes on: the backup is what is under test
                detail = f"failed: {type(exc).__name__}: {exc}"
                self.failures.append(f"{name}: {detail}")
            self.happened.append(Happened(round(begun - started, 1), round(time.monotonic() - begun, 1), name, detail))
            print(f"soak: {begun - started:7.0f} s  {name}: {detail}", flush=True)

    # -- the events --------------------------------------------------------------------------------------------

    def _admin(self) -> Any:
        """One admin client for every event (a client dropped while its futures are waited on is destroyed)."""
        from confluent_kafka.admin import AdminClient

        if self._admin_client is None:
            self._admin_client = AdminClient({**self.kafka.client_settings(), "log_level": "0"})
        return self._admin_client

    def create_topic(self) -> str:
        from confluent_kafka.admin import NewTopic

        self._created += 1
        name = f"soak-new-{self._created:02d}"
        for future in self._admin().create_topics([NewTopic(name, self.partitions, 3)]).values():
            future.result(60)
        self.load.add_topic(name)
        return name

    def delete_topic(self) -> str:
        created = [t for t in self.load.topics() if t.startswith("soak-new-")]
        victim = created[0] if created else self.load.topics()[-1]
        self.load.drop_topic(victim)
        time.sleep(2)  # the producers' last records to it are acknowledged or failed
        # An operator deletes a topic whose records are backed up: the backup reads them first (a topic deleted
        # before is a loss at the source the soak does not measure).
        waited = self._wait_backed_up(victim, 120)
        for future in self._admin().delete_topics([victim]).values():
            future.result(60)
        return f"{victim} (backed up {waited:.0f} s after its last record)"

    def add_partitions(self) -> str:
        from confluent_kafka.admin import NewPartitions

        topic = self.load.topics()[1]
        current = len(self._admin().list_topics(topic, timeout=30).topics[topic].partitions)
        for future in self._admin().create_partitions([NewPartitions(topic, current + 2)]).values():
            future.result(60)
        return f"{topic}: {current} -> {current + 2}"

    def delete_head(self) -> str:
        from confluent_kafka import TopicPartition

        topic = self.load.topics()[2]
        consumer = self._consumer("soak-watermarks")
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        finally:
            consumer.close()
        cut = low + (high - low) // 2
        deadline = time.monotonic() + 90
        while True:  # again on a leader that moved (a second hour-long run lost one to NOT_LEADER_FOR_PARTITION)
            try:
                for future in self._admin().delete_records([TopicPartition(topic, 0, cut)]).values():
                    future.result(60)
                break
            except Exception as exc:
                if "NOT_LEADER" not in str(exc) and "LEADER_NOT_AVAILABLE" not in str(exc):
                    raise
                if time.monotonic() > deadline:
                    raise
                self._admin().list_topics(topic, timeout=30)  # fresh metadata: the new leader
                time.sleep(3)
        return f"{topic}/0: log start {low} -> {cut}"

    def consumer_group(self) -> str:
        self._groups += 1
        group = f"soak-group-{self._groups % 3}"
        consumer = self._consumer(group, subscribe=self.load.topics()[:3])
        read = 0
        deadline = time.monotonic() + 20
        try:
            while time.monotonic() < deadline and read < 2000:
                message = consumer.poll(1.0)
                if message is not None and message.error() is None:
                    read += 1
            consumer.commit(asynchronous=False)
        finally:
            consumer.close()  # leaves the group
        return f"{group} read {read} and committed"

    def rolling_restart(self) -> str:
        for node in self.kafka.nodes:
            self.kafka.kill_node(node.node_id, signal.SIGTERM)
            self.kafka.start_node(node.node_id)
            self._wait_in_sync(300)
        return f"{len(self.kafka.nodes)} brokers restarted one by one"

    def reassign(self) -> str:
        """Every partition of the moved topic to the next pair of brokers: one replica copied to a broker that had
        none, the preferred leader moved, through Kafka's Admin API (Reassign.java)."""
        from devkit.kafka_cluster import kafka_jars
        from spark_kafka_backup.jars import classpath

        brokers = sorted(node.node_id for node in self.kafka.nodes)
        described = self._admin().list_topics(self.moved_topic, timeout=30).topics[self.moved_topic].partitions
        moves = []
        for partition, metadata in sorted(described.items()):
            missing = [b for b in brokers if b not in metadata.replicas]
            moves.append(f"{partition}={missing[0]},{metadata.replicas[0]}")
        done = subprocess.run(["java", "-cp", classpath(kafka_jars()), str(Path(__file__).with_name("Reassign.java")),
                               self.kafka.bootstrap_servers, self.moved_topic, *moves],
                              capture_output=True, text=True, timeout=900)  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError((done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1])
        return f"{done.stdout.strip()}: {' '.join(moves)}"

    def kill_worker(self) -> str:
        index = len(self.happened) % self.spark.workers
        self.spark.kill_worker(index)
        time.sleep(15)
        self.spark.start_worker(index)
        self.spark.wait_for_workers(self.spark.workers)
        return f"worker {index} killed, started again"

    def checkpoint(self) -> str:
        return _cli("checkpoint", "create", str(self.backup_dir))

    def prune(self) -> str:
        before = first_held(self.backup_dir)
        try:
            return _cli("prune", str(self.backup_dir), "--keep-checkpoints", str(KEEP_CHECKPOINTS))
        finally:
            # Stamped with the prune's end: an offset read before may have been seen by it, and is held to it.
            self.held_from.append((time.time(), before, first_held(self.backup_dir)))

    # -- helpers -----------------------------------------------------------------------------------------------

    def _consumer(self, group: str, subscribe: list[str] | None = None) -> Any:
        from confluent_kafka import Consumer

        consumer = Consumer({**self.kafka.client_settings(), "group.id": group, "enable.auto.commit": "false",
                             "auto.offset.reset": "earliest", "log_level": "0"})  # fmt: skip
        if subscribe:
            consumer.subscribe(subscribe)
        return consumer

    def _wait_backed_up(self, topic: str, timeout: float) -> float:
        """Until the backup's metrics show no lag on ``topic``; the seconds waited."""
        began, since = time.monotonic(), time.time()
        first_zero: float | None = None
        while time.monotonic() - began < timeout:
            time.sleep(5)
            try:
                document = json.loads(self.metrics_file.read_text())
                metrics, updated = document["metrics"], float(document["updated_at"])
            except (OSError, ValueError, KeyError, TypeError):
                continue
            lags = [m["value"] for m in metrics
                    if m["name"] == "kbackup_backup_lag_records" and m["labels"].get("topic") == topic]  # fmt: skip
            if not (lags and all(lag == 0 for lag in lags)) or updated < since:
                first_zero = None
                continue
            # Twice, 10 s apart: the lag's last stable offsets are sampled every few seconds, not with each write.
            first_zero = updated if first_zero is None else first_zero
            if updated - first_zero >= 10:
                return time.monotonic() - began
        raise TimeoutError(f"the backup did not catch up with {topic} in {timeout:.0f} s")

    def _wait_in_sync(self, timeout: float) -> None:
        """Until every partition of every topic has all three replicas in sync again."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                topics = self._admin().list_topics(timeout=10).topics
                if all(len(p.isrs) == len(p.replicas) for t in topics.values() for p in t.partitions.values()):
                    return
            except Exception:
                pass
            time.sleep(2)
        raise TimeoutError(f"replicas not in sync {timeout:.0f} s after a broker restart")


def _cli(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "spark_kafka_backup", *args], capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}")
    lines = done.stdout.strip().splitlines()
    return lines[-1] if lines else "done"


def first_held(backup_dir: Path) -> dict[tuple[str, int], int]:
    """The first offset of every partition's first cataloged segment."""
    from spark_kafka_backup.catalog.store import read_catalog
    from spark_kafka_backup.partition.layout import list_partitions, list_topics
    from spark_kafka_backup.storage import parse_location

    root = parse_location(str(backup_dir))
    found: dict[tuple[str, int], int] = {}
    for topic in list_topics(root):
        for partition in list_partitions(root / topic):
            catalog = read_catalog(root, topic, partition)
            if catalog is not None and catalog.segments:
                found[(topic, partition)] = catalog.segments[0].start_offset
    return found
