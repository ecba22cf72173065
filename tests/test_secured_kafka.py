"""Backup and restore against a secured Apache Kafka: TLS, SASL_SSL with SCRAM-SHA-512 users, ACLs.

One local node (:mod:`devkit.kafka_security`) with a certificate made
here, Kafka's StandardAuthorizer and no access where no ACL grants it. The
jobs get the original tool's Java-style client settings (``sasl.jaas.config``,
a JKS, PKCS12 or PEM trust store) through ``--command-config``, and the ACLs
``docs/operations.md`` lists, no more: the round trip works with exactly those,
and without any one of them each job refuses in one line before it changes
anything. Every secret is then looked for in everything the jobs printed and
wrote.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from devkit.kafka_cluster import KafkaCluster
from devkit.kafka_security import BrokerSecurity
from devkit.oidc import TokenIssuer
from devkit.tls import CertificateSet, java_trust_store, make_certificates
from tests.broker import BrokerUnderTest
from tests.conftest import REPO
from tests.jvm_archive import kafka_node_options
from tests.kafka_helpers import (
    backed_up,
    consume_all,
    create_topics,
    job_env,
    kbackup_lines,
    kill_job,
    run_backup,
    start_backup,
)
from tests.restore_helpers import comparable, group_offsets, restore_python, run_restore

TOPIC = "sec-orders"
RESTORED = "sec-restored"
GROUP = "sec-readers"
BACKUP_USER, BACKUP_PASSWORD = "backup", "bk-Pw-6f1d-secret"
RESTORE_USER, RESTORE_PASSWORD = "restore", "rs-Pw-90ab-secret"
TRUST_PASSWORD = "ts-Pw-77c3-secret"
OIDC_CLIENT, OIDC_SECRET = "oidc-backup", "oi-Sc-51e2-secret"

#: The ACLs docs/operations.md lists for a backup of TOPIC (type, name, pattern, operation).
BACKUP_ACLS = [
    ("CLUSTER", "kafka-cluster", "LITERAL", "DESCRIBE"),
    ("TOPIC", TOPIC, "LITERAL", "READ"),
    ("TOPIC", TOPIC, "LITERAL", "DESCRIBE_CONFIGS"),
    ("GROUP", "*", "LITERAL", "DESCRIBE"),
]
#: ... and for its restore into RESTORED, a topic the restore creates, with GROUP's offsets remapped.
RESTORE_ACLS = [
    ("CLUSTER", "kafka-cluster", "LITERAL", "DESCRIBE_CONFIGS"),
    ("TOPIC", RESTORED, "LITERAL", "CREATE"),
    ("TOPIC", RESTORED, "LITERAL", "WRITE"),
    ("TOPIC", RESTORED, "LITERAL", "READ"),
    ("GROUP", "kbackup-restore-progress", "LITERAL", "READ"),
    ("GROUP", GROUP, "LITERAL", "READ"),
    ("TRANSACTIONAL_ID", "kbackup-restore.", "PREFIXED", "WRITE"),
]


@dataclass
class Secured:
    cluster: KafkaCluster
    security: BrokerSecurity
    directory: Path  # the users' settings files and stores (they hold the secrets by design)
    issuer: TokenIssuer  # the OpenID Connect provider whose tokens the SASL_SSL listener accepts

    @property
    def harness(self) -> BrokerUnderTest:
        """The PLAINTEXT listener: a super user, for setting up and checking."""
        return BrokerUnderTest("local", self.cluster.bootstrap_servers)

    def admin(self) -> object:
        from confluent_kafka.admin import AdminClient

        return AdminClient(self.cluster.client_settings())

    def acls(self, user: str, rows: list[tuple[str, str, str, str]], *, grant: bool) -> None:
        from confluent_kafka.admin import (
            AclBinding,
            AclBindingFilter,
            AclOperation,
            AclPermissionType,
            ResourcePatternType,
            ResourceType,
        )

        admin = self.admin()
        bindings = []
        for kind, name, pattern, operation in rows:
            # librdkafka calls the cluster resource BROKER (Kafka's resource type 4).
            resource = ResourceType["BROKER" if kind == "CLUSTER" else kind]
            cls = AclBinding if grant else AclBindingFilter
            bindings.append(
                cls(resource, name, ResourcePatternType[pattern], f"User:{user}", "*", AclOperation[operation],
                    AclPermissionType.ALLOW)
            )  # fmt: skip
        futures = admin.create_acls(bindings) if grant else admin.delete_acls(bindings)  # type: ignore[attr-defined]
        for future in futures.values():
            future.result()

    def java_settings(self, user: str, password: str, store_type: str) -> Path:
        """A ``--command-config`` file as a Java client's user writes it, trusting the CA through ``store_type``."""
        if store_type == "PEM":
            trust = f"ssl.truststore.type=PEM\nssl.truststore.location={self.security.certificates.ca_pem}\n"
        else:
            store = self.directory / f"truststore.{store_type.lower()}"
            if not store.exists():
                java_trust_store(self.security.certificates.ca_pem, store, store_type, TRUST_PASSWORD)
            trust = (
                f"ssl.truststore.type={store_type}\nssl.truststore.location={store}\n"
                f"ssl.truststore.password={TRUST_PASSWORD}\n"
            )
        path = self.directory / f"{user}-{store_type.lower()}.properties"
        path.write_text(
            "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{user}" password="{password}";\n' + trust
        )
        return path


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    directory = tmp_path_factory.mktemp("secrets")
    issuer = TokenIssuer({OIDC_CLIENT: OIDC_SECRET}).start()
    security = BrokerSecurity(make_certificates(directory / "certificates"), oauth_jwks_url=issuer.jwks_url)
    with KafkaCluster(security=security, quick_jit=True, java_options=kafka_node_options()) as cluster:
        setup = Secured(cluster, security, directory, issuer)
        upserts = [
            UserScramCredentialUpsertion(
                user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), password.encode()
            )
            for user, password in ((BACKUP_USER, BACKUP_PASSWORD), (RESTORE_USER, RESTORE_PASSWORD))
        ]
        admin = setup.admin()  # kept until the futures are answered: a dropped client cancels them
        for future in admin.alter_user_scram_credentials(upserts).values():  # type: ignore[attr-defined]
            future.result()
        fill(setup)
        yield setup
    issuer.stop()


