"""Prune, merge and erase on S3 buckets that keep what is deleted: versioning, and Object Lock in governance and
compliance mode (moto's S3 in server mode, tests/s3_server.py).

What they promise there (docs/operations.md, "Versioned and locked buckets"): the backup stays consistent and
readable; a version the bucket keeps is reported as kept (with its lock and retain-until date), never as deleted or
freed; erase deletes every version of what held the erased records, and where a lock refuses it says so and fails,
until a rerun after the lock expires finds nothing left.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from spark_kafka_backup.catalog.ledger import CatalogLedger
from spark_kafka_backup.catalog.verify import verify_partition
from spark_kafka_backup.format.record import Record
from spark_kafka_backup.partition.layout import list_segment_files
from spark_kafka_backup.partition.object_writer import ObjectPartitionWriter
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.storage import ObjectPath
from tests.kafka_helpers import kbackup_in_process
from tests.s3_server import S3Server
from tests.test_erase import traces_of

SECRET = b"customer-42"
#: Bucket kinds: (versioned, Object Lock mode).
KINDS = {"versioned": (True, None), "governance": (True, "GOVERNANCE"), "compliance": (True, "COMPLIANCE")}


def person(offset: int, timestamp: int = 1_000) -> Record:
    if offset % 6 == 2:
        return Record(offset, 0, timestamp + offset, SECRET, b"address of " + SECRET, (("who", SECRET),))
    return Record(offset, 0, timestamp + offset, b"k%d" % offset, b"v%d" % offset, ())


def write_backup(root: ObjectPath, topic: str, records: int = 60) -> list[Record]:
    """Small segments, one publish per batch of ten, as a backup on the store writes them; the records written."""
    written = [person(offset) for offset in range(records)]
    for first in range(0, records, 10):
        with ObjectPartitionWriter(root / topic, topic, 0, max_segment_size=400, ledger=CatalogLedger(root)) as writer:
            for item in written[first : first + 10]:
                writer.append(item)
    return written


@pytest.fixture(params=list(KINDS))
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def new_root(s3: S3Server, kind: str) -> ObjectPath:
    versioned, lock = KINDS[kind]
    return ObjectPath("s3", s3.new_bucket(versioned=versioned, lock=lock), "backups/prod")


def kept_versions(s3: S3Server, root: ObjectPath) -> list[dict[str, Any]]:
    """The versions of segment objects that are not any object's current version."""
    return [item for item in s3.versions(root.bucket, root.key) if not item["IsLatest"] and "segment_" in item["Key"]]


def test_merge_and_prune_report_what_the_bucket_keeps_and_free_nothing(s3: S3Server, kind: str) -> None:
    root = new_root(s3, kind)
    written = write_backup(root, "people")
    topic_dir = root / "people"
    before = PartitionReader(topic_dir, 0).segments

    merged = kbackup_in_process("merge", str(root), "--max-segment-size", "4000")
    assert merged.returncode == 0, merged.stdout + merged.stderr
    after = PartitionReader(topic_dir, 0).segments
    assert len(after) < len(before)
    replaced = len(before) - len(after) + 1  # the merged segment replaced this many
    kept = kept_versions(s3, root)
    assert len(kept) == 2 * replaced  # each replaced segment's records and index objects
    found = re.search(r"the bucket keeps (\d+) versions of (\d+) deleted objects \(([\d,]+) bytes, not freed\)",
                      merged.stdout)  # fmt: skip
    assert found is not None, merged.stdout
    assert (int(found[1]), int(found[2])) == (len(kept), len(kept))
    assert int(found[3].replace(",", "")) == sum(item["Size"] for item in kept)
    _assert_locks_said(merged.stdout, kind, len(kept))
    assert list(PartitionReader(topic_dir, 0).records()) == written  # consistent and readable
    assert verify_partition(root, "people", 0, deep=True).ok

    pruned = kbackup_in_process("prune", str(root), "--older-than", "1d")
    assert pruned.returncode == 0, pruned.stdout + pruned.stderr
    remaining = PartitionReader(topic_dir, 0).segments
    assert len(remaining) == 1 and len(list_segment_files(topic_dir, 0)) == 1
    assert "freed" not in pruned.stdout.replace("not freed", "")
    assert re.search(r"^removed \d+ segments? and 0 checkpoints from the backup$", pruned.stdout, re.M), pruned.stdout
    newly = len(kept_versions(s3, root)) - len(kept)
    assert newly == 2 * (len(after) - 1)
    assert f"the bucket keeps {newly} versions of {newly} deleted objects" in pruned.stdout, pruned.stdout
    _assert_locks_said(pruned.stdout, kind, newly)
    report = verify_partition(root, "people", 0, deep=True)
    assert report.ok, report
    offsets = [r.offset for r in PartitionReader(topic_dir, 0).records()]
    assert offsets == list(range(offsets[0], 60))


