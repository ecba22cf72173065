"""The cluster around the topics, captured by the backup (issue 54; docs/backup.md "The cluster around the topics"):
SCRAM users, dynamic broker configurations, topics' partitions and replication, versioned, on the suite's broker (no
authorizer: no ACLs). ACLs and a principal that may not describe everything: tests/test_secured_kafka.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from devkit.kafka_cluster import kafka_tool
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
    assert "cluster metadata captured: 0 ACLs, " in first, first[-3000:]
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


QUOTA_USER = "md-quota-user"
QUOTA_CLIENT = "md-quota-client"
DEFAULT_SETTING = "log.cleaner.io.buffer.load.factor"  # a cluster-wide default nothing in the suite depends on


def configs_tool(kafka: BrokerUnderTest, *args: str) -> None:
    """``kafka-configs.sh`` (Apache Kafka's own tool, not the clients under test)."""
    done = kafka_tool("kafka.admin.ConfigCommand", "--bootstrap-server", kafka.bootstrap_servers, *args)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture
def quota_changes(kafka: BrokerUnderTest) -> Iterator[None]:
    """The quotas and the cluster-wide default the test sets through Kafka's tool, taken away afterwards. No quota
    applies to the suite's other clients: a user and a client id of this test's own, and the default user only
    together with this test's client id."""
    yield
    for entity in (["--entity-type", "users", "--entity-name", QUOTA_USER],
                   ["--entity-type", "clients", "--entity-name", QUOTA_CLIENT],
                   ["--entity-type", "users", "--entity-default", "--entity-type", "clients", "--entity-name",
                    QUOTA_CLIENT]):  # fmt: skip
        kafka_tool("kafka.admin.ConfigCommand", "--bootstrap-server", kafka.bootstrap_servers, "--alter",
                   "--delete-config", "producer_byte_rate,consumer_byte_rate,request_percentage", *entity)  # fmt: skip
    for scope in (["--entity-default"], ["--entity-name", kafka_broker_id(kafka)]):
        kafka_tool("kafka.admin.ConfigCommand", "--bootstrap-server", kafka.bootstrap_servers, "--alter",
                   "--delete-config", DEFAULT_SETTING, "--entity-type", "brokers", *scope)  # fmt: skip


def kafka_broker_id(kafka: BrokerUnderTest) -> str:
    from confluent_kafka.admin import AdminClient

    return broker_id(AdminClient(kafka.client_settings()))


def test_client_quotas_and_cluster_wide_defaults_are_kept_as_kafka_set_them_and_compared(
    kafka: BrokerUnderTest, quota_changes: None, tmp_path: Path
) -> None:
    configs_tool(kafka, "--alter", "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152",
                 "--entity-type", "users", "--entity-name", QUOTA_USER)  # fmt: skip
    configs_tool(kafka, "--alter", "--add-config", "request_percentage=50.5", "--entity-type", "clients",
                 "--entity-name", QUOTA_CLIENT)  # fmt: skip
    configs_tool(kafka, "--alter", "--add-config", "producer_byte_rate=4096", "--entity-type", "users",
                 "--entity-default", "--entity-type", "clients", "--entity-name", QUOTA_CLIENT)  # fmt: skip
    # A cluster-wide default that the (only) broker overrides: the brokers never report it as theirs, yet it is kept.
    configs_tool(kafka, "--alter", "--add-config", f"{DEFAULT_SETTING}=0.8", "--entity-type", "brokers",
                 "--entity-default")  # fmt: skip
    broker = kafka_broker_id(kafka)
    configs_tool(kafka, "--alter", "--add-config", f"{DEFAULT_SETTING}=0.7", "--entity-type", "brokers",
                 "--entity-name", broker)  # fmt: skip
    topic = "md-quotas"
    create_topics(kafka, {topic: 1})
    backup = tmp_path / "backup"
    done = run_backup(*client_args(kafka, tmp_path), "--target-dir", backup, "--topics", topic, "--snapshot")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    newest = json.loads(run_kbackup("describe", backup, "--metadata", "--json").stdout)["versions"][-1]
    entries = newest["quotas"]["entries"]
    assert {"entity": {"user": QUOTA_USER}, "values": {"consumer_byte_rate": 2097152.0,
            "producer_byte_rate": 1048576.0}} in entries  # fmt: skip
    assert {"entity": {"client-id": QUOTA_CLIENT}, "values": {"request_percentage": 50.5}} in entries
    assert {"entity": {"client-id": QUOTA_CLIENT, "user": None}, "values": {"producer_byte_rate": 4096.0}} in entries
    assert newest["brokerConfigs"]["cluster"][DEFAULT_SETTING] == "0.8"
    assert newest["brokerConfigs"]["brokers"][broker][DEFAULT_SETTING] == "0.7"
    text = run_kbackup("describe", backup, "--metadata").stdout
    assert f"+ quota: client-id={QUOTA_CLIENT}, user=<default>: producer_byte_rate=4096" in text, text
    assert f"+ quota: user={QUOTA_USER}: consumer_byte_rate=2097152, producer_byte_rate=1048576" in text

    check: list[str | Path] = [*client_args(kafka, tmp_path), "--source-dir", backup, "--metadata", "quotas,configs"]
    same = restore_python(*check)
    assert same.returncode == 0 and same.stdout.splitlines()[-1] == "no difference", same.stdout + same.stderr
    # Drifted, as by hand after the backup: one quota changed, one removed, one added; the default changed.
    configs_tool(kafka, "--alter", "--add-config", "producer_byte_rate=1", "--delete-config", "consumer_byte_rate",
                 "--entity-type", "users", "--entity-name", QUOTA_USER)  # fmt: skip
    configs_tool(kafka, "--alter", "--add-config", "consumer_byte_rate=8192", "--entity-type", "clients",
                 "--entity-name", QUOTA_CLIENT)  # fmt: skip
    configs_tool(kafka, "--alter", "--add-config", f"{DEFAULT_SETTING}=0.75", "--entity-type", "brokers",
                 "--entity-default")  # fmt: skip
    drifted = restore_python(*check)
    assert drifted.returncode == 1, drifted.stdout + drifted.stderr
    lines = drifted.stdout.splitlines()
    assert f"  missing on the target: client quota (user={QUOTA_USER}) consumer_byte_rate=2097152" in lines, lines
    assert (f"  different: client quota (user={QUOTA_USER}) producer_byte_rate: 1 on the target, 1048576 in the "
            "backup") in lines  # fmt: skip
    assert f"  only on the target: client quota (client-id={QUOTA_CLIENT}) consumer_byte_rate=8192" in lines
    assert f"  different: config (cluster default) {DEFAULT_SETTING}: 0.75 on the target, 0.8 in the backup" in lines
    assert lines[-1] == "4 differences; nothing was changed (--metadata-policy check)", lines

    # apply, first as a dry run (nothing changes), then for real: the missing and different made as in the backup,
    # the quota only the target has kept; Kafka's own tool reads the result.
    dry = restore_python(*check, "--metadata-policy", "apply", "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    lines = dry.stdout.splitlines()
    assert f"  would create: client quota (user={QUOTA_USER}) consumer_byte_rate=2097152" in lines, lines
    assert (f"  would change: client quota (user={QUOTA_USER}) producer_byte_rate: 1 on the target, 1048576 in the "
            "backup") in lines  # fmt: skip
    assert (f"  kept (only on the target; --metadata-policy replace deletes it): client quota "
            f"(client-id={QUOTA_CLIENT}) consumer_byte_rate=8192") in lines  # fmt: skip
    assert lines[-1] == "dry run: 3 changes would be made, 0 left for you; nothing was changed", lines
    assert restore_python(*check).stdout.splitlines()[-1].startswith("4 differences")
    applied = restore_python(*check, "--metadata-policy", "apply")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    lines = applied.stdout.splitlines()
    assert f"  created: client quota (user={QUOTA_USER}) consumer_byte_rate=2097152" in lines, lines
    assert f"  changed: config (cluster default) {DEFAULT_SETTING}: 0.75 on the target, 0.8 in the backup" in lines
    assert lines[-1] == "3 changes made; the target has what the backup had (configs, quotas)", lines
    described = kafka_tool("kafka.admin.ConfigCommand", "--bootstrap-server", kafka.bootstrap_servers, "--describe",
                           "--entity-type", "users", "--entity-name", QUOTA_USER).stdout  # fmt: skip
    assert "consumer_byte_rate=2097152.0" in described and "producer_byte_rate=1048576.0" in described, described
    again = restore_python(*check, "--metadata-policy", "apply")  # a second apply has nothing to do
    assert again.returncode == 0 and again.stdout.splitlines()[-1].startswith("0 changes made"), again.stdout

    # replace deletes only with --delete-extra, and only what its dry run listed.
    refused = restore_python(*check, "--metadata-policy", "replace")
    assert refused.returncode == 2 and "list it first with --dry-run, then run again with --delete-extra" in (
        refused.stderr
    ), refused.stderr
    listed = restore_python(*check, "--metadata-policy", "replace", "--dry-run")
    would = [line for line in listed.stdout.splitlines() if line.startswith("  would ")]
    assert would == [f"  would delete: client quota (client-id={QUOTA_CLIENT}) consumer_byte_rate=8192"], listed.stdout
    replaced = restore_python(*check, "--metadata-policy", "replace", "--delete-extra")
    assert replaced.returncode == 0, replaced.stdout + replaced.stderr
    made = [line for line in replaced.stdout.splitlines() if line.startswith("  ")]
    assert made == [f"  deleted: client quota (client-id={QUOTA_CLIENT}) consumer_byte_rate=8192"], replaced.stdout
    assert restore_python(*check).stdout.splitlines()[-1] == "no difference"


def test_an_existing_topics_configuration_is_reported_by_check_and_changed_by_apply_unless_it_could_lose_records(
    kafka: BrokerUnderTest, tmp_path: Path
) -> None:
    source, target = "md-topics", "md-topics-dr"
    create_topics(kafka, {source: 1, target: 1}, {
        source: {"retention.ms": "172800000", "retention.bytes": "50000000", "max.message.bytes": "2000000"},
        # The existing target: a shorter retention.ms (raising it keeps more: changed), a larger retention.bytes
        # (lowering it could delete records: left to the operator), and a setting only it has.
        target: {"retention.ms": "3600000", "retention.bytes": "100000000", "segment.ms": "3600000"},
    })  # fmt: skip
    backup = tmp_path / "backup"
    done = run_backup(*client_args(kafka, tmp_path), "--target-dir", backup, "--topics", source, "--snapshot")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    check: list[str | Path] = [*client_args(kafka, tmp_path), "--source-dir", backup, "--metadata", "topics",
                               "--topic-map", f"{source}={target}"]  # fmt: skip
    named = f"topic {target} (the backup's {source})"
    kept_bytes = (
        f"{named} retention.bytes: 100000000 on the target, 50000000 in the backup: not changed by this tool (a "
        f"retention.bytes of 50000000 can delete records the topic keeps today); if that is what you want: "
        f"kafka-configs.sh --bootstrap-server {kafka.bootstrap_servers} --alter --entity-type topics --entity-name "
        f"{target} --add-config retention.bytes=50000000"
    )
    checked = restore_python(*check)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert [line for line in checked.stdout.splitlines() if line.startswith("  ")] == [
        f"  different: {named} max.message.bytes: 1048588 on the target, 2000000 in the backup",
        f"  different: {kept_bytes}",
        f"  different: {named} retention.ms: 3600000 on the target, 172800000 in the backup",
        f"  only on the target: {named} segment.ms=3600000 (set on the target only)",
    ], checked.stdout

    applied = restore_python(*check, "--metadata-policy", "apply")
    assert applied.returncode == 1, applied.stdout + applied.stderr  # retention.bytes is the operator's
    assert [line for line in applied.stdout.splitlines() if line.startswith("  ")] == [
        f"  changed: {named} max.message.bytes: 1048588 on the target, 2000000 in the backup",
        f"  left for you: {kept_bytes}",
        f"  changed: {named} retention.ms: 3600000 on the target, 172800000 in the backup",
        f"  kept (only on the target; --metadata-policy replace deletes it): {named} segment.ms=3600000 (set on the "
        "target only)",
    ], applied.stdout
    assert applied.stdout.splitlines()[-1] == "2 changes made; 1 difference left (above)"
    described = kafka_tool("kafka.admin.ConfigCommand", "--bootstrap-server", kafka.bootstrap_servers, "--describe",
                           "--entity-type", "topics", "--entity-name", target).stdout  # fmt: skip
    for setting in ("retention.ms=172800000", "max.message.bytes=2000000", "retention.bytes=100000000"):
        assert setting in described, described
    again = restore_python(*check)
    assert [line for line in again.stdout.splitlines() if line.startswith("  ")] == [
        f"  different: {kept_bytes}",
        f"  only on the target: {named} segment.ms=3600000 (set on the target only)",
    ], again.stdout
