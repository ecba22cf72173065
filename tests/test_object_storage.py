"""Backups on object stores: an S3 API server (moto in server mode, over HTTP on loopback; see tests/s3_server.py),
a Google Cloud Storage one (fake-gcs-server, tests/gcs_server.py) and Azure Blob Storage (Azurite,
tests/azure_server.py); the storage interface's own contract is
tests/test_storage_contract.py.

The object partition writer and its crash points are checked directly on each store; then the whole path: a
snapshot backup into ``s3://bucket/prefix`` or ``gs://bucket/prefix`` by spark-submit, ``spark-kafka-backup
verify``, checkpoints, prune, merge, and a restore from the bucket into an empty cluster.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spark_kafka_backup.catalog.ledger import CatalogLedger
from spark_kafka_backup.catalog.store import read_catalog
from spark_kafka_backup.catalog.verify import verify_partition
from spark_kafka_backup.errors import OffsetConflictError, StorageError
from spark_kafka_backup.format.frames import is_framed
from spark_kafka_backup.format.record import Record
from spark_kafka_backup.partition.layout import STATE_DIR, list_segment_files, list_topics
from spark_kafka_backup.partition.object_writer import ObjectPartitionWriter
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.records_file import NO_KEYS
from spark_kafka_backup.storage import ObjectPath, parse_location, read_limited, storage_for
from tests.azure_server import AzureServer
from tests.broker import BrokerUnderTest
from tests.conftest import REPO
from tests.gcs_server import GcsServer
from tests.kafka_helpers import (
    client_config_file,
    consume_all,
    create_topics,
    job_env,
    kbackup_in_process,
    run_backup,
    run_kbackup,
)
from tests.restore_helpers import Target, comparable, group_offsets, run_restore
from tests.s3_server import S3Server

NOW = int(time.time() * 1000) - 60_000


#: The object stores by scheme, and the fixture of each one's server.
STORES = {"s3": "s3", "gs": "gcs", "az": "azure"}


@pytest.fixture(params=list(STORES))
def bucket(request: pytest.FixtureRequest) -> ObjectPath:
    """A fresh bucket's prefix on each object store: moto's S3, fake-gcs-server's GCS (tests/gcs_server.py),
    Azurite's Blob Storage (tests/azure_server.py)."""
    server: S3Server | GcsServer | AzureServer = request.getfixturevalue(STORES[request.param])
    return ObjectPath(request.param, server.new_bucket(), "backups/prod")


def record(offset: int, value: bytes | None = None) -> Record:
    return Record(offset, 0, NOW + offset, b"k%d" % offset, value if value is not None else b"v%d" % offset, ())


# -- the storage interface ------------------------------------------------------------


def test_locations_parse_by_scheme() -> None:
    assert parse_location("s3://b/x/y/") == ObjectPath("s3", "b", "x/y")
    assert parse_location("/tmp/x") == Path("/tmp/x")
    assert (ObjectPath("s3", "b", "x") / "t" / "f").key == "x/t/f"
    assert ObjectPath("s3", "b", "x/t/f").parent == ObjectPath("s3", "b", "x/t")
    assert str(ObjectPath("s3", "b", "x/t/f")) == "s3://b/x/t/f"
    assert parse_location("gs://b/x/") == ObjectPath("gs", "b", "x")
    assert parse_location("az://container/x") == ObjectPath("az", "container", "x")
    assert str(ObjectPath("gs", "b", "x/t")) == "gs://b/x/t"
    with pytest.raises(Exception, match="unsupported storage scheme 'hdfs'"):
        parse_location("hdfs://b/x")