def fill(secured: Secured) -> None:
    from confluent_kafka import Producer

    create_topics(secured.harness, {TOPIC: 2})
    producer = Producer(secured.cluster.client_settings())
    for i in range(300):
        producer.produce(
            TOPIC,
            key=None if i % 7 == 0 else b"k%d" % i,
            value=b"v%d" % i * (1 + i % 3),
            headers=[("h", b"%d" % i)] if i % 5 == 0 else None,
            partition=i % 2,
        )
    producer.flush(30)
    from tests.kafka_helpers import commit_offsets

    commit_offsets(secured.harness, GROUP, {(TOPIC, 0): 40, (TOPIC, 1): 150})


def secured_args(secured: Secured, config: Path) -> list[str | Path]:
    return ["--bootstrap-server", secured.cluster.sasl_ssl_bootstrap_servers, "--command-config", config]


def error_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in (result.stdout + result.stderr).splitlines() if "error:" in line]


# CI time: in the long tier; the quick tier covers client settings passed through: the quick tier's --command-config
# tests
@pytest.mark.long
def test_round_trip_through_sasl_ssl_with_exactly_the_documented_acls_and_no_secret_anywhere(
    secured: Secured, tmp_path: Path
) -> None:
    secured.acls(BACKUP_USER, BACKUP_ACLS, grant=True)
    secured.acls(RESTORE_USER, RESTORE_ACLS, grant=True)
    backup, events = tmp_path / "backup", tmp_path / "spark-events"
    events.mkdir()
    # The Spark UI's environment and SQL pages are what the event log records (uncompressed, to be searched).
    spark_ui = [f"--spark-conf={key}={value}" for key, value in (
        ("spark.eventLog.enabled", "true"), ("spark.eventLog.dir", events.as_uri()),
        ("spark.eventLog.compress", "false"),
    )]  # fmt: skip
    backup_metrics, restore_metrics = tmp_path / "backup.prom", tmp_path / "restore.json"
    done = run_backup(*secured_args(secured, secured.java_settings(BACKUP_USER, BACKUP_PASSWORD, "JKS")),
                      "--target-dir", backup, "--topics", TOPIC, "--snapshot", *spark_ui,
                      "--metrics-file", backup_metrics)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # A cron-run snapshot leaves its outcome for node_exporter's textfile collector.
    exposed = backup_metrics.read_text()
    for partition, records in ((0, 150), (1, 150)):
        labels = f'target="{backup}",topic="{TOPIC}",partition="{partition}"'
        assert f"kbackup_backup_lag_records{{{labels}}} 0\n" in exposed
        assert f"kbackup_backup_backed_up_offset{{{labels}}} {records}\n" in exposed
    assert f'kbackup_backup_records_written_total{{target="{backup}",topic="{TOPIC}"}} 300\n' in exposed
    assert f'kbackup_backup_up{{target="{backup}"}} 0\n' in exposed
    assert f'\nkbackup_backup_last_success_timestamp_seconds{{target="{backup}"}} ' in exposed
    # The cluster around the topic: its ACLs (literal and prefixed, as granted above) and SCRAM users are kept; the
    # broker configurations and client quotas, which the documented ACLs do not let it describe, are kept as not
    # captured, said once each.
    versions = json.loads("\n".join(kbackup_lines("describe", backup, "--metadata", "--json")))["versions"]
    newest = versions[-1]
    bindings = {(b["resourceType"], b["name"], b["patternType"], b["principal"], b["operation"])
                for b in newest["acls"]["bindings"]}  # fmt: skip
    for user, rows in ((BACKUP_USER, BACKUP_ACLS), (RESTORE_USER, RESTORE_ACLS)):
        assert {(kind, name, pattern, f"User:{user}", operation) for kind, name, pattern, operation in rows} <= bindings
    users = {(u["name"], u["mechanism"]) for u in newest["scramUsers"]["users"]}
    assert {(BACKUP_USER, "SCRAM-SHA-512"), (RESTORE_USER, "SCRAM-SHA-512")} <= users
    for section in ("brokerConfigs", "quotas"):
        assert newest[section]["captured"] is False
        assert newest[section]["permission"] == "DESCRIBE_CONFIGS on the cluster"
    warned = [line for line in (done.stdout + done.stderr).splitlines() if "WARNING cluster metadata" in line]
    assert len(warned) == 2, warned  # once each, whatever the number of captures
    assert "client quotas not captured" in warned[0] and "broker configurations not captured" in warned[1], warned
    assert all(line.endswith("(needs DESCRIBE_CONFIGS on the cluster)") for line in warned), warned

    restore_config = secured.java_settings(RESTORE_USER, RESTORE_PASSWORD, "PKCS12")
    restore_args = [
        *secured_args(secured, restore_config),
        "--source-dir",
        backup,
        "--topic-map",
        f"{TOPIC}={RESTORED}",
    ]
    dry = restore_python(*restore_args, "--dry-run")
    assert dry.returncode == 0, dry.stdout[-3000:] + dry.stderr[-3000:]
    restored = run_restore(*restore_args, *spark_ui, "--metrics-file", restore_metrics)
    assert restored.returncode == 0, restored.stdout[-3000:] + restored.stderr[-3000:]
    document = json.loads(restore_metrics.read_text())
    progress = {(m["name"], m["labels"].get("partition")): m["value"] for m in document["metrics"]}
    for label in ("0", "1"):
        assert progress[("kbackup_restore_records_planned", label)] == 150
        assert progress[("kbackup_restore_records_restored", label)] == 150
        assert progress[("kbackup_restore_records_remaining", label)] == 0
    assert progress[("kbackup_restore_partitions_done", None)] == 2 and progress[("kbackup_restore_up", None)] == 0
    assert ("kbackup_restore_last_success_timestamp_seconds", None) in progress

    source = consume_all(secured.harness, [TOPIC])
    assert len(source) == 300
    assert comparable([json.loads(line) for line in kbackup_lines("cat", backup, "--topic", TOPIC)]) == comparable(
        source
    )
    assert comparable(consume_all(secured.harness, [RESTORED])) == comparable(source)
    offsets = group_offsets(secured.harness, GROUP)
    # Remapped onto the restored topic (the same offsets: the source has no gaps), the source's left as they were.
    assert offsets == {(TOPIC, 0): 40, (TOPIC, 1): 150, (RESTORED, 0): 40, (RESTORED, 1): 150}

    # No secret in anything printed or written: the jobs' output, the dry run, the backup (catalog, topic
    # configurations, consumer offsets, Spark checkpoint, restore state) and the Spark event logs.
    secrets = [BACKUP_PASSWORD, RESTORE_PASSWORD, TRUST_PASSWORD]
    outputs = {"backup": done.stdout + done.stderr, "dry run": dry.stdout + dry.stderr,
               "restore": restored.stdout + restored.stderr}  # fmt: skip
    files = [path for path in tmp_path.rglob("*") if path.is_file()]
    logs = [path for path in files if events in path.parents]
    assert len({path.parent for path in logs}) == 2, "both jobs wrote an event log"
    assert (backup / "kbackup~state" / "spark-checkpoint" / "offsets").is_dir()
    for secret in secrets:
        for name, text in outputs.items():
            assert secret not in text, f"{name} printed a secret"
        for path in files:
            assert secret.encode() not in path.read_bytes(), f"{path} holds a secret"
    # Files at rest: nothing the backup made (segments by the executors, catalog by the driver, Spark's checkpoint
    # by the JVM) is open to others or writable by the group (the default umask 027).
    loose = [f"{path} {path.stat().st_mode & 0o777:o}" for path in [backup, *backup.rglob("*")]
             if path.stat().st_mode & 0o027]  # fmt: skip
    assert not loose, loose
    # What the Spark UI shows was in the logs searched: its environment page and the queries' plans.
    events_seen = b"".join(path.read_bytes() for path in logs)
    assert b"SparkListenerEnvironmentUpdate" in events_seen and b"SparkListenerSQLExecutionStart" in events_seen


