"""``restore --where PREDICATE`` on a real broker: exactly the matching records, groups remapped as for a time
window, a dry run's count, a kill -9 rerun exact (adding nothing beyond); a predicate Spark cannot use refused in
one line before anything is created."""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from spark_kafka_backup.format.record import Record
from spark_kafka_backup.partition.writer import PartitionWriter
from tests.conftest import REPO
from tests.kafka_helpers import backed_up, consume_all, job_env
from tests.restore_helpers import (
    Target,
    check_groups,
    committed_end,
    comparable,
    restore_command,
    restore_python,
    run_restore,
    write_backup,
)

#: One customer's records, the records carrying header ``p``, and an offset range (write_backup's shapes).
WHERE = "key = CAST('k7' AS BINARY) OR array_contains(headers.key, 'p') OR offset BETWEEN 100 AND 120"


def matching(record: dict[str, Any]) -> bool:
    """``WHERE`` evaluated in Python on ``cat``'s form of a record."""
    return (
        record["key"] == base64.b64encode(b"k7").decode()
        or any(key == "p" for key, _ in record["headers"])
        or 100 <= record["offset"] <= 120
    )


def _topics(target: Target) -> set[str]:
    from confluent_kafka.admin import AdminClient

    return set(AdminClient(target.broker.client_settings()).list_topics(timeout=10).topics)


def test_where_restores_exactly_the_matching_records_and_remaps_the_groups(target: Target, tmp_path: Path) -> None:
    backup = tmp_path / "backup"
    groups = write_backup(backup, "where", partitions=2, records=400)
    source = [r for r in backed_up(backup, ["where"]) if matching(r)]
    assert 0 < len(source) < 200
    name = target.name("where")
    args: list[str | Path] = [
        *target.args(tmp_path),
        "--source-dir",
        backup,
        "--topic-map",
        f"where={name}",
        "--where",
        WHERE,
    ]

    dry = run_restore(*args, "--dry-run")
    assert dry.returncode == 0, dry.stdout[-3000:] + dry.stderr[-3000:]
    assert f"--where {WHERE!r}: {len(source)} records selected" in dry.stdout
    for partition in (0, 1):
        wanted = sum(1 for r in source if r["partition"] == partition)
        assert f"where/{partition} -> {name}/{partition}: {wanted} records" in dry.stdout
    assert name not in _topics(target)  # nothing created

    done = run_restore(*args)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for partition in (0, 1):
        wanted = sum(1 for r in source if r["partition"] == partition)
        assert f"--where: where/{partition}: {wanted} records matched" in done.stdout + done.stderr
    restored = consume_all(target.broker, [name])
    assert comparable(restored) == comparable(source)
    # A group sits where its consumer would be among the restored records: before it, exactly the matching records
    # below its old offset.
    check_groups(target, name, source, restored, groups)
    # A rerun adds nothing: test_a_selective_restore_killed_and_run_again_is_exact (long) reruns after a kill.


@pytest.mark.parametrize(
    ("predicate", "message"),
    [
        ("kee = 'x'", "--where \"kee = 'x'\": "),
        ("offset + 1", "is not a condition: it gives bigint"),
        ("rand() < 0.5", "may hold for other records on another run (Rand)"),
        ("timestamp < current_timestamp()", "may hold for other records on another run (CurrentTimestamp)"),
        ("offset = max(offset) OVER (PARTITION BY key)", "reads other records than the one it is evaluated on"),
        ("key = ", "--where 'key =': "),
    ],
)
def test_a_predicate_spark_cannot_use_is_one_line_before_anything_is_created(
    target: Target, tmp_path: Path, predicate: str, message: str
) -> None:
    backup = tmp_path / "backup"
    write_backup(backup, "where-bad", partitions=1, records=20)
    name = target.name("where-bad")
    result = restore_python(*target.args(tmp_path), "--source-dir", backup, "--topic-map", f"where-bad={name}",
                            "--where", predicate)  # fmt: skip
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    # One line says what is wrong (the JVM's start-up lines come before it when the job runs as a process of its own).
    said = [line for line in result.stderr.splitlines() if line.startswith("spark-kafka-backup restore: error: ")]
    assert len(said) == 1 and message in said[0], result.stderr
    assert "Traceback" not in result.stderr and result.stderr.strip().splitlines()[-1] == said[0]
    assert name not in _topics(target)


@pytest.mark.long
def test_a_selective_restore_killed_and_run_again_is_exact(target: Target, tmp_path: Path) -> None:
    """Killed with SIGKILL after its first committed transaction; the rerun produces the rest, once."""
    backup = tmp_path / "backup"
    base = (int(time.time()) // 60 - 60) * 60_000
    for partition in range(2):
        with PartitionWriter(backup / "where-kill", "where-kill", partition, fsync=False) as writer:
            for i in range(45_000):  # 20,000 selected: at 2,000 a second, a first transaction ends after 5 s
                # Times out of order: the time window below leaves out records among those it keeps.
                writer.append(Record(i, 0, base + (i * 7919) % 30_000, b"key-%d" % (i % 3), b"value-%d" % i, ()))
    # Within a time window too: the matching reads only its records, so runs bridge the records outside it.
    since = base + 10_000
    source = [
        r for r in backed_up(backup, ["where-kill"])
        if r["key"] != base64.b64encode(b"key-1").decode() and r["timestamp"] >= since
    ]  # fmt: skip
    name = target.name("where-kill")
    args = [*target.args(tmp_path), "--source-dir", str(backup), "--topic-map", f"where-kill={name}",
            "--where", "key <> CAST('key-1' AS BINARY)", "--from-time", str(since), "--max-rate", "2000",
            "--batch-size", "512"]  # fmt: skip
    log = tmp_path / "killed.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(restore_command(*args), stdout=out, stderr=subprocess.STDOUT, env=job_env(),
                                   cwd=REPO, start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and process.poll() is None and committed_end(target.broker, name) == 0:
        time.sleep(0.1)
    assert process.poll() is None, log.read_text()[-3000:]
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(60)
    assert 0 < committed_end(target.broker, name) < len(source)
    final = run_restore(*args)
    assert final.returncode == 0, final.stdout[-3000:]
    assert comparable(consume_all(target.broker, [name])) == comparable(source)


@pytest.mark.long  # a second variant of the main test (CI runs it and the repartition tests once each)
def test_where_into_another_partition_count_spreads_exactly_the_matching_records(
    target: Target, tmp_path: Path
) -> None:
    """Every target task of a repartitioned topic reads every source partition: the runs reach them once each (a
    broadcast), and the matching records, and only they, are spread by key."""
    backup = tmp_path / "backup"
    write_backup(backup, "where-spread", partitions=2, records=300)
    source = [r for r in backed_up(backup, ["where-spread"]) if matching(r)]
    name = target.name("where-spread")
    done = run_restore(*target.args(tmp_path), "--source-dir", backup, "--topic-map", f"where-spread={name}",
                       "--where", WHERE, "--repartition", "murmur2", "--partitions", f"{name}=3")  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    restored = consume_all(target.broker, [name])

    def unplaced(records: list[dict[str, Any]]) -> list[tuple[str, ...]]:
        return sorted(tuple(str(r[field]) for field in ("key", "value", "headers", "timestamp")) for r in records)

    assert unplaced(restored) == unplaced(source)
    by_key: dict[str, set[int]] = {}
    for r in restored:
        if r["key"] is not None:
            by_key.setdefault(r["key"], set()).add(r["partition"])
    assert all(len(partitions) == 1 for partitions in by_key.values())
