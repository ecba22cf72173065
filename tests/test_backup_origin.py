"""A backup target holds one cluster's topics, one incarnation each: another origin is refused before Spark starts."""

from __future__ import annotations

import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from spark_kafka_backup.catalog.topics import read_topic_record
from spark_kafka_backup.kafka.cluster import kafka_id
from tests.broker import BrokerUnderTest, local_cluster
from tests.conftest import REPO
from tests.kafka_helpers import backed_up, client_config_file, create_topics, job_env, run_backup
from tests.restore_helpers import Target, restore_python

TOPIC = "origin-small"


def _produce(broker: BrokerUnderTest, prefix: str, count: int) -> None:
    from confluent_kafka import Producer

    producer = Producer(broker.client_settings())
    for i in range(count):
        producer.produce(TOPIC, key=f"{prefix}-{i}".encode(), value=f"{prefix}-value-{i}".encode(), partition=0)
    producer.flush(30)


def _ids(broker: BrokerUnderTest) -> tuple[str, str]:
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(broker.client_settings())
    cluster = admin.describe_cluster().result().cluster_id
    topic = admin.describe_topics(TopicCollection([TOPIC]))[TOPIC].result().topic_id
    return kafka_id(str(cluster)), kafka_id(str(topic))


def _recreate(broker: BrokerUnderTest) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(broker.client_settings())
    admin.delete_topics([TOPIC])[TOPIC].result(30)
    deadline = time.monotonic() + 60
    while True:
        try:
            create_topics(broker, {TOPIC: 1})
            return
        except Exception:  # still being deleted
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _refusal(result: subprocess.CompletedProcess[str]) -> str:
    """The one error line of a refused run (no traceback)."""
    stderr = result.stderr
    assert result.returncode == 1, result.stdout[-2000:] + stderr[-2000:]
    assert "Traceback" not in stderr
    errors = [line for line in stderr.splitlines() if ": error: " in line]
    assert len(errors) == 1, stderr[-3000:]
    return errors[0]


def test_backup_refuses_another_cluster_and_a_recreated_topic(
    kafka: BrokerUnderTest, target: Target, tmp_path: Path
) -> None:
    with ExitStack() as stack:
        # Another cluster: the restore target's, or (when restores go to the suite's broker) a local one.
        other = target.broker if target.broker is not kafka else stack.enter_context(local_cluster())
        _refuses_other_origins(kafka, other, tmp_path)


def _refuses_other_origins(kafka: BrokerUnderTest, other: BrokerUnderTest, tmp_path: Path) -> None:
    create_topics(kafka, {TOPIC: 1})
    _produce(kafka, "a", 200)
    backup = tmp_path / "backup"
    config = tmp_path / "client.properties"
    client_config_file(config, kafka.extra_settings)

    def back_up(broker: BrokerUnderTest) -> subprocess.CompletedProcess[str]:
        return run_backup(
            "--bootstrap-server", broker.bootstrap_servers, "--command-config", config,
            "--target-dir", backup, "--topics", TOPIC, "--snapshot",
        )  # fmt: skip

    def refused(broker: BrokerUnderTest) -> subprocess.CompletedProcess[str]:
        """The refusal comes before Spark starts: the job run by plain Python shows it."""
        result = subprocess.run(
            [sys.executable, str(REPO / "jobs" / "backup.py"), "--bootstrap-server", broker.bootstrap_servers,
             "--command-config", str(config), "--target-dir", str(backup), "--topics", TOPIC, "--snapshot"],
            capture_output=True, text=True, env=job_env(), timeout=120,
        )  # fmt: skip
        assert "SparkContext" not in result.stdout + result.stderr
        return result

    first = back_up(kafka)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    cluster_a, topic_a = _ids(kafka)
    recorded = read_topic_record(backup, TOPIC)
    assert recorded is not None
    assert (recorded.cluster_id, recorded.topic_id) == (cluster_a, topic_a)
    expected = [(r["offset"], r["key"], r["value"]) for r in backed_up(backup, [TOPIC])]
    assert len(expected) == 200
    files = _files(backup)

    # Cluster B has a topic of the same name with more records: its offsets 200.. would land after A's.
    create_topics(other, {TOPIC: 1})
    _produce(other, "b", 300)
    cluster_b, _ = _ids(other)
    line = _refusal(refused(other))
    assert cluster_a in line and cluster_b in line and "new target directory" in line
    assert _files(backup) == files

    # The same cluster, the topic deleted and created again: a new incarnation, offsets from 0.
    _recreate(kafka)
    _produce(kafka, "c", 300)
    _, topic_c = _ids(kafka)
    assert topic_c != topic_a
    line = _refusal(refused(kafka))
    assert topic_a in line and topic_c in line and "new target directory" in line
    assert _files(backup) == files
    assert [(r["offset"], r["key"], r["value"]) for r in backed_up(backup, [TOPIC])] == expected

    # The restore says where the backup came from.
    dry = restore_python(
        "--bootstrap-server", other.bootstrap_servers, "--source-dir", backup,
        "--topic-map", f"{TOPIC}={TOPIC}-restored", "--dry-run",
    )  # fmt: skip
    assert dry.returncode == 0, dry.stdout[-2000:] + dry.stderr[-2000:]
    assert f"{TOPIC}: backed up from cluster {cluster_a}, topic id {topic_a}" in dry.stdout


