"""The storage contract: the same scenarios once per backend (local files, S3 on moto, Google Cloud Storage on
fake-gcs-server, Azure Blob Storage on Azurite), in the manner of fsspec's abstract test classes.

The storage interface itself (spark_kafka_backup.storage.base); a large file published whole; two writers racing
for a backup target's lease; and (long tier) a continuous backup killed with SIGKILL three times, then a snapshot
and a restore, exact record for record. tests/test_object_storage.py runs the object partition writer, its crash
points and the whole jobs on each object store.
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import socket
import subprocess
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from spark_kafka_backup.errors import BackupNotFoundError, LeaseHeldError, StorageError
from spark_kafka_backup.partition.layout import list_topics
from spark_kafka_backup.storage import Location, ObjectPath, object_storage_for, read_chunks, storage_for
from spark_kafka_backup.storage import lease as lease_module
from spark_kafka_backup.storage.lease import (
    LEASE_OBJECT,
    TTL_SECONDS,
    Holder,
    TargetLease,
    current_holder,
    process_space,
)
from tests.azure_server import AzureServer
from tests.broker import BrokerUnderTest
from tests.gcs_server import GcsServer
from tests.kafka_helpers import backed_up, consume_all, create_topics, run_backup, start_backup
from tests.live_load import Producer, batches, client_args, more_batches, wait_for
from tests.restore_helpers import Target, comparable, run_restore
from tests.s3_server import S3Server

#: The object stores by scheme, and the fixture of each one's server.
STORES = {"s3": "s3", "gs": "gcs", "az": "azure"}
BACKENDS = ["local", *STORES]
OBJECT_STORES = list(STORES)


def backend_root(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Location:
    """A fresh, empty backup root on ``backend``."""
    if backend == "local":
        return tmp_path / "backups" / "prod"
    server: S3Server | GcsServer | AzureServer = request.getfixturevalue(STORES[backend])
    return ObjectPath(backend, server.new_bucket(), "backups/prod")


@pytest.fixture(params=BACKENDS)
def root(request: pytest.FixtureRequest, tmp_path: Path) -> Location:
    return backend_root(request.param, request, tmp_path)


def test_files_are_written_read_listed_and_deleted(root: Location) -> None:
    storage = storage_for(root)
    file = root / "dir" / "file"
    assert not storage.exists(file) and storage.size(file) is None
    storage.write_whole(file, b"0123456789" * 1000)
    assert storage.size(file) == 10_000
    handle = storage.open_read(file)
    try:
        assert handle.pread(5, 9995) == b"56789"
        handle.stream.seek(10)
        assert handle.stream.read(3) == b"012"
    finally:
        handle.close()
    storage.write_whole(file, b"replaced")  # whole: the old bytes are gone
    assert storage.read_limited(file, 100) == b"replaced"
    assert storage.list_files(root / "dir") == ["file"]
    storage.write_whole(root / "dir" / "other", b"o")
    assert storage.list_files(root / "dir", starting_with="fi") == ["file"]  # a store lists that prefix alone
    assert not storage.list_files(root / "dir", starting_with="zz")
    storage.delete(root / "dir" / "other")
    assert storage.list_dirs(root) == ["dir"]
    assert storage.list_files(root / "nothing") is None and storage.list_dirs(root / "nothing") is None
    assert storage.create_exclusive(root / "once", b"a") is True
    assert storage.create_exclusive(root / "once", b"b") is False
    assert storage.read_limited(root / "once", 10) == b"a"
    storage.delete(file)
    storage.delete(file)  # absent is fine
    assert not storage.exists(file)
    with pytest.raises(BackupNotFoundError):
        storage.open_read(file)


@pytest.mark.parametrize("backend", OBJECT_STORES)
def test_a_bucket_that_is_not_there_is_one_clear_error(backend: str, request: pytest.FixtureRequest) -> None:
    request.getfixturevalue(STORES[backend])  # the server answers; the bucket (container) is missing
    missing = ObjectPath(backend, "kbackup-no-such-bucket", "backups")
    what = "container" if backend == "az" else "bucket"
    with pytest.raises(StorageError, match=rf"^{backend}://kbackup-no-such-bucket/backups: {what} "
                                           r"'kbackup-no-such-bucket' does not exist$"):  # fmt: skip
        list_topics(missing)
    with pytest.raises(StorageError, match=f"{what} 'kbackup-no-such-bucket' does not exist"):
        object_storage_for(missing).check_bucket(missing)


def test_a_large_file_is_published_whole(root: Location, tmp_path: Path) -> None:
    """20 MiB: past boto3's multipart threshold and google-cloud-storage's resumable one (8 MiB each)."""
    source = tmp_path / "large"
    data = random.Random(5).randbytes(20 << 20)
    source.write_bytes(data)
    storage = storage_for(root)
    target = root / "topic" / "segment_large"
    storage.upload(target, source)
    assert storage.size(target) == len(data)
    digest = hashlib.sha256()
    for piece in read_chunks(target, 3 << 20):
        digest.update(piece)
    assert digest.digest() == hashlib.sha256(data).digest()
    handle = storage.open_read(target)
    try:
        assert handle.pread(7, (12 << 20) - 3) == data[(12 << 20) - 3 : (12 << 20) + 4]
    finally:
        handle.close()


def race_for_the_lease(state: Location, purposes: tuple[str, ...]) -> tuple[list[TargetLease], list[str]]:
    """Each purpose's job asks for the lease at the same instant: the leases taken, and the refusals."""
    start = threading.Barrier(len(purposes))
    won: list[TargetLease] = []
    refused: list[str] = []

    def contend(purpose: str) -> None:
        lease = TargetLease(state, purpose)
        start.wait()
        try:
            lease.acquire()
        except LeaseHeldError as exc:
            refused.append(str(exc))
        else:
            won.append(lease)

    threads = [threading.Thread(target=contend, args=(purpose,)) for purpose in purposes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return won, refused


def test_two_writers_racing_for_the_lease_one_wins(root: Location) -> None:
    """Each round, two jobs ask for a fresh target's lease at the same instant: exactly one holds it, the other is
    refused naming the holder; after the winner releases it, the next ask gets it."""
    for round_number in range(4):
        state = root / f"race-{round_number}" / "kbackup~state"
        won, refused = race_for_the_lease(state, ("backup", "prune"))
        try:
            assert len(won) == 1 and len(refused) == 1, (won, refused)
            assert "is in use" in refused[0]
            # Named, or on a file system "another process" when the loser looked between the winner's lock and its
            # writing who it is (the file's bytes only describe the holder; the flock is the lease).
            assert won[0].holder.purpose in refused[0] or "another process holds" in refused[0], refused[0]
        finally:
            for lease in won:
                lease.release()
        with TargetLease(state, "merge"):
            pass  # released: free again


@pytest.mark.parametrize("backend", OBJECT_STORES)
@pytest.mark.parametrize("left", [b"", b"{not json", b'{"purpose": "backup"}'])
def test_an_unreadable_lease_object_is_taken_over(
    backend: str, left: bytes, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """An empty object (GCS answers a first-bytes read of it with 416), torn JSON, a holder without its fields: no
    one holds that lease; the next job takes it."""
    state = backend_root(backend, request, tmp_path) / "kbackup~state"
    storage = storage_for(state)
    storage.write_whole(state / LEASE_OBJECT, left)
    assert current_holder(state) is None
    with TargetLease(state, "backup") as lease:
        found = Holder.decode(storage.read_limited(state / LEASE_OBJECT, 4096))
        assert found is not None and found.token == lease.holder.token


@pytest.mark.parametrize("backend", OBJECT_STORES)
def test_a_lease_whose_holder_died_here_is_taken_soon_and_elsewhere_only_once_expired(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job killed with kill -9 leaves its lease object behind, unexpired. The next job in the same machine and pid
    namespace (a service restarted) finds the holder and its parent (spark-submit's JVM) gone and takes the lease
    once the last renewal is TAKEOVER_GRACE_SECONDS old, waiting for that; of two such jobs one wins. A holder from
    another process space, or one whose parent lives, is waited for until it expires."""
    state = backend_root(backend, request, tmp_path) / "kbackup~state"
    storage = storage_for(state)
    ended = [subprocess.Popen(["true"]) for _ in range(2)]
    for process in ended:
        process.wait()
    dead, dead_parent = (process.pid for process in ended)

    def leave(holder: Holder, renewed_ago: float) -> None:
        storage.write_whole(
            state / LEASE_OBJECT, replace(holder, expires=time.time() - renewed_ago + TTL_SECONDS).encode()
        )

    gone_here = Holder("backup", socket.gethostname(), dead, "2026-12-04T00:00:00Z", None, "t1", process_space(),
                       dead_parent)  # fmt: skip
    for alive in (
        replace(gone_here, space="other-boot/pid:[1]", host="other-host"),
        replace(gone_here, parent=os.getpid()),
    ):
        leave(alive, 40)
        with pytest.raises(LeaseHeldError, match=r"backup started 2026-12-04T00:00:00Z on host "):
            TargetLease(state, "backup").acquire()
        assert current_holder(state) is not None
    leave(gone_here, 40)  # renewed 40 s ago: it missed a renewal, so it died at least 25 s ago
    assert current_holder(state) is None  # nobody: the next job takes it at once
    won, refused = race_for_the_lease(state, ("backup", "prune"))
    try:
        assert len(won) == 1 and len(refused) == 1, (won, refused)
        found = Holder.decode(storage.read_limited(state / LEASE_OBJECT, 4096))
        assert found is not None and found.token == won[0].holder.token and found.pid == os.getpid()
    finally:
        for lease in won:
            lease.release()
    # Just died (renewed a moment ago): the taker waits until the grace has passed, then takes it.
    monkeypatch.setattr(lease_module, "TAKEOVER_GRACE_SECONDS", 3.0)
    leave(gone_here, 0)
    assert current_holder(state) is not None
    started = time.monotonic()
    with TargetLease(state, "backup"):
        assert time.monotonic() - started >= 2.0


@pytest.mark.long
@pytest.mark.parametrize("backend", OBJECT_STORES)
def test_a_continuous_backup_killed_three_times_restores_exactly(
    kafka: BrokerUnderTest, target: Target, backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """SIGKILL of the whole job (driver and executors) three times at random moments of its uploads, each time
    started again; a snapshot catches up; the backup holds every record once and a restore gives them back."""
    topic = f"contract-{backend}"
    create_topics(kafka, {topic: 3})
    location = backend_root(backend, request, tmp_path)
    common = [*client_args(kafka, tmp_path), "--target-dir", str(location), "--topics", topic,
              "--max-segment-size", "8192", "--checkpoint-location", str(tmp_path / "spark-state")]  # fmt: skip
    args = [*common, "--trigger-interval", "1", "--offsets-interval", "2", "--max-records-per-trigger", "600"]
    producer = Producer(kafka, topic, 3)
    producer.start()
    rng = random.Random(13)
    log = tmp_path / "backup.log"
    try:
        for _ in range(3):
            process = start_backup(*args, log=log)
            seen = len(batches(log))
            wait_for(more_batches(log, seen), 180, "a micro-batch", job=process, log=log)
            time.sleep(rng.uniform(0.1, 2.0))  # inside a batch's uploads, or between two
            assert process.poll() is None, log.read_text()[-3000:]
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)
    finally:
        producer.stop()
    assert producer.sent > 1000
    done = run_backup(*common, "--snapshot")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    expected = consume_all(kafka, [topic])
    assert len(expected) == producer.sent
    got = backed_up(str(location), [topic])
    assert [(r["partition"], r["offset"]) for r in got] == [(r["partition"], r["offset"]) for r in expected]
    assert got == expected
    maps = ["--topic-map", f"{topic}={target.name(topic)}"] if target.prefix else []
    restored = run_restore(*target.args(tmp_path), "--source-dir", str(location), *maps)
    assert restored.returncode == 0, restored.stdout[-3000:] + restored.stderr[-3000:]
    assert comparable(consume_all(target.broker, [target.name(topic)])) == comparable(expected)