@pytest.mark.long  # CI time: the round trip above runs with exactly these ACLs
def test_each_missing_acl_is_refused_in_one_line_before_anything_changes(secured: Secured, tmp_path: Path) -> None:
    """Without any one documented ACL, each job stops before it writes a file, creates a topic or commits."""
    from confluent_kafka.admin import NewTopic

    source = tmp_path / "source-backup"
    config = secured.java_settings(BACKUP_USER, BACKUP_PASSWORD, "JKS")
    # Every documented ACL first: this test ran after the round trip that grants them when both were in one tier;
    # alone (./dev test-long, or CI's share of the long tier) it would find them all missing.
    secured.acls(BACKUP_USER, BACKUP_ACLS, grant=True)
    for row in BACKUP_ACLS:
        secured.acls(BACKUP_USER, [row], grant=False)
        try:
            target = tmp_path / f"backup-{row[3].lower()}-{row[0].lower()}"
            result = subprocess.run(
                [sys.executable, str(REPO / "jobs" / "backup.py"), *map(str, secured_args(secured, config)),
                 "--target-dir", str(target), "--topics", TOPIC, "--snapshot"],
                capture_output=True, text=True, env=job_env(), timeout=120,
            )  # fmt: skip
        finally:
            secured.acls(BACKUP_USER, [row], grant=True)
        kind, name, _, operation = row
        # Without DESCRIBE on every group, the first group the cluster lists is named.
        resource = "the cluster" if kind == "CLUSTER" else f"{kind.lower()} '{name}'" if name != "*" else "group '.+'"
        errors = error_lines(result)
        assert result.returncode == 1 and len(errors) == 1, (row, result.stdout[-2000:], result.stderr[-2000:])
        assert re.search(f"User:{BACKUP_USER} may not {operation} {resource}", errors[0]), (row, errors)
        assert "nothing was done" in errors[0] and "kafka-acls.sh" in errors[0]
        assert not target.exists() or not any(target.iterdir()), f"{row}: the backup wrote {list(target.rglob('*'))}"

    # The restore: into a topic it would create (CREATE and the cluster's configuration), and into one that exists.
    done = run_backup(*secured_args(secured, config), "--target-dir", source, "--topics", TOPIC, "--snapshot")
    assert done.returncode == 0, done.stdout[-3000:]
    existing = "sec-existing"
    admin = secured.admin()
    for future in admin.create_topics([NewTopic(existing, 2)]).values():  # type: ignore[attr-defined]
        future.result()
    restore_config = secured.java_settings(RESTORE_USER, RESTORE_PASSWORD, "PEM")
    before = group_offsets(secured.harness, GROUP)
    secured.acls(RESTORE_USER, RESTORE_ACLS, grant=False)  # the round trip's grants, if it ran first
    for row in RESTORE_ACLS:
        into_existing = row[3] not in ("CREATE", "DESCRIBE_CONFIGS")
        target_topic = existing if into_existing else f"{RESTORED}-{row[0].lower()}-{row[3].lower()}"
        grants = [(k, target_topic if n == RESTORED else n, p, o) for k, n, p, o in RESTORE_ACLS if (k, n, p, o) != row]
        if into_existing:  # DESCRIBE_CONFIGS on an existing topic instead of CREATE
            grants = [g for g in grants if g[3] != "CREATE"] + [("TOPIC", existing, "LITERAL", "DESCRIBE_CONFIGS")]
        secured.acls(RESTORE_USER, grants, grant=True)
        try:
            result = restore_python(*secured_args(secured, restore_config), "--source-dir", source,
                                    "--topic-map", f"{TOPIC}={target_topic}")  # fmt: skip
        finally:
            secured.acls(RESTORE_USER, grants, grant=False)
        kind, name, pattern, operation = row
        name = target_topic if name == RESTORED else name
        if kind == "CLUSTER":
            resource = "the cluster"
        elif pattern == "PREFIXED":
            resource = f"transactional ids {name}*"
        else:
            resource = f"{kind.lower()} '{name}'"
        errors = error_lines(result)
        assert result.returncode == 1 and len(errors) == 1, (row, result.stdout[-2000:], result.stderr[-2000:])
        assert f"User:{RESTORE_USER} may not {operation} {resource}" in errors[0], (row, errors)
        assert "nothing was done" in errors[0]
        assert target_topic == existing or target_topic not in secured.admin().list_topics(timeout=10).topics  # type: ignore[attr-defined]
        assert consume_all(secured.harness, [existing]) == []
        assert group_offsets(secured.harness, GROUP) == before


