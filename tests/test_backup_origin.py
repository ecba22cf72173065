"""A backup target holds one cluster's topics, one incarnation each: another origin is refused before Spark starts."""

from __future__ import annotations

import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

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
