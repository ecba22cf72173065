"""Snapshot backup on a real broker and real Spark: what `spark-kafka-backup cat` shows equals what a consumer reads."""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from spark_kafka_backup.catalog import checkpoints
from spark_kafka_backup.catalog.offset_history import read_history
from spark_kafka_backup.catalog.store import read_catalog
from spark_kafka_backup.catalog.topics import read_topic_record
from spark_kafka_backup.catalog.verify import verify_backup
from spark_kafka_backup.format.naming import parse_segment_file_name
from spark_kafka_backup.partition.offsets_file import read_consumer_offsets
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.report.summary import summarize_partition
from tests.broker import BrokerUnderTest
from tests.conftest import REPO
from tests.kafka_helpers import (
    backed_up,
    client_config_file,
    consume_all,
    create_topics,
    job_env,
    run_backup,
    run_kbackup,
)

TOPICS = ["snap-mixed", "snap-appendtime", "snap-tx", "snap-empty"]


def _produce(kafka: BrokerUnderTest) -> dict[tuple[str, int], int]:
    """Fill the topics; return each partition's end offset."""
    from confluent_kafka import Producer

    create_topics(
        kafka,
        {"snap-mixed": 3, "snap-appendtime": 2, "snap-tx": 1, "snap-empty": 2},
        {"snap-appendtime": {"message.timestamp.type": "LogAppendTime"}},
    )
    producer = Producer(kafka.client_settings(**{"enable.idempotence": "true", "linger.ms": "5"}))
    # Recent explicit timestamps: old ones would fall to the topic's time-based retention.
    base_time = int(time.time() * 1000) - 60_000
    for i in range(300):
        key = None if i % 5 == 0 else f"key-{i}".encode()
        value = None if i % 7 == 0 else b"" if i % 11 == 0 else f"value-{i}".encode() * (1 + i % 4)
        headers = [("dup", b"1"), ("dup", None), ("ключ", b""), ("dup", b"3")] if i % 3 == 0 else None
        producer.produce("snap-mixed", key=key, value=value, headers=headers, partition=i % 3, timestamp=base_time + i)
        producer.produce("snap-appendtime", key=key, value=value, partition=i % 2)
    producer.flush(30)

    tx = Producer(kafka.client_settings(**{"transactional.id": "snap-tx-producer"}))
    tx.init_transactions(30)
    for batch, commit in ((range(0, 5), True), (range(5, 8), False), (range(8, 10), True)):
        tx.begin_transaction()
        for i in batch:
            tx.produce("snap-tx", key=f"k{i}".encode(), value=f"{'committed' if commit else 'aborted'}-{i}".encode())
        if commit:
            tx.commit_transaction(30)
        else:
            tx.flush(30)  # sent before the abort: the aborted records take offsets (a purge would drop them)
            tx.abort_transaction(30)

    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(kafka.client_settings())
    from confluent_kafka.admin import OffsetSpec

    keys = [TopicPartition("snap-mixed", p) for p in range(3)] + [TopicPartition("snap-tx", 0)]
    result = admin.list_offsets({tp: OffsetSpec.latest() for tp in keys})
    return {(tp.topic, tp.partition): future.result().offset for tp, future in result.items()}


def _commit(kafka: BrokerUnderTest, group: str, offsets: dict[tuple[str, int], int]) -> None:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(kafka.client_settings(**{"group.id": group, "enable.auto.commit": "false"}))
    consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)
    consumer.close()


@dataclass
class Snapshot:
    target: Path
    args: list[str | Path]
    result: subprocess.CompletedProcess[str]
    ends: dict[tuple[str, int], int]


@pytest.fixture(scope="module")
def produced(kafka: BrokerUnderTest) -> dict[tuple[str, int], int]:
    """The topics and groups, made once for both sources; each partition's end offset."""
    ends = _produce(kafka)
    _commit(kafka, "group-at-zero", {("snap-mixed", 0): 0})
    _commit(kafka, "group-mid", {("snap-mixed", 1): 37, ("snap-tx", 0): 3})
    _commit(kafka, "group-at-end", {("snap-mixed", 2): ends[("snap-mixed", 2)], ("snap-tx", 0): ends[("snap-tx", 0)]})
    return ends