def test_the_tls_listener_names_the_certificate_principal(secured: Secured, tmp_path: Path) -> None:
    """Client certificate from a PKCS12 key store, CA from a PEM trust store; no ACL for that principal."""
    certificates: CertificateSet = secured.security.certificates
    config = tmp_path / "tls.properties"
    config.write_text(
        "security.protocol=SSL\n"
        f"ssl.keystore.type=PKCS12\nssl.keystore.location={certificates.client_keystore}\n"
        f"ssl.keystore.password={certificates.password}\nssl.key.password={certificates.password}\n"
        f"ssl.truststore.type=PEM\nssl.truststore.location={certificates.ca_pem}\n"
    )
    source = tmp_path / "backup"
    result = subprocess.run(
        [sys.executable, str(REPO / "jobs" / "backup.py"), "--bootstrap-server",
         secured.cluster.ssl_bootstrap_servers, "--command-config", str(config), "--target-dir", str(source),
         "--topics", TOPIC, "--snapshot"],
        capture_output=True, text=True, env=job_env(), timeout=120,
    )  # fmt: skip
    errors = error_lines(result)
    assert result.returncode == 1 and len(errors) == 1, result.stdout[-2000:] + result.stderr[-2000:]
    # No ACL names this principal: the topic is invisible to it, and the error says which permission that is.
    assert f"User:{certificates.client_subject} may not READ topic '{TOPIC}'" in errors[0], errors
    assert certificates.password not in result.stdout + result.stderr


def test_the_operations_guide_lists_exactly_the_tested_acls() -> None:
    """docs/operations.md's tables name the same (resource type, operation) pairs this file grants."""
    text = (REPO / "docs" / "operations.md").read_text()
    listed: dict[str, set[tuple[str, str]]] = {"backup": set(), "restore": set()}
    for job, resource, operation in re.findall(r"^\| (backup|restore) \| ([^|]+) \| ([A-Z_]+) \|", text, re.M):
        kind = next(k for word, k in (("transactional", "TRANSACTIONAL_ID"), ("group", "GROUP"), ("topic", "TOPIC"),
                                      ("cluster", "CLUSTER")) if word in resource)  # fmt: skip
        listed[job].add((kind, operation))
    assert listed["backup"] == {(kind, operation) for kind, _, _, operation in BACKUP_ACLS}
    assert listed["restore"] == {(kind, operation) for kind, _, _, operation in RESTORE_ACLS}