def _assert_locks_said(stdout: str, kind: str, versions: int) -> None:
    lock = KINDS[kind][1]
    if lock is None:
        assert f"{versions} versions kept by the bucket's versioning" in stdout, stdout
        assert "retained" not in stdout, stdout
        return
    tomorrow = datetime.now(UTC) + timedelta(days=1)
    refuses = rf"{versions} versions retained by a lock \({lock}\): the store refuses to delete them before (\S+)$"
    found = re.search(refuses, stdout, re.M)
    assert found is not None, stdout
    until = datetime.strptime(found[1], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert abs((until - tomorrow).total_seconds()) < 3600
    listed = re.findall(rf"^  retained: s3://\S+_(?:records|index) version \S+ \({lock} until \S+\)$", stdout, re.M)
    assert len(listed) == min(versions, 10), stdout


def test_erase_deletes_every_version_that_held_the_key_or_says_which_a_lock_keeps(
    s3: S3Server, kind: str, tmp_path: Path
) -> None:
    root = new_root(s3, kind)
    written = write_backup(root, "people")
    topic_dir = root / "people"
    # A merge first: the segments it replaced are kept versions that hold the key too.
    assert kbackup_in_process("merge", str(root), "--max-segment-size", "1200").returncode == 0
    assert traces_of(s3.download_versions(root.bucket, tmp_path / "before"), SECRET)
    kept_records = [item for item in written if item.key != SECRET]

    done = kbackup_in_process("erase", str(root), "--topic", "people", "--key", SECRET.decode())
    assert "erased 10 records from 1 partition of people" in done.stdout, done.stdout + done.stderr
    assert list(PartitionReader(topic_dir, 0).records()) == kept_records
    report = verify_partition(root, "people", 0, deep=True)
    assert report.ok, report
    holding = traces_of(s3.download_versions(root.bucket, tmp_path / "after"), SECRET)
    if KINDS[kind][1] is None:  # versioning alone: every version that held the key is gone
        assert done.returncode == 0, done.stdout + done.stderr
        assert holding == []
        assert "keeps" not in done.stdout
        return
    # A lock keeps them: the erase says which and fails; the backup reads without them.
    assert done.returncode == 1
    stderr = done.stderr.strip()
    assert "\n" not in stderr and "Traceback" not in stderr, stderr
    assert re.fullmatch(
        r"spark-kafka-backup: error: the erased records are out of the backup, but a lock keeps \d+ versions of its "
        r"deleted segments that may still hold them: run the same erase again after \S+Z to delete them "
        r"\(docs/operations.md, 'Versioned and locked buckets'\)",
        stderr,
    ), stderr
    locked = kept_versions(s3, root)  # what is left beside the current objects: the locked versions
    assert holding and {tuple(h.split("/", 1)) for h in holding} <= {(i["VersionId"], i["Key"]) for i in locked}
    # Counted against the erase: the records files among them (an index holds no record), every one that holds it.
    blocking = int(re.findall(r"a lock keeps (\d+) versions", stderr)[0])
    assert len(holding) <= blocking <= len([i for i in locked if i["Key"].endswith("_records")])
    # Run again: still locked, still said, nothing erased twice.
    again = kbackup_in_process("erase", str(root), "--topic", "people", "--key", SECRET.decode())
    assert again.returncode == 1 and "erased 0 records" in again.stdout, again.stdout + again.stderr
    assert list(PartitionReader(topic_dir, 0).records()) == kept_records
    if kind == "governance":  # who may bypass governance mode deletes them
        bypass = kbackup_in_process("erase", str(root), "--topic", "people", "--key", SECRET.decode(),
                                    "--bypass-governance-retention")  # fmt: skip
        assert bypass.returncode == 0, bypass.stdout + bypass.stderr
        assert traces_of(s3.download_versions(root.bucket, tmp_path / "bypassed"), SECRET) == []
        assert verify_partition(root, "people", 0, deep=True).ok


def test_a_rerun_of_erase_after_the_lock_ran_out_deletes_what_it_kept(s3: S3Server, tmp_path: Path) -> None:
    client: Any = s3.client()
    bucket = f"kbackup-short-lock-{time.time_ns() % 10**9}"
    client.create_bucket(Bucket=bucket, ObjectLockEnabledForBucket=True)  # Object Lock, no default retention
    root = ObjectPath("s3", bucket, "backups/prod")
    write_backup(root, "people")
    # Each version locked for a few seconds only (a bucket's default retention is at least a day).
    lock_ends = datetime.now(UTC) + timedelta(seconds=20)
    for item in s3.versions(bucket):
        client.put_object_retention(Bucket=bucket, Key=item["Key"], VersionId=item["VersionId"],
                                    Retention={"Mode": "GOVERNANCE", "RetainUntilDate": lock_ends})  # fmt: skip
    done = kbackup_in_process("erase", str(root), "--topic", "people", "--key", SECRET.decode())
    assert done.returncode == 1, done.stdout + done.stderr
    assert "retained by a lock (GOVERNANCE)" in done.stdout
    time.sleep(max(0.0, (lock_ends - datetime.now(UTC)).total_seconds()) + 1)
    again = kbackup_in_process("erase", str(root), "--topic", "people", "--key", SECRET.decode())
    assert again.returncode == 0, again.stdout + again.stderr
    assert "erased 0 records" in again.stdout and "keeps" not in again.stdout
    assert traces_of(s3.download_versions(bucket, tmp_path / "after"), SECRET) == []
    assert verify_partition(root, "people", 0, deep=True).ok


def test_erase_deletes_the_earlier_versions_of_live_segments_and_leaves_partitions_it_never_erased_from(
    s3: S3Server, tmp_path: Path
) -> None:
    """A name the erase writes its replacement under can have an earlier version holding erased records (a merge or
    an erase undone after writing there): deleted too. A partition nothing was ever erased from keeps its history."""
    from spark_kafka_backup.format.naming import rewritten_name

    client: Any = s3.client()
    root = ObjectPath("s3", s3.new_bucket(versioned=True), "backups/prod")
    write_backup(root, "people")
    with ObjectPartitionWriter(root / "people", "people", 1, max_segment_size=400, ledger=CatalogLedger(root)) as w:
        for offset in range(20):
            w.append(Record(offset, 0, 1_000 + offset, b"other", b"v%d" % offset, ()))
    first = PartitionReader(root / "people", 0).segments[0]
    undone = f"{root.key}/people/{rewritten_name(0, first.name, first.start_offset)}_records"
    client.put_object(Bucket=root.bucket, Key=undone, Body=b"an undone merge's copy: " + SECRET)
    client.delete_object(Bucket=root.bucket, Key=undone)
    other = next(name for name in s3.objects(str(root)) if "/segment_partition_001_" in name)
    body = client.get_object(Bucket=root.bucket, Key=other)["Body"].read()
    client.put_object(Bucket=root.bucket, Key=other, Body=body)  # partition 1's segment has a history
    history_of_other = [item["VersionId"] for item in s3.versions(root.bucket, other) if not item["IsLatest"]]
    assert history_of_other

    done = kbackup_in_process("erase", str(root), "--topic", "people", "--key", SECRET.decode())
    assert done.returncode == 0, done.stdout + done.stderr
    assert undone in s3.objects(str(root))  # the replacement is live under that name now
    assert traces_of(s3.download_versions(root.bucket, tmp_path / "after"), SECRET) == []
    assert [i["VersionId"] for i in s3.versions(root.bucket, other) if not i["IsLatest"]] == history_of_other
    assert verify_partition(root, "people", 0, deep=True).ok and verify_partition(root, "people", 1, deep=True).ok


def test_an_erase_killed_before_its_purge_is_made_good_by_finish(
    s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed after the records are out of the backup and its intent is gone, before the earlier versions went (the
    purge made a no-op here): ``erase --finish`` deletes them."""
    from spark_kafka_backup.catalog import erase as erase_module
    from spark_kafka_backup.cli import erase as erase_command

    root = new_root(s3, "versioned")
    write_backup(root, "people")
    with monkeypatch.context() as patched:
        patched.setattr(erase_module, "purge_partition", lambda *args: None)
        patched.setattr(erase_command, "purge_partition", lambda *args: None)
        done = kbackup_in_process("erase", str(root), "--topic", "people", "--key", SECRET.decode())
    assert done.returncode == 0, done.stdout + done.stderr
    assert traces_of(s3.download_versions(root.bucket, tmp_path / "killed"), SECRET)  # what the kill left
    finished = kbackup_in_process("erase", str(root), "--finish")
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert traces_of(s3.download_versions(root.bucket, tmp_path / "finished"), SECRET) == []


def test_erase_aborts_an_unfinished_multipart_upload_of_the_partition(s3: S3Server) -> None:
    """A backup or merge killed while uploading a large segment leaves parts no object listing shows: erase aborts
    them (an unversioned bucket too); another partition's are not its business."""
    client: Any = s3.client()
    root = ObjectPath("s3", s3.new_bucket(), "backups/prod")
    write_backup(root, "people")
    started = {}
    for partition in (0, 1):
        key = f"{root.key}/people/segment_partition_{partition:03d}_from_offset_0000000100_records"
        upload = client.create_multipart_upload(Bucket=root.bucket, Key=key)["UploadId"]
        client.upload_part(Bucket=root.bucket, Key=key, UploadId=upload, PartNumber=1, Body=b"x" * 100 + SECRET)
        started[partition] = key
    done = kbackup_in_process("erase", str(root), "--topic", "people", "--key", SECRET.decode(), "--partition", "0")
    assert done.returncode == 0, done.stdout + done.stderr
    left = [u["Key"] for u in client.list_multipart_uploads(Bucket=root.bucket).get("Uploads", [])]
    assert left == [started[1]]