#: CI time: the snapshots through Spark's Kafka connector (a JVM source, not the default) run in the long tier.
@pytest.fixture(scope="module", params=["python", pytest.param("spark", marks=pytest.mark.long)])
def snapshot(
    kafka: BrokerUnderTest,
    produced: dict[tuple[str, int], int],
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> Snapshot:
    """A snapshot backup of the topics with spark-kafka-backup's Kafka source, then with Spark's."""
    ends = produced
    target = tmp_path_factory.mktemp(f"snapshot-{request.param}") / "backup"
    settings = tmp_path_factory.mktemp("config") / "client.properties"
    client_config_file(settings, kafka.extra_settings)
    args: list[str | Path] = [
        "--bootstrap-server", kafka.bootstrap_servers,
        "--target-dir", target,
        "--topics", ",".join(TOPICS),
        "--command-config", settings,
        "--max-segment-size", "4096",
        "--snapshot",
        "--kafka-source", request.param,
    ]  # fmt: skip
    result = run_backup(*args)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return Snapshot(target, args, result, ends)


def test_backup_equals_what_a_consumer_reads(kafka: BrokerUnderTest, snapshot: Snapshot) -> None:
    target = snapshot.target
    expected = consume_all(kafka, TOPICS)
    got = backed_up(target, TOPICS)
    assert len(got) == len(expected) > 600
    for mine, theirs in zip(got, expected, strict=True):
        assert mine == theirs
    kinds = {(r["topic"], r["timestampType"]) for r in got}
    assert ("snap-mixed", "CreateTime") in kinds and ("snap-appendtime", "LogAppendTime") in kinds
    tx_values = [r["value"] for r in got if r["topic"] == "snap-tx"]
    assert len(tx_values) == 7  # the aborted transaction's 3 records are not backed up


def test_gaps_from_transaction_markers_are_kept(snapshot: Snapshot) -> None:
    target, ends = snapshot.target, snapshot.ends
    offsets = [record.offset for record in PartitionReader(target / "snap-tx", 0).records()]
    # Apache Kafka: 0-4 committed, 5 commit marker, 6-8 aborted, 9 abort marker, 10-11 committed, 12 commit marker.
    assert offsets == [0, 1, 2, 3, 4, 10, 11]
    assert ends[("snap-tx", 0)] == 13
    # The backup read through 5..9 and says so: transaction offsets, not missing ones.
    summary = summarize_partition(target, "snap-tx", 0)
    assert (summary.missing, summary.skipped) == (0, 5)
    assert [(r.first, r.last) for r in summary.skipped_ranges] == [(5, 9)]


def test_consumer_groups_stored_exactly(snapshot: Snapshot) -> None:
    target, ends = snapshot.target, snapshot.ends
    assert read_consumer_offsets(target / "snap-mixed", 0) == {"group-at-zero": 0}
    assert read_consumer_offsets(target / "snap-mixed", 1) == {"group-mid": 37}
    assert read_consumer_offsets(target / "snap-mixed", 2) == {"group-at-end": ends[("snap-mixed", 2)]}
    assert read_consumer_offsets(target / "snap-tx", 0) == {"group-mid": 3, "group-at-end": ends[("snap-tx", 0)]}
    # The snapshot recorded a completed checkpoint whose cut is that round.
    first = checkpoints.list_checkpoints(target)[0]
    assert (first.id, first.status) == (1, "completed")
    assert first.groups["group-mid"] == {("snap-mixed", 1): 37, ("snap-tx", 0): 3}
    assert first.ends[("snap-tx", 0)] == ends[("snap-tx", 0)]
    assert first.ends[("snap-empty", 1)] == 0
    # The same round is kept in the offset history.
    history = {(e.group, e.topic, e.partition): e.offset for e in read_history(target)}
    assert history[("group-mid", "snap-mixed", 1)] == 37
    assert history[("group-at-end", "snap-tx", 0)] == ends[("snap-tx", 0)]


def test_layout_matches_the_original(snapshot: Snapshot) -> None:
    target = snapshot.target
    for topic, count in (("snap-mixed", 3), ("snap-appendtime", 2), ("snap-tx", 1), ("snap-empty", 2)):
        names = sorted(p.name for p in (target / topic).iterdir())
        for partition in range(count):
            assert f"index_partition_{partition:03d}" in names
        for name in names:
            data = (target / topic / name).read_bytes()
            if name.startswith(("segment_", "index_")):
                assert data[:1] == b"\x01", name
            else:
                assert name.startswith("consumer_offsets_partition_"), name
        segments = [parse_segment_file_name(n) for n in names if n.startswith("segment_")]
        assert all(s is not None for s in segments)
        assert {s.kind for s in segments if s} == {"records", "index"}
    # 4 KiB segments roll: the mixed topic has several segments per partition.
    assert len(PartitionReader(target / "snap-mixed", 0).segments) > 2
    # The backup keeps a catalog of every segment it finished, and the whole backup verifies.
    mixed_catalog = read_catalog(target, "snap-mixed", 0)
    assert mixed_catalog is not None
    assert len(mixed_catalog.segments) == len(PartitionReader(target / "snap-mixed", 0).segments) - 1
    reports = verify_backup(target, TOPICS, deep=True)
    assert all(report.ok for report in reports), [r.errors for r in reports if r.errors]
    assert not any("not in the catalog yet" in note for report in reports for note in report.notes)
    # The catalog records each topic's partition count and its own configuration.
    appendtime = read_topic_record(target, "snap-appendtime")
    assert appendtime is not None
    assert (appendtime.partitions, appendtime.config) == (2, {"message.timestamp.type": "LogAppendTime"})
    mixed = read_topic_record(target, "snap-mixed")
    assert mixed is not None and (mixed.partitions, mixed.config) == (3, {})
    empty = PartitionReader(target / "snap-empty", 1)
    assert [(s.name, s.record_count) for s in empty.summaries()] == [
        ("segment_partition_001_from_offset_0000000000", 0)
    ]


def test_progress_and_summary_are_printed(snapshot: Snapshot) -> None:
    result = snapshot.result
    output = result.stdout + result.stderr
    assert "batch 0:" in output and "remaining lag:" in output
    assert "snapshot: snap-mixed: 3 partitions, 300 records" in output
    # Spark is quiet from the JVM's start, not only once the job has set its level.
    for noise in ("Using Spark's default log4j profile", "INFO SparkContext", "NativeCodeLoader"):
        assert noise not in output, noise
    import re

    summary = re.search(
        r"snapshot finished: (\d+) records read in ([\d.]+) s of micro-batches \((\d+) records/s\); "
        r"([\d.]+) s from the job's start to its end",
        output,
    )
    assert summary is not None, output[-3000:]
    records, batches, rate, whole = int(summary[1]), float(summary[2]), int(summary[3]), float(summary[4])
    assert records >= 600 and 0 < batches < whole  # the rate is the reading rate, start-up left out
    # The seconds are printed to 0.1 s, the rate from the seconds measured: within that rounding (and the rate's).
    assert records / (batches + 0.05) - 1 <= rate <= records / max(batches - 0.05, 0.01) + 1, (records, batches, rate)
    # The topics' lines say what the backup holds as `ls` does: the records files' sizes, each with its magic byte;
    # the batches say the bytes of records they wrote.
    written = sum(int(n.replace(",", "")) for n in re.findall(r"records, ([\d,]+) bytes written to ", output))
    held = sum(int(n.replace(",", "")) for n in re.findall(r"records, ([\d,]+) bytes in the backup", output))
    segments = list(snapshot.target.glob("*/*_records"))
    assert written > 0 and held == written + len(segments), output[-3000:]
    listed = run_kbackup("ls", snapshot.target)
    assert listed.returncode == 0, listed.stderr
    in_ls = sum(
        int(n.replace(",", ""))
        for n in re.findall(r"^  partition \d+: .*, ([\d,]+) bytes? in [\d,]+ segments?$", listed.stdout, re.M)
    )
    assert in_ls == held, (in_ls, held, listed.stdout)


def test_second_snapshot_stores_new_group_offsets_and_changes_no_data(
    kafka: BrokerUnderTest, snapshot: Snapshot
) -> None:
    target = snapshot.target
    _commit(kafka, "group-mid", {("snap-mixed", 1): 50})  # a group moves on; no new records
    before = {p: p.read_bytes() for p in target.rglob("*") if p.is_file() and "kbackup~state" not in p.parts}
    try:
        result = run_backup(*snapshot.args)
    finally:
        _commit(kafka, "group-mid", {("snap-mixed", 1): 37})  # as the other source's snapshot expects it
    assert result.returncode == 0, result.stdout[-3000:]
    after = {p: p.read_bytes() for p in target.rglob("*") if p.is_file() and "kbackup~state" not in p.parts}
    changed = sorted(str(p.relative_to(target)) for p in after if after[p] != before.get(p))
    assert changed == ["snap-mixed/consumer_offsets_partition_001"]
    assert read_consumer_offsets(target / "snap-mixed", 1) == {"group-mid": 50}
    assert read_consumer_offsets(target / "snap-tx", 0)["group-mid"] == 3


# CI time: in the long tier; the quick tier covers group offsets stored and stored again:
# test_consumer_groups_stored_exactly, test_second_snapshot_...
@pytest.mark.long
def test_a_group_deleted_on_the_cluster_stays_in_the_backup_unless_prune_groups(
    kafka: BrokerUnderTest, tmp_path: Path
) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    topic = "snap-prune"
    create_topics(kafka, {topic: 1})
    producer = Producer(kafka.client_settings())
    for i in range(20):
        producer.produce(topic, b"v%d" % i, b"k%d" % i)
    producer.flush(30)
    _commit(kafka, "prune-kept", {(topic, 0): 5})
    _commit(kafka, "prune-gone", {(topic, 0): 12})
    target = tmp_path / "backup"
    settings = client_config_file(tmp_path / "client.properties", kafka.extra_settings)
    args: list[str | Path] = ["--bootstrap-server", kafka.bootstrap_servers, "--command-config", settings,
                              "--target-dir", target, "--topics", topic, "--snapshot"]  # fmt: skip
    # (Without --prune-groups a deleted group's offsets stay: every run merges a round into what is stored.)
    for attempt in ("first", "with --prune-groups"):
        if attempt == "with --prune-groups":
            admin = AdminClient(kafka.client_settings())
            for future in admin.delete_consumer_groups(["prune-gone"]).values():
                future.result(30)
        done = run_backup(*args, *(["--prune-groups"] if attempt == "with --prune-groups" else []))
        assert done.returncode == 0, f"{attempt}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
        expected = {"prune-kept": 5} if attempt == "with --prune-groups" else {"prune-kept": 5, "prune-gone": 12}
        assert read_consumer_offsets(target / topic, 0) == expected, attempt


# -- errors before Spark starts ------------------------------------------------------


def _job(*args: str) -> subprocess.CompletedProcess[str]:
    """The job run by plain Python: errors must come before any Spark session exists."""
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, str(REPO / "jobs" / "backup.py"), *args],
        capture_output=True,
        text=True,
        env=job_env(),
        timeout=60,
    )
    assert time.monotonic() - started < 30
    assert "Traceback" not in result.stderr
    assert "SparkContext" not in result.stdout + result.stderr
    return result


