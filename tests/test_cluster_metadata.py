"""The cluster around the topics, captured by the backup (issue 54; docs/backup.md "The cluster around the topics"):
SCRAM users, dynamic broker configurations, topics' partitions and replication, versioned, on the suite's broker (no
authorizer: no ACLs). ACLs and a principal that may not describe everything: tests/test_secured_kafka.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.broker import BrokerUnderTest
from tests.kafka_helpers import create_topics, run_backup, run_kbackup
from tests.live_load import client_args, wait_for
from tests.restore_helpers import restore_python

USER = "md-alice"
SETTING = "log.cleaner.backoff.ms"  # a broker's dynamic setting nothing in the suite depends on


def broker_id(admin: object) -> str:
    return str(min(node.id for node in admin.describe_cluster().result().nodes))  # type: ignore[attr-defined]


@pytest.fixture
def cluster_changes(kafka: BrokerUnderTest) -> Iterator[object]:
    """An admin client of the suite's broker; the SCRAM user and the broker setting this test makes are taken away
    afterwards."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
        ScramMechanism,
        UserScramCredentialDeletion,
    )

    admin = AdminClient(kafka.client_settings())
    yield admin
    deletions = [UserScramCredentialDeletion(USER, ScramMechanism.SCRAM_SHA_256)]
    for future in admin.alter_user_scram_credentials(deletions).values():
        future.exception()  # not made, if the test stopped early
    unset = ConfigResource(ResourceType.BROKER, broker_id(admin), incremental_configs=[
        ConfigEntry(SETTING, None, incremental_operation=AlterConfigOpType.DELETE)])  # fmt: skip
    for future in admin.incremental_alter_configs([unset]).values():
        future.result()


def test_a_backup_keeps_a_version_of_the_cluster_around_its_topics_each_time_it_changes(
    kafka: BrokerUnderTest, cluster_changes: object, tmp_path: Path
) -> None:
    from confluent_kafka.admin import (
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin: object = cluster_changes
    topic = "md-orders"
    create_topics(kafka, {topic: 3})
    backup = tmp_path / "backup"

    def snapshot() -> str:
        result = run_backup(*client_args(kafka, tmp_path), "--target-dir", backup, "--topics", topic, "--snapshot")
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        return result.stdout + result.stderr

    first = snapshot()
    assert "cluster metadata captured: 0 ACLs, client quotas not captured" in first, first[-3000:]
    upsert = UserScramCredentialUpsertion(USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), b"md-pw-1")
    for future in admin.alter_user_scram_credentials([upsert]).values():  # type: ignore[attr-defined]
        future.result()
    broker = broker_id(admin)
    own = ConfigResource(ResourceType.BROKER, broker, incremental_configs=[
        ConfigEntry(SETTING, "15001", incremental_operation=AlterConfigOpType.SET)])  # fmt: skip
    for future in admin.incremental_alter_configs([own]).values():  # type: ignore[attr-defined]
        future.result()

    def applied() -> bool:  # the broker takes the change from the controller a moment later
        described = admin.describe_configs([ConfigResource(ResourceType.BROKER, broker)])  # type: ignore[attr-defined]
        return all(future.result()[SETTING].value == "15001" for future in described.values())

    wait_for(applied, 60, f"broker {broker} to take {SETTING}")
    second = snapshot()
    assert "cluster metadata changed" in second, second[-3000:]
    third = snapshot()  # nothing changed: no version more
    assert "cluster metadata changed" not in third and "cluster metadata captured" not in third

    described = run_kbackup("describe", backup, "--metadata")
    assert described.returncode == 0, described.stdout + described.stderr
    text = described.stdout
    assert "cluster metadata, 2 versions" in text, text
    assert f"+ topic {topic}: 3 partitions, replication factor 1" in text
    assert f"+ SCRAM user: {USER} (SCRAM-SHA-256, 8192 iterations)" in text
    assert f"+ config (broker {broker}): {SETTING}=15001" in text
    if kafka.kind == "local":  # the devkit's Kafka 4 node: its storage format makes this a cluster-wide default
        assert "+ config (cluster default): min.insync.replicas=1" in text
    assert "client quotas not captured: client quotas are not read by this version" in text
    assert text.index(f"+ topic {topic}") < text.index(f"+ SCRAM user: {USER}")  # the user came with version 2

    versions = json.loads(run_kbackup("describe", backup, "--metadata", "--json").stdout)["versions"]
    assert [v["acls"] for v in versions] == [{"captured": True, "bindings": []}] * 2  # no authorizer: no ACLs
    newest = versions[-1]
    assert {"name": USER, "mechanism": "SCRAM-SHA-256", "iterations": 8192} in newest["scramUsers"]["users"]
    assert newest["brokerConfigs"]["brokers"][broker][SETTING] == "15001"
    assert newest["topics"][topic] == {"partitions": 3, "replicationFactor": 1}
    assert newest["clusterId"] == versions[0]["clusterId"] and newest["capturedAtMs"] > versions[0]["capturedAtMs"]
    assert "md-pw-1" not in json.dumps(versions)  # Kafka never gives the secret: nothing to keep

    # Compared with the cluster now: as of checkpoint 1 (the first snapshot's cut, before the user was made) the
    # user is only on the target; as of the newest version it is in both.
    check: list[str | Path] = [*client_args(kafka, tmp_path), "--source-dir", backup, "--metadata", "users"]
    then = restore_python(*check, "--metadata-as-of", "1")
    assert then.returncode == 1, then.stdout + then.stderr
    assert f"  only on the target: SCRAM user {USER} (SCRAM-SHA-256)" in then.stdout.splitlines()
    now = restore_python(*check)
    assert f"SCRAM user {USER}" not in now.stdout, now.stdout
    before = restore_python(*check, "--metadata-as-of", "2000-01-01T00:00:00Z")
    assert before.returncode == 1 and "holds no cluster metadata captured at or before 2000-01-01" in before.stderr
