"""The kept versions of the cluster around the topics (spark_kafka_backup.catalog.cluster_metadata): their document,
when a capture makes a new one, which one is in force at a time, and what changed."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from spark_kafka_backup.catalog.cluster_metadata import (
    AclEntry,
    BrokerConfigs,
    ClusterMetadata,
    NotCaptured,
    QuotaEntry,
    ScramUser,
    TopicShape,
    changes,
    keep_if_changed,
    metadata_as_of,
    metadata_dir,
    read_version,
    version_times,
)
from spark_kafka_backup.errors import FormatError

READ_ORDERS = AclEntry("TOPIC", "orders", "LITERAL", "User:alice", "*", "READ", "ALLOW")
WRITE_PAYMENTS = AclEntry("TOPIC", "payments.", "PREFIXED", "User:bob", "*", "WRITE", "ALLOW")


def capture(at: int, **changed: object) -> ClusterMetadata:
    metadata = ClusterMetadata(
        captured_at=at,
        cluster_id="q1Sh-9_ISia_zwGINzRvyQ",
        acls=(READ_ORDERS, WRITE_PAYMENTS),
        quotas=(
            QuotaEntry({"user": "alice", "client-id": None}, {"producer_byte_rate": 1048576.0}),
            QuotaEntry({"user": None}, {"request_percentage": 12.5}),
        ),
        scram_users=(ScramUser("alice", "SCRAM-SHA-512", 8192),),
        broker_configs=BrokerConfigs(
            {"min.insync.replicas": "2"},
            {1: {"log.cleaner.threads": "2", "listener.password": None}},
            ("listener.password",),
        ),
        topics={"orders": TopicShape(6, 3)},
        broker_ids=(1,),
    )
    return replace(metadata, **changed)  # type: ignore[arg-type]


def test_a_version_reads_back_as_written_and_names_its_file_when_damaged(tmp_path: Path) -> None:
    kept = keep_if_changed(tmp_path, capture(1000), None)
    assert kept is not None and read_version(tmp_path, 1000) == kept
    refused = capture(2000, scram_users=NotCaptured("the cluster refused", "DESCRIBE on the cluster"))
    keep_if_changed(tmp_path, refused, kept)
    assert read_version(tmp_path, 2000).scram_users == NotCaptured("the cluster refused", "DESCRIBE on the cluster")
    path = metadata_dir(tmp_path) / "metadata-000000000002000.json"
    assert isinstance(path, Path)  # a local backup's folder
    path.write_text(path.read_text().replace('"captured": true', '"captured": "yes"', 1))
    with pytest.raises(FormatError) as damaged:
        read_version(tmp_path, 2000)
    assert str(path) in str(damaged.value)
    misnamed = metadata_dir(tmp_path) / "metadata-2000.json"
    assert isinstance(misnamed, Path)
    misnamed.write_text("{}")
    with pytest.raises(FormatError, match=r"metadata-<15 digits>\.json"):
        version_times(tmp_path)


def test_a_capture_that_changes_nothing_keeps_no_version_and_the_one_in_force_is_the_newest_by_then(
    tmp_path: Path,
) -> None:
    first = keep_if_changed(tmp_path, capture(1000), None)
    assert keep_if_changed(tmp_path, capture(2000), first) is None  # the same content, later: nothing written
    later = keep_if_changed(tmp_path, capture(3000, acls=(READ_ORDERS,)), first)
    assert later is not None and version_times(tmp_path) == [1000, 3000]
    assert metadata_as_of(tmp_path, 999) is None
    as_of = metadata_as_of(tmp_path, 2999)
    assert as_of is not None and as_of.acls == (READ_ORDERS, WRITE_PAYMENTS)  # 2000 kept nothing: 1000 stands
    newest = metadata_as_of(tmp_path)
    assert newest is not None and newest.acls == (READ_ORDERS,)
    # A clock stepped back: the next version still sorts after the last.
    stepped = keep_if_changed(tmp_path, capture(500, acls=()), later)
    assert stepped is not None and stepped.captured_at == 3001 and version_times(tmp_path)[-1] == 3001


def test_changes_name_what_was_added_removed_or_changed() -> None:
    older = capture(1000)
    newer = capture(
        2000,
        acls=(READ_ORDERS, AclEntry("GROUP", "app", "LITERAL", "User:alice", "*", "READ", "ALLOW")),
        broker_configs=BrokerConfigs({"min.insync.replicas": "1"}, {1: {"log.cleaner.threads": "2"}}),
        quotas=NotCaptured("the cluster refused to describe its quotas", "DESCRIBE_CONFIGS on the cluster"),
        topics={"orders": TopicShape(8, 3), "audit": TopicShape(1, 3)},
    )
    assert changes(older, newer) == [
        "+ ACL: ALLOW User:alice READ on GROUP app",
        "- ACL: ALLOW User:bob WRITE on TOPIC payments. (prefixed)",
        "quotas: not captured: the cluster refused to describe its quotas (needs DESCRIBE_CONFIGS on the cluster)",
        "+ config (cluster default): min.insync.replicas=1",
        "- config (broker 1): listener.password",
        "+ topic audit: 1 partitions, replication factor 3",
        "+ topic orders: 8 partitions, replication factor 3",
    ]
    assert changes(newer, replace(newer, broker_ids=(2,))) == ["+ broker 2 seen", "- broker 1 not seen (down, or gone)"]
    assert changes(newer, newer) == []
    first = changes(None, older)
    assert "+ config (broker 1): listener.password=(sensitive)" in first
    assert "+ quota: user=<default>: request_percentage=12.5" in first
    assert "+ SCRAM user: alice (SCRAM-SHA-512, 8192 iterations)" in first
    assert older.summary() == ("2 ACLs, 2 client quotas, 1 SCRAM credential, 3 dynamic broker configurations, 1 topic")


class Diff:
    """The texts of the differences by kind."""

    def __init__(self, differences: list[Any]) -> None:
        self.missing = [d.text for d in differences if d.kind == "missing"]
        self.different = [d.text for d in differences if d.kind == "different"]
        self.extra = [d.text for d in differences if d.kind == "extra"]


def test_sections_are_named_or_all_and_anything_else_is_refused() -> None:
    from spark_kafka_backup.errors import UsageError
    from spark_kafka_backup.restore.cluster_metadata import parse_sections

    assert parse_sections("acls, users") == {"acls", "users"}
    assert parse_sections("all") == {"acls", "users", "configs", "quotas", "topics"}
    with pytest.raises(
        UsageError, match="expected a comma-separated list of acls, users, configs, quotas, topics, or all"
    ):
        parse_sections("acls,groups")


def test_the_backup_renamed_as_the_records_are_is_compared_section_by_section() -> None:
    from spark_kafka_backup.restore.cluster_metadata import compare, renamed

    backup = renamed(capture(1000), {"orders": "orders-dr", "payments.": "never-used"},
                     {"User:alice": "User:alice-dr"})  # fmt: skip
    # A literal topic ACL follows --topic-map, a prefixed one is kept as it was; principals follow --principal-map.
    assert backup.acls == (
        AclEntry("TOPIC", "orders-dr", "LITERAL", "User:alice-dr", "*", "READ", "ALLOW"),
        WRITE_PAYMENTS,
    )
    assert backup.scram_users == (ScramUser("alice-dr", "SCRAM-SHA-512", 8192),)
    assert compare(backup, backup, frozenset({"acls", "users", "configs", "quotas"}), servers="dr:9092") == []
    target = capture(
        2000,
        acls=(WRITE_PAYMENTS, READ_ORDERS),
        scram_users=(ScramUser("alice-dr", "SCRAM-SHA-512", 4096), ScramUser("root", "SCRAM-SHA-256", 4096)),
        broker_configs=BrokerConfigs(
            {"min.insync.replicas": "1", "log.retention.ms": "1000"},
            {1: {"log.cleaner.threads": "2", "listener.password": None}},
        ),
    )
    diff = Diff(compare(backup, target, frozenset({"acls", "users", "configs"}), servers="dr:9092"))
    assert diff.missing == ["ACL ALLOW User:alice-dr READ on TOPIC orders-dr"]
    assert diff.extra == [
        "ACL ALLOW User:alice READ on TOPIC orders",
        "SCRAM user root (SCRAM-SHA-256)",
        "config (cluster default) log.retention.ms=1000",
    ]
    assert diff.different == [
        "SCRAM user alice-dr (SCRAM-SHA-512): 4096 iterations on the target, 8192 in the backup: set its password "
        "again with kafka-configs.sh --bootstrap-server dr:9092 --alter --add-config "
        "'SCRAM-SHA-512=[iterations=8192,password=...]' --entity-type users --entity-name alice-dr",
        "config (cluster default) min.insync.replicas: 1 on the target, 2 in the backup",
    ]  # a sensitive value is compared by its presence: listener.password is on both
    missing_user = Diff(
        compare(backup, replace(target, scram_users=()), frozenset({"users"}), servers="dr:9092")
    ).missing
    assert missing_user == [
        "SCRAM user alice-dr (SCRAM-SHA-512, 8192 iterations): create it with kafka-configs.sh --bootstrap-server "
        "dr:9092 --alter --add-config 'SCRAM-SHA-512=[iterations=8192,password=...]' --entity-type users "
        "--entity-name alice-dr"
    ]


def test_acls_are_trusted_only_when_the_cluster_lists_describe_and_librdkafka_can_name_each_binding() -> None:
    """librdkafka drops a DescribeAcls refusal (no binding comes back) and names types it does not know UNKNOWN: a
    stand-in admin client gives those answers (pure logic)."""
    from types import SimpleNamespace

    from confluent_kafka.admin import AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    from spark_kafka_backup.kafka.cluster_metadata import _acls

    def binding(restype: ResourceType, name: str, operation: AclOperation) -> SimpleNamespace:
        return SimpleNamespace(restype=restype, name=name, resource_pattern_type=ResourcePatternType.LITERAL,
                               principal="User:svc", host="*", operation=operation,
                               permission_type=AclPermissionType.ALLOW)  # fmt: skip

    class Admin:
        def __init__(self, bindings: list[SimpleNamespace]) -> None:
            self.bindings = bindings

        def describe_acls(self, _filter: object, request_timeout: float) -> SimpleNamespace:
            return SimpleNamespace(result=lambda timeout: self.bindings)

    def cluster(*operations: AclOperation) -> SimpleNamespace:
        return SimpleNamespace(authorized_operations=list(operations))

    read = binding(ResourceType.TOPIC, "orders", AclOperation.READ)
    assert _acls(Admin([read]), cluster(AclOperation.DESCRIBE), 5) == (
        AclEntry("TOPIC", "orders", "LITERAL", "User:svc", "*", "READ", "ALLOW"),
    )
    # ALTER implies DESCRIBE client-side, but the broker lists what it allows (a DENY DESCRIBE leaves it out).
    refused = _acls(Admin([]), cluster(AclOperation.ALTER), 5)
    assert refused == NotCaptured(
        "the cluster does not let this principal describe its ACLs", "DESCRIBE on the cluster"
    )
    assert _acls(Admin([]), SimpleNamespace(authorized_operations=None), 5) == refused  # listed to DESCRIBE only
    unknown = [read, binding(ResourceType.UNKNOWN, "alice", AclOperation.UNKNOWN)]
    assert "librdkafka cannot name" in str(_acls(Admin(unknown), cluster(AclOperation.DESCRIBE), 5))


def test_principal_maps_split_where_the_second_principal_starts_and_refuse_what_cannot_hold() -> None:
    from spark_kafka_backup.errors import UsageError
    from spark_kafka_backup.restore.cluster_metadata import parse_sections
    from spark_kafka_backup.restore.settings import parse_restore_args

    base = ["--bootstrap-server", "dr:9092", "--source-dir", "/backups/prod", "--metadata", "all"]
    settings = parse_restore_args([*base, "--principal-map", "User:CN=alice,O=acme=User:CN=alice-dr,O=acme",
                                   "--principal-map", "Group:ops=Group:ops-dr"])  # fmt: skip
    assert settings.principal_map == {"User:CN=alice,O=acme": "User:CN=alice-dr,O=acme", "Group:ops": "Group:ops-dr"}
    assert settings.metadata == parse_sections("acls,users,configs,quotas,topics")
    assert parse_restore_args([*base, "--metadata-policy", "apply", "--dry-run"]).dry_run
    replacing = parse_restore_args([*base, "--metadata-policy", "replace", "--delete-extra"])
    assert (replacing.metadata_policy, replacing.delete_extra) == ("replace", True)
    for extra, message in (
        (["--principal-map", "User:alice=Group:ops"], "a User: principal maps to a User: principal"),
        (["--principal-map", "User:a=User:x", "--principal-map", "User:b=User:x"], "maps two principals to the same"),
        (["--principal-map", "alice=bob"], "two principals TYPE:NAME"),
        (["--to-time", "2026-12-01T00:00:00Z"], "--to-time would change nothing there"),
        (["--dry-run"], "--dry-run would change nothing there"),  # check changes nothing anyway
        (["--metadata-policy", "replace"], "list it first with --dry-run, then run again with --delete-extra"),
        (["--metadata-policy", "apply", "--delete-extra"], "--delete-extra goes with --metadata-policy replace"),
    ):
        with pytest.raises(UsageError, match=message):
            parse_restore_args([*base, *extra])


def test_a_broker_the_target_has_is_compared_even_without_dynamic_configuration() -> None:
    from spark_kafka_backup.restore.cluster_metadata import compare

    backup = capture(1000, broker_ids=(1, 2))
    target = capture(2000, broker_configs=BrokerConfigs({"min.insync.replicas": "2"}, {}), broker_ids=(1,))
    assert Diff(compare(backup, target, frozenset({"configs"}), servers="dr:9092")).missing == [
        "config (broker 1) listener.password=(sensitive): its value was never given to the backup; set it with "
        "kafka-configs.sh --bootstrap-server dr:9092 --alter --add-config 'listener.password=...' --entity-type "
        "brokers --entity-name 1",
        "config (broker 1) log.cleaner.threads=2",
    ]
    assert read_back(capture(1, broker_ids=(3, 1))).broker_ids == (3, 1)
    gone = Diff(compare(backup, replace(target, broker_ids=(2,)), frozenset({"configs"}), servers="dr:9092")).missing
    assert gone == ["broker 1 (its dynamic configuration: listener.password, log.cleaner.threads): the target has no "
                    "broker of that id"]  # fmt: skip


def read_back(metadata: ClusterMetadata) -> ClusterMetadata:
    return ClusterMetadata.decode(metadata.encode(), file="version.json")


def test_quotas_follow_the_principal_map_by_user_entity_and_differ_by_entity_and_name() -> None:
    from spark_kafka_backup.restore.cluster_metadata import compare, renamed

    backup = renamed(capture(1000), {}, {"User:alice": "User:alice-dr"})
    assert backup.quotas == (
        QuotaEntry({"user": "alice-dr", "client-id": None}, {"producer_byte_rate": 1048576.0}),
        QuotaEntry({"user": None}, {"request_percentage": 12.5}),  # the default user is nobody's to rename
    )
    target = capture(2000, quotas=(
        QuotaEntry({"user": "alice-dr", "client-id": None}, {"producer_byte_rate": 2048.0, "consumer_byte_rate": 1.0}),
        QuotaEntry({"client-id": "batch"}, {"request_percentage": 200.0}),
    ))  # fmt: skip
    diff = Diff(compare(backup, target, frozenset({"quotas"}), servers="dr:9092"))
    assert diff.missing == ["client quota (user=<default>) request_percentage=12.5"]
    assert diff.different == [
        "client quota (client-id=<default>, user=alice-dr) producer_byte_rate: 2048 on the target, 1048576 in the "
        "backup"
    ]
    assert diff.extra == [
        "client quota (client-id=<default>, user=alice-dr) consumer_byte_rate=1",
        "client quota (client-id=batch) request_percentage=200",
    ]


def test_the_second_connection_takes_what_librdkafka_was_given_or_names_what_it_cannot() -> None:
    from spark_kafka_backup.kafka.wire_admin import WireSettingsError, wire_client_settings

    plain = wire_client_settings({"bootstrap.servers": "a:9092, b:9092", "client.id": "x", "linger.ms": "5"})
    assert (plain.bootstrap_servers, plain.security_protocol, plain.tls) == (["a:9092", "b:9092"], "PLAINTEXT", None)
    scram = wire_client_settings({"bootstrap.servers": "a:9093", "security.protocol": "sasl_ssl",
                                  "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "svc", "sasl.password": "pw",
                                  "ssl.ca.pem": "-----BEGIN CERTIFICATE-----", "enable.ssl.certificate.verification":
                                  "true"})  # fmt: skip
    assert (scram.security_protocol, scram.sasl_mechanism, scram.sasl_username, scram.sasl_password) == (
        "SASL_SSL", "SCRAM-SHA-512", "svc", "pw")  # fmt: skip
    assert scram.tls == {"ssl.ca.pem": "-----BEGIN CERTIFICATE-----", "enable.ssl.certificate.verification": "true"}
    for settings, named in (
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}, "sasl.mechanism=OAUTHBEARER"),
        ({"security.protocol": "SASL_PLAINTEXT"}, "sasl.mechanism=GSSAPI"),  # librdkafka's default mechanism
        ({"security.protocol": "SSL", "ssl.keystore.location": "/k.p12"}, "ssl.keystore.location=/k.p12"),
        ({"security.protocol": "KERBEROS"}, "security.protocol=KERBEROS"),
    ):  # fmt: skip
        with pytest.raises(WireSettingsError, match=named):
            wire_client_settings({"bootstrap.servers": "a:9093", **settings})


def test_the_changes_a_policy_makes_name_the_permissions_they_need_and_never_the_restores_own_login() -> None:
    from spark_kafka_backup.kafka.cluster_metadata_changes import MetadataChanges
    from spark_kafka_backup.restore.cluster_metadata import _unless_own, compare

    target = capture(2000, acls=(), scram_users=(ScramUser("alice", "SCRAM-SHA-512", 8192),
                                                 ScramUser("restorer", "SCRAM-SHA-256", 4096)))  # fmt: skip
    differences = compare(capture(1000), target, frozenset({"acls", "users"}), servers="dr:9092")
    changes = sum((d.fix for d in differences if d.fix is not None), MetadataChanges())
    assert changes.create_acls == (READ_ORDERS, WRITE_PAYMENTS)
    assert changes.delete_scram == (("restorer", "SCRAM-SHA-256"),)
    assert [(p.operation, p.why) for p in changes.permissions()] == [("ALTER", "create and delete ACLs")]
    configs = MetadataChanges(cluster_defaults=(("log.cleaner.threads", "2"),))
    assert [p.operation for p in configs.permissions()] == ["ALTER_CONFIGS"]
    assert not MetadataChanges() and configs
    # Under replace, the credential the restore logs in with is left, with the reason.
    (extra,) = [d for d in differences if d.kind == "extra"]
    own = _unless_own(extra, {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
                              "sasl.username": "restorer"})  # fmt: skip
    assert (own.text, own.fix) == ("SCRAM user restorer (SCRAM-SHA-256): the restore's own login, not deleted", None)
    assert _unless_own(extra, {"sasl.username": "alice"}) == extra
    # ... nor the ACLs of the principal it runs as (deleting them would stop the run half-way).
    mine = AclEntry("CLUSTER", "kafka-cluster", "LITERAL", "User:restorer", "*", "ALTER", "ALLOW")
    acls = compare(capture(1000, acls=()), capture(2000, acls=(mine,)), frozenset({"acls"}), servers="dr:9092")
    client = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "restorer"}
    assert _unless_own(acls[0], client).fix is None
    assert _unless_own(acls[0], {"security.protocol": "PLAINTEXT"}) == acls[0]


def test_a_topic_setting_that_could_lose_records_is_never_changed_by_the_tool() -> None:
    from spark_kafka_backup.restore.cluster_metadata import _loses_records, compare_topics

    assert _loses_records("retention.ms", "3600000", "172800000") is None  # keeps more
    assert _loses_records("retention.ms", "-1", "172800000") is not None  # kept forever today
    assert _loses_records("retention.ms", "172800000", "-1") is None
    assert _loses_records("retention.bytes", None, "1000") is not None  # unknown today: not proved harmless
    assert _loses_records("cleanup.policy", "delete", "compact,delete") is not None
    assert _loses_records("cleanup.policy", "compact", "compact,delete") is not None  # retention starts deleting
    assert _loses_records("cleanup.policy", "compact,delete", "compact") is None
    assert _loses_records("delete.retention.ms", "86400000", "1000") is not None  # tombstones go sooner
    assert _loses_records("message.timestamp.type", "CreateTime", "LogAppendTime") is not None
    assert _loses_records("retention.ms", "1000", None) is not None  # deleting it: the broker's default
    assert _loses_records("segment.ms", "1000", None) is None
    wanted: dict[str, tuple[str, dict[str, str]]] = {
        "orders-dr": ("orders", {"retention.ms": "-1", "cleanup.policy": "compact,delete",
                                 "message.timestamp.difference.max.ms": "9"}),
        "audit": ("audit", {}),
    }  # fmt: skip
    there = {"orders-dr": {"retention.ms": ("604800000", True), "segment.ms": ("1000", True),
                           "min.insync.replicas": ("2", True), "flush.ms": ("9", False),
                           "cleanup.policy": ("delete,compact", True)}}  # fmt: skip
    differences = compare_topics(wanted, there, lambda name: name != "min.insync.replicas", "dr:9092")
    # (min.insync.replicas: not the restore's to compare; flush.ms: the broker's, not set on the topic;
    # cleanup.policy: the same policies in another order; a setting the target's Kafka does not know: not made.)
    assert [(d.kind, d.text, d.fix is not None) for d in differences] == [
        ("missing", "topic audit: not on the target; a restore of its records creates it with this configuration",
         False),
        ("different", "topic orders-dr (the backup's orders) message.timestamp.difference.max.ms: not a setting it "
         "knows on the target, 9 in the backup: not changed by this tool (the target's Kafka does not know this "
         "setting); if that is what you want: kafka-configs.sh --bootstrap-server dr:9092 --alter --entity-type "
         "topics --entity-name orders-dr --add-config message.timestamp.difference.max.ms=9", False),
        ("different", "topic orders-dr (the backup's orders) retention.ms: 604800000 on the target, -1 in the backup",
         True),
        ("extra", "topic orders-dr (the backup's orders) segment.ms=1000 (set on the target only)", True),
    ]  # fmt: skip
    assert differences[2].fix is not None and differences[2].fix.topic_configs == (("orders-dr", "retention.ms", "-1"),)


def test_tls_settings_the_second_connection_cannot_load_are_one_error_naming_them(tmp_path: Path) -> None:
    from spark_kafka_backup.kafka.wire_admin import WireSettingsError, _tls_context, wire_client_settings

    missing = str(tmp_path / "no-such-ca.pem")
    with pytest.raises(WireSettingsError, match=re.escape(f"ssl.ca.location={missing}")):
        _tls_context({"ssl.ca.location": missing})
    with pytest.raises(WireSettingsError, match="give both as files or both as PEM"):
        _tls_context({"ssl.certificate.location": missing, "ssl.key.pem": "-----BEGIN PRIVATE KEY-----"})
    assert _tls_context({"ssl.ca.location": str(tmp_path)}).verify_mode.name == "CERT_REQUIRED"  # a CA directory
    with pytest.raises(WireSettingsError, match=r"ssl\.crl\.location=/crl\.pem: .* cannot check a certificate"):
        wire_client_settings(
            {"bootstrap.servers": "a:9093", "security.protocol": "SSL", "ssl.crl.location": "/crl.pem"}
        )


def test_a_backup_whose_second_connection_failed_tries_again_an_hour_later_a_few_times_a_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Each failed try of kafka-python's connection leaves its thread: not once a minute for months (stand-ins for
    the cluster)."""
    from spark_kafka_backup.backup import cluster_metadata as keeper_module
    from spark_kafka_backup.kafka.cluster_metadata import SECOND_CONNECTION_FAILED
    from spark_kafka_backup.kafka.topics import TopicSelection

    tried: list[object] = []
    now = [1000.0]

    def capture_metadata(admin: object, topics: object, **options: Any) -> ClusterMetadata:
        tried.append(options["second_connection"])
        failed = NotCaptured(f"{SECOND_CONNECTION_FAILED}: no answer")
        return capture(int(now[0]), quotas=options["second_connection"] or failed)

    monkeypatch.setattr(keeper_module, "capture_metadata", capture_metadata)
    monkeypatch.setattr(keeper_module, "partition_counts", lambda admin, timeout: {})
    monkeypatch.setattr("spark_kafka_backup.backup.cluster_metadata.time.monotonic", lambda: now[0])
    keeper = keeper_module.MetadataKeeper(tmp_path, TopicSelection(topics=("orders",)), {"bootstrap.servers": "k:9092"})
    for minute in range(60 * 24):  # a day of captures, a minute apart
        now[0] = 1000.0 + 60 * minute
        keeper.keep(object(), 5)
    tries = [at for at in tried if at is None]
    assert len(tries) == keeper_module.SECOND_CONNECTION_TRIES  # the first, then once an hour, then no more
    assert len(tried) == 60 * 24
