"""Broker failures on a three-node Apache Kafka cluster (replication factor 3, ``min.insync.replicas=2``).

The leader of a partition being read is killed (``kill -9``) during a continuous backup and started again a
while later; then the whole cluster is down for 30 s. The backup goes on by itself, says so in its progress
lines, and holds every record and group offset exactly once. The leader of a partition being written is killed
during a restore: the restore ends on its own or with one line, and a rerun completes it exactly.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devkit.kafka_cluster import KafkaCluster
from spark_kafka_backup.kafka.cluster import PROGRESS_GROUP
from spark_kafka_backup.partition.offsets_file import read_consumer_offsets
from spark_kafka_backup.spark.stack_dumps import ENVIRONMENT_VARIABLE
from tests.broker import BrokerUnderTest
from tests.jvm_archive import kafka_node_options
from tests.kafka_helpers import backed_up, commit_offsets, consume_all, create_topics, kill_job, start_backup
from tests.live_load import Producer, batches, client_args, more_batches, wait_for
from tests.restore_helpers import (
    Target,
    check_groups,
    committed_end,
    comparable,
    run_restore,
    start_restore,
    write_backup,
)


@pytest.fixture(scope="module")
def cluster_of_three() -> Iterator[tuple[KafkaCluster, BrokerUnderTest]]:
    # Failover timings are Kafka's defaults (broker.session.timeout.ms and the rest); the quick JIT only saves CPU.
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, ConfigResource

    with KafkaCluster(3, quick_jit=True, java_options=kafka_node_options()) as cluster:
        broker = BrokerUnderTest("local", cluster.bootstrap_servers, description=cluster.describe())
        _all_up(cluster, broker)
        # What the failure tests rely on: a new topic gets three replicas and min.insync.replicas=2.
        admin = AdminClient(cluster.client_settings())
        create_topics(cluster.client_settings(), {"three-nodes": 2}, replication=-1)
        partitions = admin.list_topics("three-nodes", timeout=10).topics["three-nodes"].partitions
        assert sorted(partitions) == [0, 1] and all(len(p.replicas) == 3 for p in partitions.values())
        found: dict[str, Any] = {}

        def described() -> bool:
            # The node asked may not have the new topic's metadata yet (UNKNOWN_TOPIC_OR_PART): ask again.
            down = [node for node in cluster.nodes if not node.running]
            assert not down, "\n".join(f"node {n.node_id} stopped:\n{n.log_tail()}" for n in down)
            try:
                request = admin.describe_configs([ConfigResource("TOPIC", "three-nodes")])
                found.update(next(iter(request.values())).result(10))
            except KafkaException:
                return False
            return True

        wait_for(described, 60, "the new topic's configuration")
        assert found["min.insync.replicas"].value == "2"
        yield cluster, broker


@pytest.fixture
def three_nodes(cluster_of_three: tuple[KafkaCluster, BrokerUnderTest]) -> tuple[KafkaCluster, BrokerUnderTest]:
    """The module's cluster with all three nodes up (a test that failed midway may have left one down)."""
    cluster, broker = cluster_of_three
    for node in cluster.nodes:
        if not node.running:
            cluster.start_node(node.node_id)
    _all_up(cluster, broker)
    return cluster, broker


def _leader(broker: BrokerUnderTest, topic: str, partition: int) -> int:
    from confluent_kafka.admin import AdminClient

    metadata = AdminClient(broker.client_settings()).list_topics(topic, timeout=30)
    leader: int = metadata.topics[topic].partitions[partition].leader
    assert leader >= 0, f"{topic}/{partition} has no leader"
    return leader


