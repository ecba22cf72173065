"""Object stores that throttle, drop connections and lose answers (tests/fault_proxy.py between the clients and
moto, fake-gcs-server and Azurite): every operation retries with backoff and ends exact, a lost answer to a
conditional write is recognised as the writer's own, and a backup and a restore through a store failing 5% of
requests end exact.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from spark_kafka_backup.catalog import checkpoints
from spark_kafka_backup.partition.layout import STATE_DIR
from spark_kafka_backup.storage import ObjectPath, storage_for
from spark_kafka_backup.storage.lease import Holder, TargetLease
from tests.azure_server import AzureServer
from tests.broker import BrokerUnderTest
from tests.conftest import environment
from tests.fault_proxy import ANSWER, PRECONDITION_FAILED, FaultProxy, Seen, fault_proxy
from tests.gcs_server import GcsServer
from tests.kafka_helpers import client_config_file, consume_all, create_topics, run_backup, run_kbackup
from tests.restore_helpers import Target, comparable, group_offsets, run_restore
from tests.s3_server import S3Server

STORES = {"s3": "s3", "gs": "gcs", "az": "azure"}


@dataclass
class Faulty:
    """A fresh bucket's root on a store behind the proxy, with the clients' settings pointed at the proxy."""

    root: ObjectPath
    proxy: FaultProxy
    env: dict[str, str]


def origin(url: str) -> str:
    parsed = urllib.parse.urlsplit(url)
    return f"{parsed.scheme}://{parsed.netloc}"


def proxied_env(scheme: str, server: S3Server | GcsServer | AzureServer, proxy: FaultProxy) -> dict[str, str]:
    """The server's client settings, pointed at the proxy."""
    if scheme == "s3":
        return {**server.env, "AWS_ENDPOINT_URL": proxy.endpoint}
    if scheme == "gs":
        return {**server.env, "STORAGE_EMULATOR_HOST": proxy.endpoint}
    connection = server.env["AZURE_STORAGE_CONNECTION_STRING"]
    return {
        **server.env,
        "AZURE_STORAGE_CONNECTION_STRING": connection.replace(origin(server.endpoint), proxy.endpoint),
    }


@pytest.fixture(params=list(STORES))
def faulty(request: pytest.FixtureRequest) -> Iterator[Faulty]:
    scheme = str(request.param)
    server: S3Server | GcsServer | AzureServer = request.getfixturevalue(STORES[scheme])
    bucket = server.new_bucket()  # straight to the server: the proxy is for the code under test
    with fault_proxy(origin(server.endpoint), scheme) as proxy:
        env = proxied_env(scheme, server, proxy)
        with environment(env):
            yield Faulty(ObjectPath(scheme, bucket, "backups/prod"), proxy, env)


def test_every_operation_ends_exact_through_throttling_dropped_connections_and_lost_answers(
    faulty: Faulty, tmp_path: Path
) -> None:
    proxy = faulty.proxy
    proxy.rate = 0.05
    # Each kind at least once where it matters most, beside the random share.
    proxy.once(lambda seen: seen.method in ("PUT", "POST") and seen.names("claims/file-03"), "lose")
    proxy.once(lambda seen: seen.method == "GET" and seen.names("files/file-05"), "drop", times=2)
    proxy.once(lambda seen: seen.names("files/big"), "throttle", times=2)
    root = faulty.root
    storage = storage_for(root)
    written: dict[str, bytes] = {}
    for number in range(12):
        name = f"file-{number:02d}"
        data = os.urandom(100 + number * 700)
        storage.write_whole(root / "files" / name, data)
        written[name] = data
        assert storage.size(root / "files" / name) == len(data)
        handle = storage.open_read(root / "files" / name)
        try:
            assert handle.pread(len(data), 0) == data
        finally:
            handle.close()
        # A conditional create whose answer is lost is still this writer's: the retry meets its own object.
        assert storage.create_exclusive(root / "claims" / name, data) is True
        assert storage.create_exclusive(root / "claims" / name, data + b"another writer") is False
    big = tmp_path / "segment"
    big.write_bytes(os.urandom(3 << 20))
    storage.upload(root / "files" / "big", big)
    assert storage.read_limited(root / "files" / "big", 4 << 20) == big.read_bytes()
    assert sorted(storage.list_files(root / "files") or []) == sorted([*written, "big"])
    assert storage.list_dirs(root) is not None and sorted(storage.list_dirs(root) or []) == ["claims", "files"]
    for name in [*written, "big"]:
        storage.delete(root / "files" / name)
    assert storage.list_files(root / "files") is None
    for _ in range(4):
        with TargetLease(root / STATE_DIR, "backup") as lease:
            lease.check()
        assert not storage.exists(root / STATE_DIR / "lease.json")
    assert proxy.injected["throttle"] >= 2 and proxy.injected["drop"] >= 2 and proxy.injected["lose"], proxy.injected


