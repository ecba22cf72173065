"""Two things at once on one backup target: a second backup, a prune beside a running backup, a killed prune.

(Two restores of one target are in ``test_restore.py``.)
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spark_kafka_backup.catalog.prune import intent_path
from spark_kafka_backup.storage import as_local
from tests.broker import BrokerUnderTest
from tests.conftest import REPO
from tests.kafka_helpers import (
    backed_up,
    client_config_file,
    consume_all,
    create_topics,
    kbackup_in_process,
    run_backup,
    run_kbackup,
    start_backup,
)
from tests.live_load import Producer, batches, wait_for

DRIVER_PID = re.compile(r"stop with SIGTERM to the driver process (\d+)")


def test_the_target_lease_on_a_file_system_is_exclusive_and_dies_with_its_holder(tmp_path: Path) -> None:
    from spark_kafka_backup.errors import LeaseHeldError
    from spark_kafka_backup.storage.lease import TargetLease

    state = tmp_path / "backup" / "kbackup~state"
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from pathlib import Path; from spark_kafka_backup.storage.lease import TargetLease\n"
         f"lease = TargetLease(Path({str(state)!r}), 'backup'); lease.acquire(); print('held', flush=True); "
         "time.sleep(600)"],
        stdout=subprocess.PIPE, text=True, cwd=REPO,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(LeaseHeldError, match=rf"is in use: backup started .* \(pid {holder.pid}\) holds its lease"):
            TargetLease(state, "prune").acquire()
    finally:
        holder.kill()  # kill -9: no release, no cleanup
        holder.wait(30)
    with TargetLease(state, "backup") as lease:  # the kernel released the dead holder's lock
        assert lease.holder.pid == os.getpid()


def _client_args(kafka: BrokerUnderTest, tmp_path: Path) -> list[str]:
    config = tmp_path / "client.properties"
    client_config_file(config, kafka.extra_settings)
    return ["--bootstrap-server", kafka.bootstrap_servers, "--command-config", str(config)]


def _same_records(backup: list[dict[str, object]], topic: list[dict[str, object]]) -> list[tuple[object, ...]]:
    fields = ("partition", "offset", "key", "value", "headers", "timestamp")
    assert [tuple(r[f] for f in fields) for r in backup] == [tuple(r[f] for f in fields) for r in topic]
    return [tuple(r[f] for f in fields) for r in backup]


def _stop(process: subprocess.Popen[bytes], log: Path) -> None:
    pid = int(DRIVER_PID.findall(log.read_text())[-1])
    os.kill(pid, signal.SIGTERM)
    assert process.wait(120) == 0, log.read_text()[-3000:]


@pytest.mark.long
def test_a_second_backup_of_a_target_is_refused_and_the_running_one_goes_on(
    kafka: BrokerUnderTest, tmp_path: Path
) -> None:
    topic = "lease-orders"
    create_topics(kafka, {topic: 2})
    client = _client_args(kafka, tmp_path)
    target = tmp_path / "backup"
    producer = Producer(kafka, topic, 2)
    producer.start()
    log = tmp_path / "continuous.log"
    continuous = start_backup(*client, "--topics", topic, "--target-dir", target, "--trigger-interval", "1", log=log)
    try:
        wait_for(lambda: any(rows for _, rows in batches(log)), 240, "the continuous backup's first records")
        holder = int(DRIVER_PID.findall(log.read_text())[-1])
        # A snapshot beside the continuous backup (before, it killed the continuous one).
        second = run_backup(*client, "--topics", topic, "--target-dir", target, "--snapshot", timeout=300)
        assert second.returncode == 1, second.stdout[-2000:] + second.stderr[-2000:]
        errors = [line for line in second.stderr.splitlines() if line.startswith("spark-kafka-backup backup: error:")]
        assert len(errors) == 1, second.stderr[-3000:]
        assert f"the backup target {target} is in use: continuous backup started" in errors[0]
        assert f"(pid {holder}) holds its lease" in errors[0]
        assert "Traceback" not in second.stdout + second.stderr
        assert continuous.poll() is None, log.read_text()[-3000:]
        # Another target, but the running backup's Spark checkpoint: refused too.
        checkpoint = target / "kbackup~state" / "spark-checkpoint"
        shared = run_backup(*client, "--topics", topic, "--target-dir", tmp_path / "other", "--snapshot",
                            "--checkpoint-location", checkpoint, timeout=300)  # fmt: skip
        assert shared.returncode == 1, shared.stdout[-2000:] + shared.stderr[-2000:]
        errors = [line for line in shared.stderr.splitlines() if line.startswith("spark-kafka-backup backup: error:")]
        assert (
            len(errors) == 1 and f"the Spark checkpoint {checkpoint} is in use: continuous backup started" in errors[0]
        )
        assert not (tmp_path / "other").exists()
        assert continuous.poll() is None, log.read_text()[-3000:]
        producer.stop()
        # The running backup was not disturbed: it backs up everything produced, before and after.
        wait_for(lambda: len(backed_up(target, [topic])) == producer.sent, 240, "the backup to catch up")
        _stop(continuous, log)
    finally:
        producer.stop()
        if continuous.poll() is None:
            os.killpg(continuous.pid, signal.SIGKILL)
    _same_records(backed_up(target, [topic]), consume_all(kafka, [topic]))


@pytest.mark.long
def test_prune_beside_a_running_backup_deletes_only_old_segments(kafka: BrokerUnderTest, tmp_path: Path) -> None:
    topic = "prune-live"
    create_topics(kafka, {topic: 2})
    client = _client_args(kafka, tmp_path)
    target = tmp_path / "backup"
    producer = Producer(kafka, topic, 2, rate=2000)
    producer.start()
    log = tmp_path / "continuous.log"
    # Small segments: the writer rolls one every few batches while prune rewrites the partition index.
    continuous = start_backup(*client, "--topics", topic, "--target-dir", target, "--trigger-interval", "2",
                              "--max-segment-size", "20000", log=log)  # fmt: skip
    pruned = 0
    try:
        wait_for(lambda: sum(rows for _, rows in batches(log)) > 2000, 240, "the backup's first segments")
        deadline = time.monotonic() + 25
        while time.monotonic() < deadline:
            result = run_kbackup("prune", target, "--older-than", "1ms")
            assert result.returncode == 0, result.stdout + result.stderr
            assert "Traceback" not in result.stderr
            pruned += len(re.findall(r"^deleting prune-live/", result.stdout, re.M))
            assert result.stdout.splitlines()[-1].startswith("deleted ")
            assert continuous.poll() is None, log.read_text()[-3000:]
            time.sleep(0.5)  # a prune about every trigger, not a core spent on pruning
        producer.stop()
        sent = producer.sent

        def caught_up() -> bool:
            records = backed_up(target, [topic])
            ends: dict[object, int] = {}
            for record in records:
                ends[record["partition"]] = int(str(record["offset"])) + 1
            return sum(ends.values()) == sent

        wait_for(caught_up, 240, "the backup to catch up")
        _stop(continuous, log)
    finally:
        producer.stop()
        if continuous.poll() is None:
            os.killpg(continuous.pid, signal.SIGKILL)
    assert pruned > 0
    verified = run_kbackup("verify", target)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    # Each partition holds exactly the topic's records from its first retained offset on: prune took only a prefix.
    kept = backed_up(target, [topic])
    source = consume_all(kafka, [topic])
    first: dict[object, object] = {}
    for record in kept:
        first.setdefault(record["partition"], record["offset"])
    assert set(first) == {0, 1}
    suffix = [r for r in source if r["offset"] >= first[r["partition"]]]
    _same_records(kept, suffix)
    assert len(kept) < len(source)


@pytest.mark.long
def test_a_prune_killed_at_any_step_leaves_a_backup_that_verifies(tmp_path: Path) -> None:
    from tests.test_prune import write_old_backup

    for kill_at in range(1, 60):
        root = tmp_path / f"backup-{kill_at}"
        write_old_backup(root)
        before = backed_up(root, ["t"])
        killed = subprocess.run(
            [sys.executable, "-m", "tests.crash_prune", str(root), str(kill_at)],
            capture_output=True, text=True, cwd=REPO, timeout=300,
        )  # fmt: skip
        verified = kbackup_in_process("verify", root)
        assert verified.returncode == 0, f"kill at {kill_at}: {verified.stdout}{verified.stderr}"
        if killed.returncode == 0:
            break  # the prune finished before the kill point: every step was tried
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        assert not re.search(r"^deleted ", killed.stdout, re.M)  # "deleted" only once it is true
        # What is still listed is still readable, and a prune run again finishes the job.
        again = kbackup_in_process("prune", root, "--older-than", "7d")
        assert again.returncode == 0, again.stdout + again.stderr
        assert not as_local(intent_path(root)).exists()
        after = backed_up(root, ["t"])
        assert after == before[len(before) - len(after) :]  # a suffix: the oldest records went, nothing else
        assert kbackup_in_process("verify", root).returncode == 0
    else:
        raise AssertionError("the prune never finished: raise the kill range")
    assert kill_at > 5