def test_unknown_flag_is_a_usage_error() -> None:
    result = _job("--target-dir", "/tmp/x", "--topics", "a", "--bootstrap-server", "h:1", "--snapshott")
    assert result.returncode == 2
    assert "unrecognized arguments: --snapshott" in result.stderr


def test_unknown_property_and_conflicts(tmp_path: Path) -> None:
    properties = tmp_path / "sink.properties"
    properties.write_text("target.dir=/tmp/a\ntopics:orders\ncluster.bootstrap.servers=h:1\nmax.segment.size=5\n")
    result = _job("--properties", str(properties))
    assert result.returncode == 2
    assert (
        result.stderr.strip() == f"spark-kafka-backup backup: error: {properties}: unknown property 'max.segment.size'"
    )
    properties.write_text("target.dir=/tmp/a\ntopics:orders\ncluster.bootstrap.servers=h:1\n")
    result = _job("--properties", str(properties), "--topics", "payments")
    assert result.returncode == 2
    assert "--topics 'payments' disagrees with topics='orders'" in result.stderr
    result = _job("--target-dir", "/tmp/a", "--topics", "a", "--topics-regex", "b.*", "--bootstrap-server", "h:1")
    assert result.returncode == 2 and "not both" in result.stderr


def test_unreachable_broker_is_said_by_its_cause_within_seconds(tmp_path: Path) -> None:
    from devkit.kafka_cluster import free_port

    port = free_port()
    for server, cause in (
        (f"127.0.0.1:{port}", f"127.0.0.1:{port}: nothing listens at 127.0.0.1 port {port} (connection refused)"),
        ("kafka.invalid:9092", "kafka.invalid:9092: the name kafka.invalid does not resolve"),  # RFC 2606: never
        (f"PLAINTEXT://127.0.0.1:{port}", f"PLAINTEXT://127.0.0.1:{port}: nothing listens at 127.0.0.1 port {port}"),
    ):
        started = time.monotonic()
        result = _job("--bootstrap-server", server, "--target-dir", str(tmp_path), "--topics", "a", "--snapshot")
        assert result.returncode == 1
        assert result.stderr.startswith(f"spark-kafka-backup backup: error: cannot reach Kafka at {server}: {cause}")
        assert len(result.stderr.strip().splitlines()) == 1
        assert time.monotonic() - started < 15, result.stderr  # librdkafka alone took about 26 s to say less