def _recreate_topic(broker: BrokerUnderTest, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(broker.client_settings())  # kept until the deletion is answered
    admin.delete_topics([topic])[topic].result(30)
    deadline = time.monotonic() + 60
    while True:
        try:
            create_topics(broker, {topic: partitions})
            return
        except Exception:  # still being deleted
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _fill(broker: BrokerUnderTest, topic: str, partitions: int, per_partition: int, prefix: str) -> None:
    from confluent_kafka import Producer

    producer = Producer(broker.client_settings(**{"linger.ms": "5"}))
    for partition in range(partitions):
        for i in range(per_partition):
            producer.produce(topic, key=f"{prefix}-{i}".encode(), value=b"v", partition=partition)
    producer.flush(30)


def _stored(backup: Path, topic: str, partition: int) -> dict[str, int]:
    from spark_kafka_backup.partition.offsets_file import read_consumer_offsets

    return read_consumer_offsets(backup / topic, partition)


def _groups_through_a_recreated_topic(kafka: BrokerUnderTest, tmp_path: Path, source: str) -> None:
    """A continuous backup of ``t`` (6 partitions, group g1 at 100) and ``u`` (g2 at 100); ``t`` is deleted and made
    again with 2 partitions, where g1 commits 40. The backup never stores 40 against the backed-up ``t``, and its
    offset rounds go on: g2 moving to 900 on ``u`` is stored."""
    from tests.kafka_helpers import commit_offsets, start_backup, stop_driver
    from tests.live_load import wait_for

    t, u = f"inc-{source}-t", f"inc-{source}-u"
    create_topics(kafka, {t: 6, u: 2})
    _fill(kafka, t, 6, 100, "old")
    _fill(kafka, u, 2, 100, "u")
    commit_offsets(kafka, "g1", {(t, p): 100 for p in range(6)})
    commit_offsets(kafka, "g2", {(u, p): 100 for p in range(2)})
    backup = tmp_path / "backup"
    config = client_config_file(tmp_path / "client.properties", kafka.extra_settings)
    log = tmp_path / "backup.log"
    job = start_backup("--bootstrap-server", kafka.bootstrap_servers, "--command-config", config, "--target-dir",
                       backup, "--topics", f"{t},{u}", "--offsets-interval", "2", "--kafka-source", source,
                       log=log)  # fmt: skip
    try:
        wait_for(lambda: _stored(backup, u, 1).get("g2") == 100 and _stored(backup, t, 5).get("g1") == 100, 240,
                 "the first offsets stored", job=job, log=log)  # fmt: skip
        _recreate_topic(kafka, t, 2)
        # Fewer records than the old incarnation held: a round without the incarnation check would be "reached" and
        # store g1's 40 against the backed-up partitions 0 and 1.
        _fill(kafka, t, 2, 50, "new")
        commit_offsets(kafka, "g1", {(t, p): 40 for p in range(2)})
        _fill(kafka, u, 2, 800, "u-more")
        commit_offsets(kafka, "g2", {(u, p): 900 for p in range(2)})
        wait_for(lambda: _stored(backup, u, 0).get("g2") == 900 and _stored(backup, u, 1).get("g2") == 900, 240,
                 "g2's new offsets stored after t was recreated", job=job, log=log)  # fmt: skip
        time.sleep(5)  # two more rounds: none may store the new t's commits
    finally:
        code = stop_driver(job, log)
    output = log.read_text()
    assert code == 1 and "deleted and created again" in output, output[-4000:]  # the refused incarnation: exit 1
    assert f"consumer group offsets of topic {t!r} are not stored" in output, output[-4000:]
    assert [_stored(backup, t, p).get("g1") for p in range(6)] == [100] * 6
    assert "Traceback" not in output


# CI time: in the long tier; the quick tier covers a recreated topic is refused in the quick tier
# (test_backup_refuses_another_cluster_and_a_recreated_topic)
@pytest.mark.long
def test_a_recreated_topics_group_offsets_never_land_in_the_old_incarnations_backup(
    kafka: BrokerUnderTest, tmp_path: Path
) -> None:
    _groups_through_a_recreated_topic(kafka, tmp_path, "python")


@pytest.mark.long
def test_a_recreated_topics_group_offsets_never_land_in_the_old_incarnations_backup_with_sparks_source(
    kafka: BrokerUnderTest, tmp_path: Path
) -> None:
    _groups_through_a_recreated_topic(kafka, tmp_path, "spark")