@pytest.mark.long  # CI time
def test_metrics_show_the_lag_measured_independently_and_a_stalled_backup(secured: Secured, tmp_path: Path) -> None:
    """A continuous backup through SASL_SSL with metrics by HTTP and to a JSON file, and logs as JSON lines.

    An open transaction is not lag (the last stable offset stops before it); a backup whose writer cannot
    take its partition's lock makes no progress while records arrive: its lag then equals the cluster's last
    stable offset, asked here, less the end of what the backup's files hold, read here.
    """
    from confluent_kafka import Producer

    from devkit.kafka_cluster import free_port
    from spark_kafka_backup.partition.layout import partition_index_path
    from spark_kafka_backup.partition.lock import lock_partition_index
    from spark_kafka_backup.storage import as_local

    topic = "sec-metrics"
    grants = topic_to_back_up(secured, BACKUP_USER, topic)
    producer = Producer(secured.cluster.client_settings())
    for i in range(100):
        producer.produce(topic, value=b"committed %d" % i)
    producer.flush(30)
    # The transaction stays open until the test commits it: the coordinator must not abort it first (its default
    # timeout, 60 s, is shorter than a loaded machine's start of a backup).
    transactional = Producer(
        {**secured.cluster.client_settings(), "transactional.id": "sec-metrics-tx", "transaction.timeout.ms": "600000"}
    )
    transactional.init_transactions(30)
    transactional.begin_transaction()
    for i in range(10):
        transactional.produce(topic, value=b"open %d" % i)
    transactional.flush(30)
    assert offsets_of(secured, topic) == (100, 110)  # (last stable offset, high watermark)

    backup, log, metrics_file = tmp_path / "backup", tmp_path / "backup.log", tmp_path / "backup-metrics.json"
    port = free_port()
    job = start_backup(
        *secured_args(secured, secured.java_settings(BACKUP_USER, BACKUP_PASSWORD, "JKS")),
        "--target-dir", backup, "--topics", topic, "--trigger-interval", "1", "--offsets-interval", "2",
        "--metrics-interval", "1", "--metrics-port", f"127.0.0.1:{port}", "--metrics-file", metrics_file,
        "--log-format", "json", log=log,
    )  # fmt: skip

    def metric(name: str) -> float | None:
        if not metrics_file.exists():
            return None
        document = json.loads(metrics_file.read_text())
        wanted = {"topic": topic, "partition": "0"}
        found = [
            m["value"]
            for m in document["metrics"]
            if m["name"] == name
            and m["labels"].pop("target") == str(backup)
            and m["labels"] in (wanted, {"topic": topic}, {})
        ]
        return found[0] if found else None

    def wait_for(condition: Callable[[], bool], what: str, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert job.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, f"{what}: {metrics_file.read_text() if metrics_file.exists() else ''}"
            time.sleep(0.5)

    try:
        wait_for(lambda: metric("kbackup_backup_backed_up_offset") == 100, "backed up to the open transaction")
        wait_for(lambda: metric("kbackup_backup_last_stable_offset") == 100, "sampled")
        assert metric("kbackup_backup_lag_records") == 0  # the open transaction's 10 records are not lag
        assert files_end(backup, topic) == 100

        # Stall the backup: its next batch waits for the partition's lock (lockTimeoutSeconds is 600).
        index = as_local(partition_index_path(backup / topic, 0))
        held = lock_partition_index(index, timeout=30, topic=topic, partition=0)
        stalled_at = time.time()
        try:
            transactional.commit_transaction(30)
            # The commit marker is written after commit_transaction returns: at 110 before the next records.
            wait_for(lambda: offsets_of(secured, topic) == (111, 111), "the transaction's marker written", 60)
            for i in range(50):
                producer.produce(topic, value=b"later %d" % i)
            producer.flush(30)
            assert offsets_of(secured, topic) == (161, 161)
            lso = offsets_of(secured, topic)[0]
            wait_for(lambda: metric("kbackup_backup_last_stable_offset") == lso, "the new last stable offset sampled")
            wait_for(lambda: (metric("kbackup_backup_lag_seconds") or 0) >= 2, "the lag's age grows")
            end = files_end(backup, topic)  # the writer waits for the lock: the files stand still
            assert end == 100 and metric("kbackup_backup_backed_up_offset") == end
            assert metric("kbackup_backup_lag_records") == lso - end
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
                scraped = answer.read().decode()
            labels = f'target="{backup}",topic="{topic}",partition="0"'
            assert f"kbackup_backup_lag_records{{{labels}}} {lso - end}\n" in scraped
            assert f"kbackup_backup_last_stable_offset{{{labels}}} {lso}\n" in scraped
            # What "no successful batch in M minutes" alerts on: no trigger completed since the stall began.
            assert (metric("kbackup_backup_last_batch_timestamp_seconds") or 0) <= stalled_at + 1
        finally:
            os.close(held)
        wait_for(lambda: metric("kbackup_backup_backed_up_offset") == 161, "caught up after the stall")
        assert files_end(backup, topic) == 161
        wait_for(lambda: metric("kbackup_backup_lag_seconds") == 0, "no lag left")
        assert metric("kbackup_backup_lag_records") == 0
        assert metric("kbackup_backup_records_written_total") == 160  # each record once; the marker is no record
        assert (metric("kbackup_backup_bytes_written_total") or 0) > 160 * 10
        wait_for(lambda: metric("kbackup_backup_last_offsets_round_timestamp_seconds") is not None, "a round stored")
    finally:
        kill_job(job)
        secured.acls(BACKUP_USER, grants, grant=False)
    # Every line spark-kafka-backup logged, on the driver and in Spark's driver-side workers (the sink's batch lines),
    # is JSON.
    lines = log.read_text().splitlines()
    assert not [line for line in lines if re.match(r"\d\d:\d\d:\d\d spark-kafka-backup ", line)], "a text log line"
    entries = [json.loads(line) for line in lines if line.startswith('{"time"')]
    assert any(e["logger"] == "spark_kafka_backup.sink" and "records," in e["message"] for e in entries), lines[-20:]
    assert any(e["logger"] == "spark_kafka_backup.backup" and e["message"].startswith("backing up") for e in entries)


def topic_to_back_up(secured: Secured, user: str, topic: str) -> list[tuple[str, str, str, str]]:
    """Create ``topic`` (one partition) and grant ``user`` the backup's ACLs on it; returns them, to revoke."""
    create_topics(secured.harness, {topic: 1})
    grants = [(kind, topic if name == TOPIC else name, pattern, op) for kind, name, pattern, op in BACKUP_ACLS]
    secured.acls(user, grants, grant=True)
    return grants


def offsets_of(secured: Secured, topic: str) -> tuple[int, int]:
    """(last stable offset, high watermark) of partition 0, asked of the cluster by this test."""
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient(secured.cluster.client_settings())
    request = {TopicPartition(topic, 0): OffsetSpec.latest()}
    answers = [
        next(iter(admin.list_offsets(request, isolation_level=level).values())).result().offset
        for level in (IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED)
    ]
    return answers[0], answers[1]


def files_end(backup: Path, topic: str) -> int:
    """One past the last offset the backup's files hold for partition 0, read from the files."""
    from spark_kafka_backup.partition.reader import PartitionReader

    last = -1
    for batch in PartitionReader(backup / topic, 0).record_batches():
        for record in batch.records():
            last = max(last, record.offset)
    return last + 1


@pytest.mark.long
def test_oauthbearer_through_an_oidc_token_endpoint(secured: Secured, tmp_path: Path) -> None:
    """The Java client's OIDC settings (KIP-768) back up through SASL_SSL OAUTHBEARER; a wrong secret is one line."""
    from confluent_kafka import Producer

    topic = "sec-oidc"
    grants = topic_to_back_up(secured, OIDC_CLIENT, topic)
    producer = Producer(secured.cluster.client_settings())
    for i in range(25):
        producer.produce(topic, key=b"%d" % i, value=b"token %d" % i)
    producer.flush(30)

    def settings(secret: str) -> Path:
        path = tmp_path / f"oidc-{len(secured.issuer.issued)}-{secret[:2]}.properties"
        path.write_text(
            "security.protocol=SASL_SSL\nsasl.mechanism=OAUTHBEARER\n"
            f"sasl.oauthbearer.token.endpoint.url={secured.issuer.token_url}\n"
            "sasl.login.callback.handler.class="
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler\n"
            "sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            f'clientId="{OIDC_CLIENT}" clientSecret="{secret}" scope="kafka";\n'
            f"ssl.truststore.type=PEM\nssl.truststore.location={secured.security.certificates.ca_pem}\n"
        )
        return path

    try:
        backup = tmp_path / "backup"
        done = run_backup(*secured_args(secured, settings(OIDC_SECRET)), "--target-dir", backup, "--topics", topic,
                          "--snapshot")  # fmt: skip
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert OIDC_CLIENT in secured.issuer.issued  # the token came from the endpoint, not a fallback
        values = [base64.b64decode(r["value"]) for r in backed_up(backup, [topic])]
        assert values == [b"token %d" % i for i in range(25)]
        assert OIDC_SECRET not in done.stdout + done.stderr

        wrong = subprocess.run(
            [sys.executable, str(REPO / "jobs" / "backup.py"), *map(str, secured_args(secured, settings("wrong"))),
             "--target-dir", str(tmp_path / "refused"), "--topics", topic, "--snapshot"],
            capture_output=True, text=True, env=job_env(), timeout=120,
        )  # fmt: skip
        errors = error_lines(wrong)
        assert wrong.returncode == 1 and len(errors) == 1, wrong.stdout[-2000:] + wrong.stderr[-2000:]
        # librdkafka's own words would be "broker transport failure": the line says what the endpoint answered.
        assert "the cluster refused this client's login: Failed to acquire SASL OAUTHBEARER token" in errors[0]
        assert "invalid_client" in errors[0], errors
        scram = subprocess.run(
            [sys.executable, str(REPO / "jobs" / "backup.py"),
             *map(str, secured_args(secured, secured.java_settings(BACKUP_USER, "not-the-password", "PEM"))),
             "--target-dir", str(tmp_path / "refused"), "--topics", topic, "--snapshot"],
            capture_output=True, text=True, env=job_env(), timeout=120,
        )  # fmt: skip
        errors = error_lines(scram)
        assert scram.returncode == 1 and len(errors) == 1, scram.stdout[-2000:] + scram.stderr[-2000:]
        assert "the cluster refused this client's login: " in errors[0] and "SCRAM-SHA-512" in errors[0], errors
        assert not (tmp_path / "refused").exists() or not any((tmp_path / "refused").iterdir())
    finally:
        secured.acls(OIDC_CLIENT, grants, grant=False)


@pytest.mark.long
def test_spark_kafka_source_through_sasl_ssl_with_the_same_acls(secured: Secured, tmp_path: Path) -> None:
    """``--kafka-source spark``: Spark's Java consumer gets the Java settings as they are (JKS trust store read by
    the JVM itself) and needs no ACL beyond the backup's."""
    secured.acls(BACKUP_USER, BACKUP_ACLS, grant=True)
    try:
        backup = tmp_path / "backup"
        config = secured.java_settings(BACKUP_USER, BACKUP_PASSWORD, "JKS")
        done = run_backup(*secured_args(secured, config), "--target-dir", backup, "--topics", TOPIC, "--snapshot",
                          "--kafka-source", "spark")  # fmt: skip
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert comparable([json.loads(line) for line in kbackup_lines("cat", backup, "--topic", TOPIC)]) == (
            comparable(consume_all(secured.harness, [TOPIC]))
        )
        for secret in (BACKUP_PASSWORD, TRUST_PASSWORD):
            assert secret not in done.stdout + done.stderr
    finally:
        secured.acls(BACKUP_USER, BACKUP_ACLS, grant=False)


@pytest.mark.long  # CI time; the comparison itself: tests/unit/test_cluster_metadata_units.py
def test_metadata_check_compares_the_cluster_around_the_topics_renamed_and_changes_nothing(
    secured: Secured, tmp_path: Path
) -> None:
    app = [
        ("TOPIC", TOPIC, "LITERAL", "READ"),
        ("TOPIC", "sec-", "PREFIXED", "WRITE"),
        ("GROUP", GROUP, "LITERAL", "READ"),
    ]
    secured.acls("md-app", app, grant=True)
    backup = tmp_path / "backup"
    harness = ["--bootstrap-server", secured.cluster.bootstrap_servers]  # PLAINTEXT: a super user
    done = run_backup(*harness, "--target-dir", backup, "--topics", TOPIC, "--snapshot")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    def acls_now() -> set[str]:
        return {line for line in kbackup_lines("describe", backup, "--metadata") if "ACL" in line}

    check: list[str | Path] = [*harness, "--source-dir", backup, "--metadata", "acls,users,configs"]
    same = restore_python(*check)
    assert same.returncode == 0 and same.stdout.splitlines()[-1] == "no difference", same.stdout + same.stderr

    # Renamed as a disaster-recovery copy would be: the literal topic ACL follows the topic, the prefixed one stays.
    renamed = restore_python(*check, "--topic-map", f"{TOPIC}=sec-md-copy", "--principal-map", "User:md-app=User:md-dr")
    assert renamed.returncode == 1, renamed.stdout + renamed.stderr
    lines = renamed.stdout.splitlines()
    assert "  missing on the target: ACL ALLOW User:md-dr READ on TOPIC sec-md-copy" in lines
    assert "  missing on the target: ACL ALLOW User:md-dr WRITE on TOPIC sec- (prefixed)" in lines
    assert "  missing on the target: ACL ALLOW User:md-dr READ on GROUP sec-readers" in lines
    assert "  only on the target: ACL ALLOW User:md-app READ on TOPIC sec-orders" in lines
    # (Other ACLs on the topic, the round trip's, are renamed with it too: as many more differences.)
    assert re.fullmatch(r"\d+ differences; nothing was changed \(--metadata-policy check\)", lines[-1]), lines[-1]
    assert restore_python(*check).returncode == 0  # nothing was changed on the target

    # A principal that may not describe the target's ACLs: refused in one line, nothing compared.
    restore_config = secured.java_settings(RESTORE_USER, RESTORE_PASSWORD, "PEM")
    refused = restore_python(*secured_args(secured, restore_config), "--source-dir", backup, "--metadata", "acls")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    # (Kafka answers such a principal's DescribeAcls with no binding, not an error: taken for "none", the target
    # would look empty.)
    assert error_lines(refused) == [
        "spark-kafka-backup restore: error: --metadata acls: the target did not let them be described: the cluster "
        "does not let this principal describe its ACLs (needs DESCRIBE on the cluster); nothing was compared or "
        "changed"
    ], refused.stdout + refused.stderr
    assert "Traceback" not in refused.stdout + refused.stderr
    secured.acls("md-app", app, grant=False)


def scram_user(admin: object, user: str, password: str) -> None:
    from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    upsert = UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                          password.encode())  # fmt: skip
    for future in admin.alter_user_scram_credentials([upsert]).values():  # type: ignore[attr-defined]
        future.result()