def test_missing_topic(kafka: BrokerUnderTest, tmp_path: Path) -> None:
    result = _job(
        "--bootstrap-server",
        kafka.bootstrap_servers,
        "--target-dir",
        str(tmp_path),
        "--topics",
        "no-such-topic",
        "--snapshot",
    )
    assert result.returncode == 1
    assert (
        result.stderr.strip()
        == f"spark-kafka-backup backup: error: topic(s) no-such-topic do not exist on {kafka.bootstrap_servers}"
    )


def test_a_topic_named_like_the_old_state_directory_is_refused_only_where_it_is_one(
    kafka: BrokerUnderTest, tmp_path: Path
) -> None:
    create_topics(kafka, {".kbackup": 2}, exist_ok=True)  # tests/test_topic_names.py makes it too
    old = tmp_path / "old"
    (old / ".kbackup" / "checkpoints").mkdir(parents=True)  # an older spark-kafka-backup's state directory
    result = _job(
        "--bootstrap-server", kafka.bootstrap_servers, "--target-dir", str(old), "--topics", ".kbackup", "--snapshot",
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"spark-kafka-backup backup: error: topic '.kbackup' cannot be backed up into {old}: that target keeps "
        "spark-kafka-backup's state "
        f"in the directory {old / '.kbackup'} (made by an older spark-kafka-backup); back it up into a new target, or "
        "leave it "
        "out of --topics / --topics-regex"
    )
    assert not (old / "kbackup~state").exists()