def _coordinator(broker: BrokerUnderTest, group: str) -> int:
    """The group's coordinator: the leader of its ``__consumer_offsets`` partition, which Kafka picks as
    ``abs(Java hashCode of the group id) % partitions`` (describing a group without members is not answered)."""
    from confluent_kafka.admin import AdminClient

    code = 0
    for char in group:
        code = (31 * code + ord(char)) & 0xFFFFFFFF
    code = code - (1 << 32) if code >= 1 << 31 else code
    offsets = AdminClient(broker.client_settings()).list_topics("__consumer_offsets", timeout=30).topics
    partitions = offsets["__consumer_offsets"].partitions
    # Kafka's Utils.abs: Integer.MIN_VALUE maps to 0.
    return int(partitions[(code & 0x7FFFFFFF) % len(partitions)].leader)


def _all_up(cluster: KafkaCluster, broker: BrokerUnderTest) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(broker.client_settings(**{"log_level": "0"}))

    def listed() -> bool:
        try:
            return len(admin.list_topics(timeout=5).brokers) == cluster.nodes_count
        except Exception:
            return False

    wait_for(listed, 120, "every node back in the cluster")


@pytest.mark.long
def test_continuous_backup_through_a_leader_failover_and_a_30_s_outage(
    three_nodes: tuple[KafkaCluster, BrokerUnderTest], tmp_path: Path
) -> None:
    cluster, broker = three_nodes
    topic = "failover-orders"
    create_topics(broker, {topic: 3}, replication=-1)
    target = tmp_path / "backup"
    args = [*client_args(broker, tmp_path), "--target-dir", str(target), "--topics", topic,
            "--trigger-interval", "1", "--offsets-interval", "2", "--max-offsets-per-trigger", "3000"]  # fmt: skip
    producer = Producer(broker, topic, 3, rate=800)
    producer.start()
    log = tmp_path / "backup.log"
    process = start_backup(*args, log=log)
    try:
        wait_for(lambda: any(rows for _, rows in batches(log)), 240, "the backup's first records", job=process, log=log)
        # The leader of a partition being read dies; its replicas take over; it comes back a while later.
        leader = _leader(broker, topic, random.Random().randrange(3))
        print(f"killing node {leader}, leader of a partition of {topic}")
        cluster.kill_node(leader)
        seen = len(batches(log))
        wait_for(more_batches(log, seen + 2), 120, "micro-batches with the old leader down", job=process, log=log)
        cluster.start_node(leader)
        _all_up(cluster, broker)
        seen = len(batches(log))
        wait_for(more_batches(log, seen + 1), 120, "a micro-batch with the leader back", job=process, log=log)
        assert process.poll() is None, log.read_text()[-3000:]

        # The whole source cluster unreachable for 30 s: what the backup says about it is in the log from here on.
        outage_from = len(log.read_bytes())
        for node in cluster.nodes:
            cluster.kill_node(node.node_id)
        down_at = time.monotonic()
        time.sleep(30)
        assert process.poll() is None, log.read_text()[-3000:]
        for node in cluster.nodes:
            cluster.start_node(node.node_id)
        _all_up(cluster, broker)
        print(f"cluster down for {time.monotonic() - down_at:.0f} s")

        def since_outage() -> str:
            return log.read_bytes()[outage_from:].decode(errors="replace")

        wait_for(lambda: "source cluster answers again" in since_outage() or process.poll() is not None, 180,
                 "the backup to see the cluster again")  # fmt: skip
        assert process.poll() is None, log.read_text()[-3000:]
        rows_before = sum(rows for _, rows in batches(log))
        wait_for(lambda: sum(rows for _, rows in batches(log)) > rows_before, 180, "records read after the outage")
        producer.stop()
        groups = {"failover-readers": {(topic, p): producer.sent // 3 // (p + 2) for p in range(3)}}
        for group, offsets in groups.items():
            commit_offsets(broker, group, offsets)
        expected = consume_all(broker, [topic])
        assert len(expected) == producer.sent

        def caught_up() -> bool:
            stored = {p: read_consumer_offsets(target / topic, p).get("failover-readers") for p in range(3)}
            return len(backed_up(target, [topic])) == len(expected) and all(
                stored[p] == groups["failover-readers"][(topic, p)] for p in range(3)
            )

        wait_for(caught_up, 180, "the continuous backup to hold every record and the group's offsets")
        pid = int(re.findall(r"stop with SIGTERM to the driver process (\d+)", log.read_text())[-1])
        os.kill(pid, signal.SIGTERM)
        assert process.wait(120) == 0, log.read_text()[-3000:]
    finally:
        kill_job(process)
        if producer.is_alive():
            producer.stop()
    text = log.read_text()
    assert "Traceback" not in text
    during = log.read_bytes()[outage_from:].decode(errors="replace")
    # The outage is said: warned during it, or (on a loaded machine the killed leader's partition can go unanswered
    # for 30 s before the outage, and the warning is said at most every 30 s) by an episode that began before it and
    # ended after it, at least as long as the outage.
    ended = re.search(r"source cluster answers again after (\d+) s", during)
    assert ended is not None, during[-3000:]
    warned = re.search(r"source cluster not answering for \d+ s", during) or (
        re.search(r"source cluster not answering for \d+ s", log.read_bytes()[:outage_from].decode(errors="replace"))
        and int(ended[1]) >= 30
    )
    assert warned, during[-3000:]
    assert backed_up(target, [topic]) == expected


@pytest.mark.long
def test_restore_through_a_leader_failover(
    three_nodes: tuple[KafkaCluster, BrokerUnderTest], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster, broker = three_nodes
    # Once in CI (issue 14's note) a run never ended: tasks that run long print where they are into the log.
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, "90")
    backup = tmp_path / "backup"
    topic, partitions, records = "failover-restore", 3, 30_000
    groups = write_backup(backup, topic, partitions, records)
    target = Target(broker)
    args = [*target.args(tmp_path), "--source-dir", str(backup), "--batch-size", "500", "--max-rate", "3000"]
    log = tmp_path / "restore.log"
    process = start_restore(*args, log=log)
    try:
        wait_for(lambda: committed_end(broker, topic, partitions) > 0 or process.poll() is not None, 240,
                 "the restore to commit its first records")  # fmt: skip
        time.sleep(random.Random(2).uniform(0.5, 2))
        assert process.poll() is None, log.read_text()[-3000:]
        # The leader of a partition being written dies and comes back 10 s later; when the group coordinator of
        # the restore's progress markers leads one of the partitions, that node (librdkafka #5456/#5511: a
        # transactional call can wait for ever when its coordinator's broker leaves the cluster).
        leaders = {_leader(broker, topic, p) for p in range(partitions)}
        coordinator = _coordinator(broker, PROGRESS_GROUP)
        leader = coordinator if coordinator in leaders else _leader(broker, topic, 1)
        print(f"killing node {leader} (progress group coordinator: {coordinator}, leaders: {sorted(leaders)})")
        cluster.kill_node(leader)
        time.sleep(10)
        cluster.start_node(leader)
        _all_up(cluster, broker)
        try:
            first = process.wait(420)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the restore did not end 7 minutes after the failover:\n{log.read_text()[-12000:]}")
    finally:
        kill_job(process)
    output = log.read_text()
    print(f"stuck producers replaced: {output.count('going on with a new producer')}")
    assert "Traceback" not in output
    if first != 0:
        # Allowed: one clear line, and the rerun completes it.
        errors = [line for line in output.splitlines() if "spark-kafka-backup restore: error:" in line]
        assert len(errors) == 1, output[-3000:]
        print(f"the restore stopped with: {errors[0]}")
        rerun = run_restore(*args, in_process=False)  # the stack-dump variable reaches executors this way
        assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    source = backed_up(backup, [topic])
    restored = consume_all(broker, [topic])
    assert len(restored) == partitions * records
    assert comparable(restored) == comparable(source)
    check_groups(target, topic, source, restored, groups)