def differences(result: subprocess.CompletedProcess[str]) -> list[str]:
    """The lines of ``restore --metadata`` that name a difference or a change."""
    return [line for line in result.stdout.splitlines() if line.startswith("  ")]


def what_a_client_may_do(servers: str, ca: Path, user: str, password: str, topics: dict[str, str]) -> dict[str, str]:
    """What a real SCRAM client of ``user`` gets for each action on ``topics`` (role -> topic name): produce to each,
    and read each as a member of the application's group and of another; each answered ``allowed`` or Kafka's
    refusal."""
    from confluent_kafka import Consumer, Producer

    client = {"bootstrap.servers": servers, "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
              "sasl.username": user, "sasl.password": password, "ssl.ca.location": str(ca)}  # fmt: skip
    answers = {}
    for role, topic in topics.items():
        outcome: list[str] = []
        producer = Producer({**client, "message.timeout.ms": "20000"})

        def delivered(error: Any, _message: object, outcome: list[str] = outcome) -> None:
            outcome.append(error.name() if error else "allowed")

        producer.produce(topic, b"probe", on_delivery=delivered)
        producer.flush(30)
        answers[f"produce {role}"] = outcome[0] if outcome else "no answer"
        # (Not another group on the other topic: which of the two refusals comes first is a race.)
        for group in ("mdx-app-group", "mdx-stranger-group") if role == "orders" else ("mdx-app-group",):
            consumer = Consumer({**client, "group.id": group, "auto.offset.reset": "earliest"})
            consumer.subscribe([topic])  # joins the group (READ on it) and fetches (READ on the topic)
            answer = "no answer"
            deadline = time.monotonic() + 30
            while answer == "no answer" and time.monotonic() < deadline:
                message = consumer.poll(1)
                if message is not None:
                    answer = message.error().name() if message.error() else "allowed"
            consumer.close()
            answers[f"read {role} in {group}"] = answer
    return answers