def test_a_failure_inside_spark_is_one_line(kafka: BrokerUnderTest, tmp_path: Path) -> None:
    """Not spark-kafka-backup's own error (here Spark cannot start): still one line, the cause in it, no traceback."""
    create_topics(kafka, {"spark-fails": 1})
    result = run_backup(
        "--bootstrap-server", kafka.bootstrap_servers, "--target-dir", str(tmp_path / "b"), "--topics", "spark-fails",
        "--snapshot", "--spark-conf", "spark.master=no-such-master://x",
    )  # fmt: skip
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("spark-kafka-backup backup: error:")]
    assert len(errors) == 1, result.stderr[-3000:]
    assert "no-such-master://x" in errors[0] and errors[0].endswith("(--debug shows where)")
    assert "Traceback" not in result.stdout + result.stderr
    assert not (tmp_path / "b").exists()  # refused before anything was written


# CI time: in the long tier; the quick tier covers one-line failures: test_a_failure_inside_spark_is_one_line
@pytest.mark.long
def test_spark_source_without_its_connector_is_one_line(kafka: BrokerUnderTest, tmp_path: Path) -> None:
    """``--kafka-source spark`` submitted without ``--packages``: refused before reading, naming the package."""
    from spark_kafka_backup.spark.kafka_connector import package_coordinate
    from spark_kafka_backup.spark_submit import spark_submit_command

    create_topics(kafka, {"no-connector": 1})
    command = spark_submit_command(
        "backup", "--bootstrap-server", kafka.bootstrap_servers,
        "--target-dir", tmp_path / "backup", "--topics", "no-connector", "--snapshot",
    )  # fmt: skip
    command += ["--kafka-source", "spark"]  # after the job file: the helper adds no --jars
    result = subprocess.run(command, capture_output=True, text=True, env=job_env(), cwd=REPO, timeout=300)
    assert result.returncode == 1
    # The error line reaches spark-submit's stderr (the JVM merges the Python driver's stderr into stdout).
    output = result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("spark-kafka-backup backup: error:")]
    assert "error:" not in result.stdout
    assert errors == [
        "spark-kafka-backup backup: error: --kafka-source spark needs Spark's Kafka connector on the class path: "
        f"spark-submit --packages {package_coordinate()} jobs/backup.py ..."
    ]
    assert "Traceback" not in output
    assert not (tmp_path / "backup").exists()  # refused before anything was written


