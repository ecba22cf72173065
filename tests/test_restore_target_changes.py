"""A target changed under a restore, and a restore into its own source: records deleted from the target while a restore
runs, or between a restore and its rerun, fail it naming the partition (never "restored" for records that are not
there, never counted as "already in the target"); a restore into the very topic its backup came from is refused
whatever --allow-non-empty says, and with --allow-restore-into-source leaves the groups where they are."""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.broker import BrokerUnderTest
from tests.kafka_helpers import client_config_file, commit_offsets, consume_all, create_topics, run_backup
from tests.live_load import wait_for
from tests.restore_helpers import (
    Target,
    group_offsets,
    high_watermarks,
    restore_python,
    run_restore,
    start_restore,
    write_backup,
)


def _delete_records(broker: BrokerUnderTest, topic: str, partition: int, before: int) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(broker.client_settings())
    for future in admin.delete_records([TopicPartition(topic, partition, before)]).values():
        future.result(30)


def _error_line(output: str) -> str:
    lines = [line for line in output.splitlines() if "spark-kafka-backup restore: error: " in line]
    assert len(lines) == 1, output[-4000:]
    return lines[0]


def test_records_deleted_after_a_restore_are_never_counted_as_restored_by_its_rerun(
    target: Target, tmp_path: Path
) -> None:
    backup = tmp_path / "backup"
    write_backup(backup, "lost-after", partitions=2, records=300)
    name = target.name("lost-after")
    args: tuple[str | Path, ...] = (*target.args(tmp_path), "--source-dir", backup, "--topic-map", f"lost-after={name}")
    first = run_restore(*args)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    _delete_records(target.broker, name, 1, 100)
    again = run_restore(*args)
    assert again.returncode == 1, again.stdout[-3000:] + again.stderr[-3000:]
    line = _error_line(again.stderr)
    assert f"{name}/1: offsets 0..99 of this restore (100 offsets) are no longer in the target" in line, line
    assert "delete_records" in line and f"{name}/0" not in line
    assert "Traceback" not in again.stderr


def _restore_while(
    target: Target, tmp_path: Path, topic: str, *, after: int, change: Callable[[str], None]
) -> tuple[int, str, dict[str, dict[int, int]]]:
    """A throttled restore of a written backup of ``topic`` (2 partitions, 800 records each) under a new name;
    ``change(name)`` once partition 0 of the target holds more than ``after`` offsets. Its exit code, output, and the
    backup's groups."""
    backup = tmp_path / "backup"
    groups = write_backup(backup, topic, partitions=2, records=800)
    name = target.name(topic)
    log = tmp_path / "restore.log"
    job = start_restore(*target.args(tmp_path), "--source-dir", backup, "--topic-map", f"{topic}={name}",
                        "--max-rate", "150", log=log)  # fmt: skip
    try:
        wait_for(lambda: high_watermarks(target.broker, name).get(0, 0) > after if _exists(target, name) else False,
                 240, f"{after} records restored", job=job, log=log)  # fmt: skip
        change(name)
        code = job.wait(300)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(30)
    return code, log.read_text(), groups


# CI time: in the long tier; the quick tier covers target checks: tests/test_restore_target_limits.py
@pytest.mark.long
def test_records_deleted_while_a_restore_runs_fail_it_naming_the_partition_and_no_group_moves(
    target: Target, tmp_path: Path
) -> None:
    code, output, groups = _restore_while(
        target, tmp_path, "lost-during", after=200, change=lambda name: _delete_records(target.broker, name, 0, 120)
    )
    name = target.name("lost-during")
    assert code == 1, output[-4000:]
    line = _error_line(output)
    assert re.search(rf"{re.escape(name)}/0: offsets 0\.\.119 of this restore \(120 offsets\) are no longer", line)
    assert "no consumer group was moved" in line
    for group in groups:  # (groups of the same names may have offsets on other tests' topics)
        assert not [key for key in group_offsets(target.broker, group) if key[0] == name], group


def _exists(target: Target, name: str) -> bool:
    from confluent_kafka.admin import AdminClient

    return name in AdminClient(target.broker.client_settings()).list_topics(timeout=10).topics


def _own_source(kafka: BrokerUnderTest, tmp_path: Path, topic: str) -> tuple[str | Path, ...]:
    """A snapshot backup of ``topic`` (1000 records, group gold at 500), then 30 more records at the source; the
    restore's arguments back into that very topic."""
    from confluent_kafka import Producer

    create_topics(kafka, {topic: 1})
    producer = Producer(kafka.client_settings())
    for i in range(1000):
        producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=0)
    producer.flush(30)
    commit_offsets(kafka, "gold", {(topic, 0): 500})
    backup = tmp_path / "backup"
    config = client_config_file(tmp_path / "client.properties", kafka.extra_settings)
    done = run_backup("--bootstrap-server", kafka.bootstrap_servers, "--command-config", config, "--target-dir",
                      backup, "--topics", topic, "--snapshot")  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for i in range(30):  # the source went on after the backup
        producer.produce(topic, key=b"later-%d" % i, value=b"v", partition=0)
    producer.flush(30)
    return "--bootstrap-server", kafka.bootstrap_servers, "--command-config", config, "--source-dir", backup


# CI time: in the long tier; the quick tier covers target checks: tests/test_restore_target_limits.py
@pytest.mark.long
def test_a_restore_into_its_own_source_is_refused_even_with_allow_non_empty(
    kafka: BrokerUnderTest, tmp_path: Path
) -> None:
    topic = "own-source"
    args = _own_source(kafka, tmp_path, topic)
    for dry in ((), ("--dry-run",)):  # refused by the plan: a dry run says it too
        refused = restore_python(*args, "--allow-non-empty", *dry)
        assert refused.returncode == 1, refused.stdout[-3000:] + refused.stderr[-3000:]
        line = _error_line(refused.stderr)
        assert "the target is the backup's own source" in line and "--allow-restore-into-source" in line, line
    assert len(consume_all(kafka, [topic])) == 1030 and _gold(kafka, topic) == {(topic, 0): 500}


@pytest.mark.long
def test_a_restore_into_its_own_source_with_the_flag_appends_and_leaves_its_groups(
    kafka: BrokerUnderTest, tmp_path: Path
) -> None:
    topic = "own-source-meant"
    args = _own_source(kafka, tmp_path, topic)
    # Meant: the records appended again, the group left where it was (never moved past the 30 it has not read).
    meant = run_restore(*args, "--allow-non-empty", "--allow-restore-into-source")
    assert meant.returncode == 0, meant.stdout[-3000:] + meant.stderr[-3000:]
    assert len(consume_all(kafka, [topic])) == 2030
    assert _gold(kafka, topic) == {(topic, 0): 500}


def _gold(kafka: BrokerUnderTest, topic: str) -> dict[tuple[str, int], int]:
    """Group gold's committed offsets on ``topic`` (it has offsets on other tests' topics too)."""
    return {key: offset for key, offset in group_offsets(kafka, "gold").items() if key[0] == topic}


@pytest.mark.long
def test_a_target_topic_deleted_under_a_restore_is_named_as_deleted(target: Target, tmp_path: Path) -> None:
    from confluent_kafka.admin import AdminClient

    def delete(name: str) -> None:
        admin = AdminClient(target.broker.client_settings())  # kept until the deletion is answered
        admin.delete_topics([name])[name].result(30)

    code, output, _ = _restore_while(target, tmp_path, "deleted-under", after=100, change=delete)
    assert code == 1, output[-4000:]
    line = _error_line(output)
    assert "deleted" in line and target.name("deleted-under") in line, line
    assert "Traceback" not in output