@pytest.mark.long  # a second secured cluster and a restore through Spark; the quick tier applies quotas and configs
def test_metadata_apply_into_an_empty_secured_cluster_lets_each_client_do_exactly_what_it_did(
    secured: Secured, tmp_path: Path
) -> None:
    """Issue 54's acceptance: ACLs (literal and prefixed, topic and group), quotas (a user, a client id, a default
    entity), SCRAM users and cluster-wide broker defaults backed up; applied into an empty secured cluster under a
    topic map and a principal map by a principal that first lacks ALTER (refused before any change, naming it); the
    application's real clients then allowed and denied exactly as at the source; replace deletes what its dry run
    listed, no more."""
    from confluent_kafka.admin import AdminClient

    from devkit.kafka_cluster import kafka_tool

    app, app_dr, password = "md-app2", "md-app2-dr", "ap-Pw-1d2e-secret"
    orders, orders_dr, other = "sec-mdx-orders", "sec-mdx-orders-dr", "sec-mdx-other"
    app_acls = [
        ("TOPIC", orders, "LITERAL", "WRITE"),
        ("TOPIC", orders, "LITERAL", "READ"),
        ("TOPIC", "sec-mdx-", "PREFIXED", "DESCRIBE"),
        ("GROUP", "mdx-app-group", "LITERAL", "READ"),
    ]
    quotas = [
        ("producer_byte_rate=1048576", ["--entity-type", "users", "--entity-name", app]),
        ("request_percentage=50", ["--entity-type", "clients", "--entity-name", "mdx-client"]),
        ("producer_byte_rate=4096", ["--entity-type", "users", "--entity-default", "--entity-type", "clients",
                                     "--entity-name", "mdx-client"]),
    ]  # fmt: skip

    def configs_tool(servers: str, *args: str) -> None:
        done = kafka_tool("kafka.admin.ConfigCommand", "--bootstrap-server", servers, *args)
        assert done.returncode == 0, done.stdout + done.stderr

    source = secured.cluster.bootstrap_servers
    scram_user(secured.admin(), app, password)
    create_topics(secured.harness, {orders: 1, other: 1})
    secured.acls(app, app_acls, grant=True)
    for values, entity in quotas:
        configs_tool(source, "--alter", "--add-config", values, *entity)
    configs_tool(source, "--alter", "--add-config", "log.cleaner.backoff.ms=15004", "--entity-type", "brokers",
                 "--entity-default")  # fmt: skip
    backup = tmp_path / "backup"
    try:
        done = run_backup("--bootstrap-server", source, "--target-dir", backup, "--topics", orders, "--snapshot")
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        ca = secured.security.certificates.ca_pem
        expected = what_a_client_may_do(secured.cluster.sasl_ssl_bootstrap_servers, ca, app, password,
                                        {"orders": orders, "other": other})  # fmt: skip
        assert expected == {
            "produce orders": "allowed",
            "read orders in mdx-app-group": "allowed",
            "read orders in mdx-stranger-group": "GROUP_AUTHORIZATION_FAILED",
            "produce other": "TOPIC_AUTHORIZATION_FAILED",
            "read other in mdx-app-group": "TOPIC_AUTHORIZATION_FAILED",
        }

        with KafkaCluster(security=secured.security, quick_jit=True, java_options=kafka_node_options()) as target:
            target_admin = AdminClient(target.client_settings())  # kept until the end: its futures are answered
            scram_user(target_admin, "md-restorer", "mr-Pw-44aa-secret")
            # The records first (the topic, created with the backup's configuration), as a super user.
            restored = run_restore("--bootstrap-server", target.bootstrap_servers, "--source-dir", backup,
                                   "--topic-map", f"{orders}={orders_dr}")  # fmt: skip
            assert restored.returncode == 0, restored.stdout[-3000:] + restored.stderr[-3000:]
            create_topics(BrokerUnderTest("local", target.bootstrap_servers), {other: 1})
            restorer = Secured(target, secured.security, secured.directory, secured.issuer)
            restorer.acls("md-restorer", [("CLUSTER", "kafka-cluster", "LITERAL", "DESCRIBE"),
                                          ("CLUSTER", "kafka-cluster", "LITERAL", "DESCRIBE_CONFIGS"),
                                          ("TOPIC", "sec-mdx-", "PREFIXED", "DESCRIBE_CONFIGS")],
                          grant=True)  # fmt: skip
            restorer_config = secured.java_settings("md-restorer", "mr-Pw-44aa-secret", "PEM")
            names = ["--topic-map", f"{orders}={orders_dr}", "--principal-map", f"User:{app}=User:{app_dr}"]
            mapped: list[str | Path] = ["--source-dir", backup, "--metadata", "all", *names]
            as_restorer: list[str | Path] = [*secured_args(restorer, restorer_config), *mapped]
            before = restore_python(*as_restorer)
            assert before.returncode == 1, before.stdout + before.stderr
            assert f"  missing on the target: ACL ALLOW User:{app_dr} READ on TOPIC {orders_dr}" in before.stdout

            # Without ALTER on the cluster: refused before any change, naming it.
            refused = restore_python(*as_restorer, "--metadata-policy", "apply")
            assert refused.returncode != 0 and "Traceback" not in refused.stdout + refused.stderr
            assert error_lines(refused) == [
                "spark-kafka-backup restore: error: User:md-restorer may not ALTER the cluster (needed to create and "
                "delete ACLs); 1 more missing; nothing was changed. Grant it: kafka-acls.sh --bootstrap-server "
                f"{target.sasl_ssl_bootstrap_servers} --add --allow-principal User:md-restorer --operation Alter "
                "--cluster (docs/operations.md lists every ACL the job needs)"
            ], refused.stdout + refused.stderr
            assert differences(restore_python(*as_restorer)) == differences(before)  # nothing was changed

            restorer.acls("md-restorer", [("CLUSTER", "kafka-cluster", "LITERAL", "ALTER"),
                                          ("CLUSTER", "kafka-cluster", "LITERAL", "ALTER_CONFIGS")],
                          grant=True)  # fmt: skip
            applied = restore_python(*as_restorer, "--metadata-policy", "apply")
            lines = applied.stdout.splitlines()
            assert applied.returncode == 1, applied.stdout + applied.stderr  # the SCRAM users are the operator's
            assert f"  created: ACL ALLOW User:{app_dr} READ on TOPIC {orders_dr}" in lines, lines
            assert f"  created: ACL ALLOW User:{app_dr} DESCRIBE on TOPIC sec-mdx- (prefixed)" in lines
            assert f"  created: client quota (user={app_dr}) producer_byte_rate=1048576" in lines
            assert "  created: client quota (client-id=mdx-client, user=<default>) producer_byte_rate=4096" in lines
            assert "  created: config (cluster default) log.cleaner.backoff.ms=15004" in lines
            left = [line for line in lines if line.startswith("  left for you: SCRAM user ")]
            assert (f"  left for you: SCRAM user {app_dr} (SCRAM-SHA-512, 4096 iterations): create it with "
                    f"kafka-configs.sh --bootstrap-server {target.sasl_ssl_bootstrap_servers} --alter --add-config "
                    f"'SCRAM-SHA-512=[iterations=4096,password=...]' --entity-type users --entity-name {app_dr}"
                    ) in left, lines  # fmt: skip
            assert lines[-1].endswith(f"{len(left)} differences left (above)"), lines
            # The operator gives each user its password, with the command printed.
            for line in left:
                scram_user(target_admin, line.split()[5], password)
            again = restore_python(*as_restorer, "--metadata-policy", "apply")
            assert again.returncode == 0, again.stdout + again.stderr
            assert again.stdout.splitlines()[-1] == (
                "0 changes made; the target has what the backup had (acls, configs, quotas, topics, users)"
            )
            kept = [line for line in again.stdout.splitlines() if line.startswith("  ")]
            assert kept and all(line.startswith("  kept (only on the target") for line in kept), kept
            assert all("md-restorer" in line for line in kept), kept  # the restorer's own user and ACLs only

            allowed = what_a_client_may_do(target.sasl_ssl_bootstrap_servers, ca, app_dr, password,
                                           {"orders": orders_dr, "other": other})  # fmt: skip
            assert allowed == expected

            # replace, as the super user: deletes exactly what its dry run listed (the restorer's user and ACLs).
            as_admin: list[str | Path] = ["--bootstrap-server", target.bootstrap_servers, *mapped]
            listed = restore_python(*as_admin, "--metadata-policy", "replace", "--dry-run")
            planned = [line for line in listed.stdout.splitlines() if line.startswith("  would ")]
            would = sorted(line.removeprefix("  would delete: ") for line in planned)
            assert planned and all(line.startswith("  would delete: ") and "md-restorer" in line for line in planned)
            replaced = restore_python(*as_admin, "--metadata-policy", "replace", "--delete-extra")
            assert replaced.returncode == 0, replaced.stdout + replaced.stderr
            deleted = sorted(line.removeprefix("  deleted: ") for line in replaced.stdout.splitlines()
                             if line.startswith("  deleted: "))  # fmt: skip
            assert deleted == would
            assert restore_python(*as_admin).stdout.splitlines()[-1] == "no difference"
    finally:
        secured.acls(app, app_acls, grant=False)
        for values, entity in quotas:
            kafka_tool("kafka.admin.ConfigCommand", "--bootstrap-server", source, "--alter", "--delete-config",
                       values.split("=")[0], *entity)  # fmt: skip
        kafka_tool("kafka.admin.ConfigCommand", "--bootstrap-server", source, "--alter", "--delete-config",
                   "log.cleaner.backoff.ms", "--entity-type", "brokers", "--entity-default")  # fmt: skip