# CI time: in the long tier; the quick tier covers one-line failures: test_a_failure_inside_spark_is_one_line
@pytest.mark.long
def test_a_conflicting_record_ends_in_one_error_line(kafka: BrokerUnderTest, tmp_path: Path) -> None:
    """A target whose offset 0 holds other bytes: exit 1, the cause in one line on stderr, no stack traces."""
    from confluent_kafka import Producer

    from spark_kafka_backup.format.record import Record
    from spark_kafka_backup.partition.writer import PartitionWriter

    create_topics(kafka, {"conflicting": 1})
    producer = Producer(kafka.client_settings())
    for i in range(5):
        producer.produce("conflicting", value=b"real-%d" % i, partition=0)
    producer.flush(30)
    backup = tmp_path / "backup"
    with PartitionWriter(backup / "conflicting", "conflicting", 0, fsync=False) as writer:
        writer.append(Record(0, 0, 1, b"x", b"other"))
    result = run_backup(
        "--bootstrap-server", kafka.bootstrap_servers, "--target-dir", backup, "--topics", "conflicting", "--snapshot"
    )  # fmt: skip
    assert result.returncode == 1
    output = result.stdout + result.stderr
    assert [line for line in result.stderr.splitlines() if "error:" in line] == [
        "spark-kafka-backup backup: error: the backup query failed: OffsetConflictError: topic 'conflicting' "
        "partition 0 "
        "offset 0: offset is already stored with different content"
    ]
    assert result.stderr.rstrip().endswith("offset is already stored with different content")
    assert "Traceback" not in output and "\tat org.apache" not in output and "py4j" not in output
    assert len(output.splitlines()) < 25, output


# CI time: in the long tier; the quick tier covers secrets kept out of messages: tests/unit/test_backup_config.py
@pytest.mark.long
def test_command_config_secrets_stay_out_of_the_output(tmp_path: Path) -> None:
    config = tmp_path / "client.properties"
    jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="hunter2-secret";'
    config.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config={jaas}\n")
    from devkit.kafka_cluster import free_port

    result = _job("--bootstrap-server", f"127.0.0.1:{free_port()}", "--target-dir", str(tmp_path), "--topics", "a",
                  "--command-config", str(config), "--snapshot")  # fmt: skip
    assert result.returncode == 1
    assert "hunter2-secret" not in result.stdout + result.stderr


def test_a_snapshot_whose_regex_matches_nothing_fails_in_one_line(kafka: BrokerUnderTest, tmp_path: Path) -> None:
    target = tmp_path / "backup"
    result = _job("--bootstrap-server", kafka.bootstrap_servers, "--target-dir", str(target),
                  "--topics-regex", "no-topic-is-named-like-this-.*", "--snapshot")  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"spark-kafka-backup backup: error: no topic on {kafka.bootstrap_servers} matches --topics-regex "
        "'no-topic-is-named-like-this-.*': a snapshot would back up nothing (a continuous backup waits for "
        "matching topics to appear)"
    )
    assert not target.exists()