def test_lost_answers_to_the_lease_and_a_checkpoint_claim_are_recognised_as_the_writers_own(faulty: Faulty) -> None:
    root, proxy = faulty.root, faulty.proxy
    storage = storage_for(root)
    lease_path = root / STATE_DIR / "lease.json"

    def writes_lease(seen: Seen) -> bool:
        return seen.method in ("PUT", "POST") and seen.names("lease.json")

    created = proxy.once(writes_lease, "lose")
    lease = TargetLease(root / STATE_DIR, "backup")
    lease.acquire()  # its create went through, its answer was lost: the lease is its own, not another job's
    try:
        assert created.times == 0
        found = Holder.decode(storage.read_limited(lease_path, 4096))
        assert found is not None and found.token == lease.holder.token
    finally:
        released = proxy.once(lambda seen: seen.method == "DELETE" and seen.names("lease.json"), "lose")
        lease.release()  # the delete went through, its answer was lost: the retry finds it gone
    assert released.times == 0 and not storage.exists(lease_path)

    claimed = proxy.once(lambda seen: seen.method in ("PUT", "POST") and seen.names("checkpoint"), "lose")
    made = checkpoints.request(root)
    assert claimed.times == 0
    assert [c.id for c in checkpoints.list_checkpoints(root)] == [made.id] == [1]  # one request, not two


def test_a_lease_released_after_another_job_took_it_over_is_left_to_that_job(faulty: Faulty) -> None:
    """The release's delete is conditional on the lease's version: a store refusing it (another job wrote the lease
    since; GCS answers 412, injected here where the emulator does not enforce a delete's precondition) leaves the
    lease alone."""
    root, proxy = faulty.root, faulty.proxy
    storage = storage_for(root)
    lease_path = root / STATE_DIR / "lease.json"
    lease = TargetLease(root / STATE_DIR, "backup")
    lease.acquire()
    refused = proxy.once(lambda seen: seen.method == "DELETE" and seen.names("lease.json"), ANSWER,
                         answer=PRECONDITION_FAILED[root.scheme])  # fmt: skip
    lease.release()
    assert refused.times == 0
    assert storage.exists(lease_path)  # the store said the lease is no longer this version: not deleted
    storage.delete(lease_path)


@pytest.mark.parametrize(
    "scheme", ["s3", pytest.param("gs", marks=pytest.mark.long), pytest.param("az", marks=pytest.mark.long)]
)  # CI time: GCS and Azure in the long tier
def test_a_backup_and_a_restore_through_a_store_failing_5_percent_of_requests_end_exact(
    kafka: BrokerUnderTest, target: Target, scheme: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    server: S3Server | GcsServer | AzureServer = request.getfixturevalue(STORES[scheme])
    topic, readers = f"faults-{scheme}", f"faults-{scheme}-readers"
    create_topics(kafka, {topic: 3})
    producer = Producer(kafka.client_settings())
    for i in range(3000):
        producer.produce(topic, key=b"k%d" % (i % 97), value=os.urandom(20 + i % 300), partition=i % 3,
                         headers=[("n", b"%d" % i)] if i % 5 == 0 else None)  # fmt: skip
    producer.flush(30)
    consumer = Consumer(kafka.client_settings(**{"group.id": readers, "enable.auto.commit": "false"}))
    consumer.commit(offsets=[TopicPartition(topic, 0, 500), TopicPartition(topic, 2, 999)], asynchronous=False)
    consumer.close()
    root = f"{scheme}://{server.new_bucket()}/kafka/prod"
    config = tmp_path / "source.properties"
    client_config_file(config, kafka.extra_settings)
    maps = ["--topic-map", f"{topic}={target.name(topic)}"] if target.prefix else []
    with (
        fault_proxy(origin(server.endpoint), scheme, rate=0.05, seed=52) as proxy,
        environment(proxied_env(scheme, server, proxy)),
    ):
        done = run_backup(
            "--bootstrap-server", kafka.bootstrap_servers, "--command-config", config, "--target-dir", root,
            "--topics", topic, "--snapshot", "--max-segment-size", "40000",
            "--checkpoint-location", tmp_path / "spark-state", in_process=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        backup_faults, backup_requests = sum(proxy.injected.values()), sum(proxy.served.values())
        proxy.reset_counts()
        restored = run_restore(*target.args(tmp_path), "--source-dir", root, *maps, in_process=False)
        assert restored.returncode == 0, restored.stdout[-3000:] + restored.stderr[-3000:]
        restore_faults = sum(proxy.injected.values())
    print(f"faults injected: backup {backup_faults} of {backup_requests} requests, restore {restore_faults}")
    assert backup_faults and restore_faults
    verify = run_kbackup("verify", root, "--deep")
    assert verify.returncode == 0 and "note" not in verify.stdout, verify.stdout + verify.stderr
    source = consume_all(kafka, [topic])
    assert len(source) == 3000
    assert comparable(consume_all(target.broker, [target.name(topic)])) == comparable(source)
    assert group_offsets(target.broker, readers) == {(target.name(topic), 0): 500, (target.name(topic), 2): 999}