def test_missing_bucket_and_unreachable_endpoint_are_one_clear_error(s3: S3Server) -> None:
    with pytest.raises(StorageError, match="bucket 'kbackup-no-such-bucket' does not exist"):
        list_topics(ObjectPath("s3", "kbackup-no-such-bucket", "x"))
    result = run_kbackup("ls", "s3://kbackup-no-such-bucket/x")
    assert result.returncode == 1
    assert (
        result.stderr.strip()
        == "spark-kafka-backup: error: s3://kbackup-no-such-bucket/x: bucket 'kbackup-no-such-bucket' does not exist"
    )
    env = {**job_env(), "AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_MAX_ATTEMPTS": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "spark_kafka_backup", "ls", "s3://some-bucket/x"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("spark-kafka-backup: error: s3://some-bucket/x: cannot reach the bucket")


# -- the object partition writer ------------------------------------------------------


def test_each_publish_adds_whole_segments_and_replays_are_checked(bucket: ObjectPath) -> None:
    topic_dir = bucket / "orders"
    with ObjectPartitionWriter(topic_dir, "orders", 0, max_segment_size=200, ledger=CatalogLedger(bucket)) as writer:
        writer.ensure_segment(0)
        for offset in range(10):
            assert writer.append(record(offset))
    first = PartitionReader(topic_dir, 0).segments
    assert [s.start_offset for s in first] == [0, 6]  # rolled past 200 bytes
    with ObjectPartitionWriter(topic_dir, "orders", 0, max_segment_size=200, ledger=CatalogLedger(bucket)) as writer:
        assert [writer.append(record(offset)) for offset in range(5, 15)] == [False] * 5 + [True] * 5
    segments = PartitionReader(topic_dir, 0).segments
    assert segments[: len(first)] == first  # published segments never change
    assert [r.offset for r in PartitionReader(topic_dir, 0).records()] == list(range(15))
    catalog = read_catalog(bucket, "orders", 0)
    assert catalog is not None
    assert [entry.name for entry in catalog.segments] == [segment.name for segment in segments]
    assert sum(entry.records for entry in catalog.segments) == 15
    report = verify_partition(bucket, "orders", 0, deep=True)
    assert report.ok and not report.notes, report

    with ObjectPartitionWriter(topic_dir, "orders", 0) as writer, pytest.raises(OffsetConflictError) as caught:
        writer.append(record(7, b"different"))
    assert (caught.value.topic, caught.value.partition, caught.value.offset) == ("orders", 0, 7)


def test_every_published_records_object_is_compressed_when_asked_and_reads_back(bucket: ObjectPath) -> None:
    topic_dir = bucket / "zipped"
    for offsets in (range(0, 10), range(5, 20)):  # the second replays five records against compressed objects
        with ObjectPartitionWriter(topic_dir, "zipped", 0, max_segment_size=200, ledger=CatalogLedger(bucket),
                                   compression="zstd") as writer:  # fmt: skip
            for offset in offsets:
                writer.append(record(offset))
    reader = PartitionReader(topic_dir, 0)
    assert [r.offset for r in reader.records()] == list(range(20))
    assert [r.offset for r in reader.records(from_offset=13)] == list(range(13, 20))
    stored = [read_limited(topic_dir / f"{s.name}_records", 1 << 20) for s in reader.segments]
    assert all(is_framed(data) for data in stored) and len(stored) >= 3  # the last one too: objects are final
    catalog = read_catalog(bucket, "zipped", 0)
    assert catalog is not None and {entry.compression for entry in catalog.segments} == {"zstd"}
    report = verify_partition(bucket, "zipped", 0, deep=True)
    assert report.ok and not report.notes, report
    with ObjectPartitionWriter(topic_dir, "zipped", 0) as writer, pytest.raises(OffsetConflictError):
        writer.append(record(12, b"different"))


def test_encrypted_objects_verify_without_the_key_and_read_with_it(bucket: ObjectPath) -> None:
    from spark_kafka_backup.errors import DecryptionKeyError
    from spark_kafka_backup.format.encryption import KeyRing

    topic_dir = bucket / "sealed"
    kek = bytes(range(100, 132))
    with ObjectPartitionWriter(topic_dir, "sealed", 0, max_segment_size=200, ledger=CatalogLedger(bucket),
                               encryption_key=kek) as writer:  # fmt: skip
        for offset in range(12):
            writer.append(record(offset))
    assert verify_partition(bucket, "sealed", 0).ok  # checksums of the ciphertext, without the key
    with pytest.raises(DecryptionKeyError, match="no key was given"):
        list(PartitionReader(topic_dir, 0).records())
    assert [r.offset for r in PartitionReader(topic_dir, 0, keys=KeyRing.of([kek])).records()] == list(range(12))
    assert verify_partition(bucket, "sealed", 0, deep=True, keys=KeyRing.of([kek])).ok


def test_batches_publish_what_single_appends_publish(bucket: ObjectPath) -> None:
    """The sink's columnar path: the same objects as record by record, replays compared."""
    from spark_kafka_backup.format.record_columns import encode_columns
    from tests.unit.test_record_columns import as_columns

    records = [record(offset) for offset in range(15)]
    with ObjectPartitionWriter(bucket / "one", "one", 0, max_segment_size=200) as writer:
        for item in records[:10]:
            writer.append(item)
    with ObjectPartitionWriter(bucket / "one", "one", 0, max_segment_size=200) as writer:
        for item in records[5:]:
            writer.append(item)
    with ObjectPartitionWriter(bucket / "many", "many", 0, max_segment_size=200) as writer:
        assert writer.append_batch(encode_columns(**as_columns(records[:10]))) == (10, 0)
    with ObjectPartitionWriter(bucket / "many", "many", 0, max_segment_size=200) as writer:
        assert writer.append_batch(encode_columns(**as_columns(records[5:]))) == (5, 5)
    storage = storage_for(bucket)
    for name in ("one", "many"):
        assert [r.offset for r in PartitionReader(bucket / name, 0).records()] == list(range(15))
    one = sorted(storage.list_files(bucket / "one") or [])
    many = sorted(storage.list_files(bucket / "many") or [])
    assert one == many and len(one) > 3
    for file_name in one:
        assert read_limited(bucket / "one" / file_name, 1 << 20) == read_limited(bucket / "many" / file_name, 1 << 20)
    changed = [records[6]._replace(value=b"different")]
    with ObjectPartitionWriter(bucket / "many", "many", 0) as writer, pytest.raises(OffsetConflictError) as caught:
        writer.append_batch(encode_columns(**as_columns(changed)))
    assert caught.value.offset == 6


def test_a_restore_task_downloads_the_segments_its_window_reads_once(bucket: ObjectPath) -> None:
    from spark_kafka_backup.partition.selection import Window
    from spark_kafka_backup.restore.staging import staged_topic_dir

    with ObjectPartitionWriter(bucket / "win", "win", 2, max_segment_size=200) as writer:
        for offset in range(30):
            writer.append(record(offset))
    segments = PartitionReader(bucket / "win", 2).segments
    assert len(segments) >= 4
    window = Window(from_offset=segments[1].start_offset + 1, to_offset=segments[2].start_offset)
    with staged_topic_dir(bucket / "win", 2, window, legacy=False) as staged:
        local = staged.topic_dir
        assert isinstance(local, Path)
        assert staged.names == frozenset({segments[1].name, segments[2].name})
        names = sorted(path.name for path in local.iterdir())
        wanted = {segments[1].name, segments[2].name}
        assert {name.rsplit("_", 1)[0] for name in names if name.startswith("segment_")} == wanted
        low, high = window.from_offset, window.to_offset
        read = list(PartitionReader(local, 2).records(low, high))
        assert read == list(PartitionReader(bucket / "win", 2).records(low, high))
        assert [r.offset for r in read] == list(range(segments[1].start_offset + 1, segments[2].start_offset + 1))
    assert not local.exists() and not local.parent.exists()  # the spool is gone


def test_a_staged_restore_checks_what_it_copied_and_not_an_empty_placeholder_below_its_window(
    bucket: ObjectPath,
) -> None:
    """The placeholder segment stays when the first records arrive above it; a window above both skips it."""
    import types

    from spark_kafka_backup.partition.selection import Window
    from spark_kafka_backup.restore import task as restore_task
    from spark_kafka_backup.restore.staging import staged_topic_dir

    with ObjectPartitionWriter(bucket / "ph", "ph", 0, ledger=CatalogLedger(bucket)) as writer:
        writer.ensure_segment(0)
    with ObjectPartitionWriter(bucket / "ph", "ph", 0, ledger=CatalogLedger(bucket), max_segment_size=200) as writer:
        for offset in range(5, 40):
            writer.append(record(offset))
    window = Window(from_offset=30)
    task = types.SimpleNamespace(
        source_dir=str(bucket / "ph"), source_topic="ph", source_partition=0, window=window, legacy=False
    )
    with staged_topic_dir(bucket / "ph", 0, window, legacy=False) as staged:
        assert staged.names is not None and PartitionReader(bucket / "ph", 0).segments[0].name not in staged.names
        restore_task._check_segments(task, 0, window, staged, NO_KEYS)  # type: ignore[arg-type]
        assert [r.offset for r in PartitionReader(staged.topic_dir, 0).records(30)] == list(range(30, 40))


def test_the_empty_first_segment_is_replaced_by_the_first_records(bucket: ObjectPath) -> None:
    """A partition gets an empty segment at its log-start offset before any record (as on disk)."""
    with ObjectPartitionWriter(bucket / "t", "t", 0, ledger=CatalogLedger(bucket)) as writer:
        writer.ensure_segment(5)
    assert [s.start_offset for s in PartitionReader(bucket / "t", 0).segments] == [5]
    with ObjectPartitionWriter(bucket / "t", "t", 0, ledger=CatalogLedger(bucket)) as writer:
        for offset in (5, 6, 7):
            writer.append(record(offset))
    assert [s.start_offset for s in PartitionReader(bucket / "t", 0).segments] == [5]
    catalog = read_catalog(bucket, "t", 0)
    assert catalog is not None and [(e.start_offset, e.records) for e in catalog.segments] == [(5, 3)]
    report = verify_partition(bucket, "t", 0, deep=True)
    assert report.ok and not report.notes, report


def test_crash_before_the_partition_index_leaves_orphans_the_next_writer_removes(bucket: ObjectPath) -> None:
    topic_dir = bucket / "t"
    with ObjectPartitionWriter(topic_dir, "t", 0, ledger=CatalogLedger(bucket)) as writer:
        for offset in range(3):
            writer.append(record(offset))
    storage = storage_for(bucket)
    # A task killed after uploading a segment, before replacing the partition index:
    storage.write_whole(topic_dir / "segment_partition_000_from_offset_0000000003_records", b"\x01partial")
    storage.write_whole(topic_dir / "segment_partition_000_from_offset_0000000003_index", b"\x01")
    assert not verify_partition(bucket, "t", 0).ok  # an extra, unnamed segment
    # Spark replays the batch: the writer removes the orphans and writes the segment again.
    with ObjectPartitionWriter(topic_dir, "t", 0, ledger=CatalogLedger(bucket)) as writer:
        for offset in range(6):
            writer.append(record(offset))
    assert [r.offset for r in PartitionReader(topic_dir, 0).records()] == list(range(6))
    assert verify_partition(bucket, "t", 0, deep=True).ok


def test_crash_during_the_first_publish_leaves_nothing_behind(bucket: ObjectPath) -> None:
    """Killed after uploading the partition's first segment, before its partition index existed."""
    storage = storage_for(bucket)
    storage.write_whole(bucket / "t" / "segment_partition_000_from_offset_0000000003_records", b"\x01partial")
    storage.write_whole(bucket / "t" / "segment_partition_000_from_offset_0000000003_index", b"\x01")
    # Retention moved the log start meanwhile: the replayed batch starts at 5, another name.
    with ObjectPartitionWriter(bucket / "t", "t", 0, ledger=CatalogLedger(bucket)) as writer:
        for offset in range(5, 8):
            writer.append(record(offset))
    assert [f.start_offset for f in list_segment_files(bucket / "t", 0)] == [5]
    assert verify_partition(bucket, "t", 0, deep=True).ok


def test_crash_between_partition_index_and_catalog_is_caught_up(bucket: ObjectPath) -> None:
    topic_dir = bucket / "t"
    with ObjectPartitionWriter(topic_dir, "t", 0, ledger=CatalogLedger(bucket)) as writer:
        writer.append(record(0))
    # A publish that stopped after the partition index: no catalog for its segment.
    with ObjectPartitionWriter(topic_dir, "t", 0, ledger=None) as writer:
        writer.append(record(1))
    report = verify_partition(bucket, "t", 0)
    assert report.ok and any("not in the catalog yet" in note for note in report.notes)
    with ObjectPartitionWriter(topic_dir, "t", 0, ledger=CatalogLedger(bucket)) as writer:
        writer.append(record(2))
    catalog = read_catalog(bucket, "t", 0)
    assert catalog is not None and [e.first_offset for e in catalog.segments] == [0, 1, 2]
    report = verify_partition(bucket, "t", 0)
    assert report.ok and not report.notes


def test_abandoned_write_publishes_nothing(bucket: ObjectPath) -> None:
    topic_dir = bucket / "t"
    with ObjectPartitionWriter(topic_dir, "t", 0, ledger=CatalogLedger(bucket)) as writer:
        writer.append(record(0))
    writer = ObjectPartitionWriter(topic_dir, "t", 0, ledger=CatalogLedger(bucket))
    writer.append(record(1))
    writer.abandon()
    assert [r.offset for r in PartitionReader(topic_dir, 0).records()] == [0]
    assert len(list_segment_files(topic_dir, 0)) == 1


# -- backup -> verify -> restore through the bucket -------------------------------------------


@pytest.mark.long  # CI time; the quick tier has the store's contract and crash tests on the same S3 server
@pytest.mark.parametrize("scheme", list(STORES))
def test_backup_verify_and_restore_through_the_store(
    kafka: BrokerUnderTest, target: Target, scheme: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    server: S3Server | GcsServer | AzureServer = request.getfixturevalue(STORES[scheme])
    orders, audit, readers = f"{scheme}-orders", f"{scheme}-audit", f"{scheme}-readers"

    create_topics(kafka, {orders: 2, audit: 1})
    producer = Producer(kafka.client_settings())
    for i in range(400):
        producer.produce(
            orders if i % 4 else audit,
            key=None if i % 7 == 0 else b"k%d" % i,
            value=None if i % 11 == 0 else b"v%d" % i * (1 + i % 5),
            headers=[("h", b"%d" % i), ("h", None)] if i % 3 == 0 else None,
            partition=(i // 4) % 2 if i % 4 else 0,
            timestamp=NOW + i,
        )
    producer.flush(30)
    consumer = Consumer(kafka.client_settings(**{"group.id": readers, "enable.auto.commit": "false"}))
    consumer.commit(offsets=[TopicPartition(orders, 0, 40), TopicPartition(audit, 0, 25)], asynchronous=False)
    consumer.close()

    root = f"{scheme}://{server.new_bucket()}/kafka/prod"
    config = tmp_path / "source.properties"
    client_config_file(config, kafka.extra_settings)
    backup_args: list[str | Path] = [
        "--bootstrap-server", kafka.bootstrap_servers, "--command-config", config, "--target-dir", root,
        "--topics", f"{orders},{audit}", "--snapshot", "--max-segment-size", "1500", "--compression", "lz4",
    ]  # fmt: skip
    # Refused while parsing, before Spark starts (so plain Python runs the job file here).
    refused = subprocess.run(
        [sys.executable, str(REPO / "jobs" / "backup.py"), *map(str, backup_args)],
        capture_output=True,
        text=True,
        env=job_env(),
        timeout=120,
    )
    assert refused.returncode == 2
    assert "needs a local --checkpoint-location DIR" in refused.stdout + refused.stderr

    done = run_backup(*backup_args, "--checkpoint-location", tmp_path / "spark-state")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # A location taken for a local path would land under the job's working directory as "s3:/BUCKET/...".
    assert not (REPO / f"{scheme}:").exists() and not (tmp_path / f"{scheme}:").exists(), "the backup landed on disk"

    verify = run_kbackup("verify", root, "--deep")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert f"{orders}/0: ok" in verify.stdout and f"{audit}/0: ok" in verify.stdout
    assert "note" not in verify.stdout  # every segment on the store is cataloged
    ls = run_kbackup("ls", root)
    assert "partition 0: 100 records" in ls.stdout  # the audit topic
    described = json.loads(run_kbackup("describe", root, "--json").stdout)
    assert {t["topic"]: t["records"] for t in described["topics"]} == {audit: 100, orders: 300}
    report = run_kbackup("report", root, "--output", tmp_path / "report.html")
    assert report.returncode == 0 and orders in (tmp_path / "report.html").read_text()
    offsets = run_kbackup("offsets", root)
    assert f"{orders}\t0\t{readers}\t40" in offsets.stdout
    listed = run_kbackup("checkpoint", "list", root)
    assert "\tcompleted\t" in listed.stdout, listed.stdout + listed.stderr

    # A second snapshot adds nothing and changes no published object: not one is written again.
    before = server.objects(root)
    assert any(f"/{orders}/segment_" in key for key in before)
    records_objects = [key for key in before if key.endswith("_records")]
    bucket_root = parse_location(root)
    assert isinstance(bucket_root, ObjectPath)
    heads = [read_head(ObjectPath(scheme, bucket_root.bucket, key)) for key in records_objects]
    assert records_objects and all(is_framed(head) for head in heads)  # --compression lz4: every records object
    again = run_backup(*backup_args, "--checkpoint-location", tmp_path / "spark-state-2")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    after = server.objects(root)
    assert {key: after.get(key) for key in before if f"/{scheme}-" in key} == {
        key: value for key, value in before.items() if f"/{scheme}-" in key
    }

    # Merged on the store (issue 18): fewer, larger segments, then restored from them.
    segments_before = len(PartitionReader(parse_location(root) / orders, 0).segments)
    merged = run_kbackup("merge", root, "--max-segment-size", "20000")
    assert merged.returncode == 0 and "_merged_1" in merged.stdout, merged.stdout + merged.stderr
    assert len(PartitionReader(parse_location(root) / orders, 0).segments) < segments_before
    assert run_kbackup("verify", root, "--deep").returncode == 0

    maps = [a for t in (orders, audit) if target.prefix for a in ("--topic-map", f"{t}={target.name(t)}")]
    progress = tmp_path / "restore.json"
    result = run_restore(*target.args(tmp_path), "--source-dir", root, *maps, "--metrics-file", progress)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    source = consume_all(kafka, [orders, audit])
    restored = consume_all(target.broker, [target.name(orders), target.name(audit)])
    for topic in (orders, audit):
        assert comparable(restored, topic=target.name(topic)) == comparable(source, topic=topic)
    # Progress of a restore from the store (estimated from source offsets while it runs): exact at the end.
    metrics = json.loads(progress.read_text())["metrics"]
    assert {m["labels"]["source"] for m in metrics} == {root}
    remaining = [m["value"] for m in metrics if m["name"] == "kbackup_restore_records_remaining"]
    restored_counts = [m["value"] for m in metrics if m["name"] == "kbackup_restore_records_restored"]
    assert remaining and set(remaining) == {0} and sum(restored_counts) == len(source)
    assert group_offsets(target.broker, readers) == {
        (target.name(orders), 0): 40,
        (target.name(audit), 0): 25,
    }

    # A selective restore from the store (--where: the data source reads the bucket).
    where = "array_contains(headers.key, 'h') AND value IS NOT NULL"
    chosen = target.name(f"{scheme}-where")
    # As spark-submit: Spark's planning Python worker has the environment its JVM started with, and this test
    # worker's kept JVM may predate the server's credentials.
    selective = run_restore(*target.args(tmp_path), "--source-dir", root, "--topics", orders, "--topic-map",
                            f"{orders}={chosen}", "--where", where, in_process=False)  # fmt: skip
    assert selective.returncode == 0, selective.stdout[-3000:] + selective.stderr[-3000:]
    wanted = [r for r in source if r["topic"] == orders and r["headers"] and r["value"] is not None]
    assert wanted and comparable(consume_all(target.broker, [chosen])) == comparable(wanted)


def read_head(location: ObjectPath) -> bytes:
    handle = storage_for(location).open_read(location)
    try:
        return handle.pread(4, 0)
    finally:
        handle.close()


# CI time: in the long tier; the quick tier covers damage refused: tests/test_restore.py (local files),
# tests/test_storage_contract.py
@pytest.mark.long
def test_damage_on_the_store_is_found_by_verify_and_refused_by_restore(
    bucket: ObjectPath, target: Target, tmp_path: Path
) -> None:
    topic_dir = bucket / "dmg"
    with ObjectPartitionWriter(topic_dir, "dmg", 0, max_segment_size=300, ledger=CatalogLedger(bucket)) as writer:
        for offset in range(20):
            writer.append(record(offset))
    segments = PartitionReader(topic_dir, 0).segments
    victim = topic_dir / (segments[1].name + "_records")
    storage = storage_for(bucket)
    data = bytearray(storage.read_limited(victim, 1 << 20))
    data[-1] ^= 0x01
    storage.write_whole(victim, bytes(data))
    storage.delete(topic_dir / (segments[2].name + "_index"))
    verify = run_kbackup("verify", str(bucket))
    assert verify.returncode == 1
    assert f"{segments[1].name}_records: checksum mismatch" in verify.stdout
    assert f"missing segment file(s): {segments[2].name}_index" in verify.stdout
    storage.write_whole(topic_dir / (segments[2].name + "_index"), b"\x01")  # back, but empty: size differs
    result = run_restore(
        *target.args(tmp_path), "--source-dir", str(bucket), "--topic-map", f"dmg={target.name(bucket.scheme + '-dmg')}"
    )
    assert result.returncode == 1
    assert f"segment {segments[1].name}" in result.stderr and "is damaged" in result.stderr


def test_prune_on_the_store_keeps_it_verifiable(bucket: ObjectPath) -> None:
    topic_dir = bucket / "old"
    with ObjectPartitionWriter(topic_dir, "old", 0, max_segment_size=200, ledger=CatalogLedger(bucket)) as writer:
        for offset in range(12):
            writer.append(Record(offset, 0, 1_000 + offset, None, b"x" * 20, ()))
    count = len(PartitionReader(topic_dir, 0).segments)
    dry = run_kbackup("prune", str(bucket), "--older-than", "1d", "--dry-run")
    assert dry.returncode == 0 and f"{count - 1} segment" in dry.stdout, dry.stdout + dry.stderr
    done = run_kbackup("prune", str(bucket), "--older-than", "1d")
    assert done.returncode == 0, done.stderr
    if bucket.scheme == "s3":  # an unversioned bucket: a deleted object is gone (tests/test_locked_buckets.py: kept)
        assert re.search(r"^deleted \d+ segments and 0 checkpoints: \d+ bytes freed$", done.stdout, re.M), done.stdout
    else:  # what a versioning or soft delete keeps is not seen there: never said to be freed
        assert "freed" not in done.stdout and "out of the backup" in done.stdout, done.stdout
        assert "keeps deleted objects for a while when the bucket has object versioning or soft delete" in done.stdout
    remaining = PartitionReader(topic_dir, 0).segments
    assert len(remaining) == 1  # the newest segment stays: it says where the partition ends
    assert len(list_segment_files(topic_dir, 0)) == 1
    assert verify_partition(bucket, "old", 0, deep=True).ok
    offsets = [r.offset for r in PartitionReader(topic_dir, 0).records()]
    assert offsets and offsets == list(range(offsets[0], 12))


# CI time: in the long tier; the quick tier covers merge: tests/test_merge.py (local files)
@pytest.mark.long
def test_merge_on_the_store_replaces_small_objects_and_reads_the_same_records(bucket: ObjectPath) -> None:
    from spark_kafka_backup.partition.merge_intent import intent_path
    from spark_kafka_backup.storage import exists
    from spark_kafka_backup.storage.lease import TargetLease

    topic_dir = bucket / "small"
    for first in range(0, 60, 5):  # one publish per micro-batch, as a backup on the store writes
        with ObjectPartitionWriter(topic_dir, "small", 0, max_segment_size=300, ledger=CatalogLedger(bucket),
                                   compression="zstd") as writer:  # fmt: skip
            for offset in range(first, first + 5):
                writer.append(record(offset))
    before = list(PartitionReader(topic_dir, 0).records())
    segments = PartitionReader(topic_dir, 0).segments
    assert len(segments) > 10
    # Refused while another job holds the target's lease (a backup writing the store).
    with TargetLease(bucket / STATE_DIR, "backup"):
        refused = kbackup_in_process("merge", str(bucket))
    assert refused.returncode == 1 and "backup" in refused.stderr, refused.stderr
    done = kbackup_in_process("merge", str(bucket), "--max-segment-size", "4000")
    assert done.returncode == 0, done.stdout + done.stderr
    after = PartitionReader(topic_dir, 0).segments
    assert len(after) < len(segments) / 3 and after[-1] == segments[-1]
    assert list(PartitionReader(topic_dir, 0).records()) == before
    assert len(list_segment_files(topic_dir, 0)) == len(after)  # the replaced objects are deleted
    assert not exists(intent_path(bucket))
    catalog = read_catalog(bucket, "small", 0)
    assert catalog is not None and {e.compression for e in catalog.segments} == {"zstd"}
    report = verify_partition(bucket, "small", 0, deep=True)
    assert report.ok and not report.notes, report


def test_the_target_lease_on_the_store_is_exclusive_expires_and_is_taken_over(bucket: ObjectPath) -> None:
    """One holder; a second is refused naming it; an expired lease (a dead holder) is taken over; the old one learns."""
    from spark_kafka_backup.errors import LeaseHeldError, LeaseLostError
    from spark_kafka_backup.storage.lease import RENEW_SECONDS, Holder, TargetLease

    state = bucket / "kbackup~state"
    store = storage_for(bucket)
    first = TargetLease(state, "backup")
    first.acquire()
    try:
        with pytest.raises(LeaseHeldError, match=r"is in use: backup started .* holds its lease .* until "):
            TargetLease(state, "prune").acquire()
        # The first holder dies without releasing: its lease object stays until it expires.
        dead = Holder("backup", "gone-host", 1, "2026-01-01T00:00:00Z", expires=time.time() - 1)
        store.write_whole(first.path, dead.encode())
        second = TargetLease(state, "backup")
        second.acquire()  # expired: taken over
        found = Holder.decode(store.read_limited(first.path, 4096))
        assert found is not None and found.pid == second.holder.pid and found.expires is not None
        assert found.expires > time.time()
        # The first holder's next renewal finds the lease taken over and says so.
        deadline = time.time() + RENEW_SECONDS + 10
        while first.lost is None and time.time() < deadline:
            time.sleep(0.2)
        with pytest.raises(LeaseLostError, match="was taken over by another job"):
            first.check()
        second.release()
        assert not store.exists(first.path)  # released: gone
    finally:
        first.release()
    with TargetLease(state, "backup"):
        pass


# CI time: in the long tier; the quick tier covers erase: tests/test_erase.py (local files)
@pytest.mark.long
def test_erase_on_the_store_leaves_no_object_holding_the_key(bucket: ObjectPath, tmp_path: Path) -> None:
    from spark_kafka_backup.storage.lease import TargetLease
    from tests.test_erase import traces_of

    secret = b"customer-42"
    topic_dir = bucket / "people"

    def person(offset: int) -> Record:
        if offset % 6 == 2:
            return Record(offset, 0, NOW + offset, secret, b"address of " + secret, (("who", secret),))
        return record(offset)

    for first in range(0, 60, 10):  # one publish per micro-batch, as a backup on the store writes
        with ObjectPartitionWriter(topic_dir, "people", 0, max_segment_size=700, ledger=CatalogLedger(bucket),
                                   compression="zstd") as writer:  # fmt: skip
            for offset in range(first, first + 10):
                writer.append(person(offset))
    kept = [person(offset) for offset in range(60) if offset % 6 != 2]
    local = tmp_path / "copy"
    assert traces_of(_download(bucket, local), secret)
    # Refused while another job holds the target's lease (a backup writing the store).
    with TargetLease(bucket / STATE_DIR, "backup"):
        refused = kbackup_in_process("erase", str(bucket), "--topic", "people", "--key", secret.decode())
    assert refused.returncode == 1 and "backup" in refused.stderr, refused.stderr
    done = kbackup_in_process("erase", str(bucket), "--topic", "people", "--key", secret.decode())
    assert done.returncode == 0 and "erased 10 records" in done.stdout, done.stdout + done.stderr
    assert list(PartitionReader(topic_dir, 0).records()) == kept
    assert traces_of(_download(bucket, local), secret) == []  # every object, raw and its plain records
    report = verify_partition(bucket, "people", 0, deep=True)
    assert report.ok and any("erased on purpose" in note for note in report.notes), report
    # A batch replayed from the source holds the erased records again: passed over, not stored, not refused.
    with ObjectPartitionWriter(topic_dir, "people", 0, max_segment_size=300, ledger=CatalogLedger(bucket)) as writer:
        assert not any(writer.append(person(offset)) for offset in range(50, 60))
        assert all(writer.append(person(offset)) for offset in range(60, 62) if offset % 6 != 2)
    assert list(PartitionReader(topic_dir, 0).records()) == [*kept, person(60), person(61)]


def _download(root: ObjectPath, into: Path) -> Path:
    """Every object under ``root`` as files under ``into`` (replaced)."""
    shutil.rmtree(into, ignore_errors=True)
    storage = storage_for(root)
    pending = [(root, into)]
    while pending:
        location, local = pending.pop()
        local.mkdir(parents=True, exist_ok=True)
        for name in storage.list_files(location) or []:
            (local / name).write_bytes(read_limited(location / name, 1 << 30))
        pending.extend((location / name, local / name) for name in storage.list_dirs(location) or [])
    return into
