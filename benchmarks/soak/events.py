"""What the cluster does to the backup during the soak, one event at a time, in rotation.

Each event is something a production cluster does while a continuous backup runs: a rolling restart of every
broker, a Spark worker (with its executors) killed and started again, topics created and deleted, partitions
added, retention deleting the head of a busy partition, consumer groups joining, committing and leaving, and the
operator's own checkpoints and prunes. :class:`Chaos` runs them in rotation and notes when each began and ended.
"""

from __future__ import annotations

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
from spark_kafka_backup.devkit.kafka_cluster import KafkaCluster
from spark_kafka_backup.devkit.spark_cluster import SparkCluster


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
    partitions: int
    happened: list[Happened] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    _created: int = 0
    _groups: int = 0
    _admin_client: Any = None

    def rotation(self) -> list[tuple[str, Callable[[], str]]]:
        return [
            ("checkpoint", self.checkpoint),
            ("topic created", self.create_topic),
            ("broker rolling restart", self.rolling_restart),
            ("consumer group joins and leaves", self.consumer_group),
            ("partitions added", self.add_partitions),
            ("retention deletes a head", self.delete_head),
            ("spark worker killed", self.kill_worker),
            ("topic deleted", self.delete_topic),
            ("prune", self.prune),
        ]

    def run(self, stop: threading.Event, every: float, started: float) -> None:
        """Events in rotation, one every ``every`` seconds, until ``stop``."""
        rotation = self.rotation()
        number = 0
        while not stop.wait(every if number else every / 2):
            name, event = rotation[number % len(rotation)]
            number += 1
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
        for future in self._admin().delete_topics([victim]).values():
            future.result(60)
        return victim

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
        for future in self._admin().delete_records([TopicPartition(topic, 0, cut)]).values():
            future.result(60)
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
        return _cli("prune", str(self.backup_dir), "--keep-checkpoints", "3")

    # -- helpers -----------------------------------------------------------------------------------------------

    def _consumer(self, group: str, subscribe: list[str] | None = None) -> Any:
        from confluent_kafka import Consumer

        consumer = Consumer({**self.kafka.client_settings(), "group.id": group, "enable.auto.commit": "false",
                             "auto.offset.reset": "earliest", "log_level": "0"})  # fmt: skip
        if subscribe:
            consumer.subscribe(subscribe)
        return consumer

    def _wait_in_sync(self, timeout: float) -> None:
        """Until every partition of every topic has all three replicas in sync again."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                topics = self._admin().list_topics(timeout=10).topics
                if all(len(p.isrs) == 3 for t in topics.values() for p in t.partitions.values()):
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
