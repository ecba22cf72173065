"""Restoring into another partition count (``--repartition``) on a real broker and real Spark.

Every backed-up record's value names where it came from (``p<partition>o<offset>``), so the tests can check the
placement rules of :mod:`spark_kafka_backup.restore.repartition` record by record.
"""

from __future__ import annotations

import base64
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from spark_kafka_backup.format.record import Record
from spark_kafka_backup.partition.offsets_file import write_consumer_offsets
from spark_kafka_backup.partition.writer import PartitionWriter
from spark_kafka_backup.restore.repartition import key_partition, murmur2
from tests.kafka_helpers import consume_all, create_topics
from tests.restore_helpers import (
    Target,
    committed_end,
    group_offsets,
    killed_after_first_commit,
    restore_python,
    run_restore,
)

BASE = (int(time.time()) // 60 - 60) * 60_000
SOURCE_PARTITIONS = 3
#: The group's committed offsets on the backed-up partitions (partition 2: none stored).
COMMITTED = {0: 40, 1: 700}


def _backup(root: Path, topic: str, per_partition: int) -> dict[bytes, tuple[int, int]]:
    """Keyed records (keys repeat, so each key has several records in order) and every 7th without a key; the
    timestamps of the partitions interleave. Returns value -> (partition, offset)."""
    where = {}
    for partition in range(SOURCE_PARTITIONS):
        with PartitionWriter(root / topic, topic, partition, fsync=False) as writer:
            for offset in range(per_partition):
                key = None if offset % 7 == 3 else b"user-%d-%d" % (partition, offset % 37)
                value = b"p%do%d" % (partition, offset)
                headers = (("n", str(offset).encode()),) if offset % 5 == 0 else ()
                writer.append(Record(offset, 0, BASE + offset * 10 + partition, key, value, headers))
                where[value] = (partition, offset)
        offsets = {"spread-readers": COMMITTED[partition]} if partition in COMMITTED else {}
        write_consumer_offsets(root / topic, partition, offsets)
    return where


def _decoded(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for record in records:
        for field in ("key", "value"):
            record[field] = None if record[field] is None else base64.b64decode(record[field])
    return records


def _where_kafka_puts(target: Target, keys: set[bytes], partitions: int) -> dict[bytes, int]:
    """The partition librdkafka's Java-compatible partitioner (murmur2_random) picks for each key."""
    from confluent_kafka import Producer

    probe = target.name("partitioner-probe")
    create_topics(target.broker, {probe: partitions})
    producer = Producer(target.broker.client_settings(partitioner="murmur2_random"))
    for key in sorted(keys):
        producer.produce(probe, b"", key)
    assert producer.flush(30) == 0
    return {r["key"]: r["partition"] for r in _decoded(consume_all(target.broker, [probe]))}


def _check_placement(
    restored: list[dict[str, Any]], where: dict[bytes, tuple[int, int]], partitions: int
) -> dict[int, list[tuple[int, int]]]:
    """Every record once; keyed ones by murmur2, in their backed-up order per key; keyless ones spread evenly."""
    assert sorted(r["value"] for r in restored) == sorted(where)
    by_partition: dict[int, list[tuple[int, int]]] = {}
    per_key: dict[bytes, list[int]] = {}
    keyless: Counter[int] = Counter()
    for record in restored:  # sorted by partition and offset
        source = where[record["value"]]
        by_partition.setdefault(record["partition"], []).append(source)
        assert record["timestamp"] == BASE + source[1] * 10 + source[0]
        assert record["headers"] == ([["n", base64.b64encode(str(source[1]).encode()).decode()]]
                                     if source[1] % 5 == 0 else [])  # fmt: skip
        if record["key"] is None:
            keyless[record["partition"]] += 1
        else:
            assert record["partition"] == key_partition(record["key"], partitions)
            per_key.setdefault(record["key"], []).append(source[1])
    assert all(offsets == sorted(offsets) for offsets in per_key.values())
    assert max(keyless.values()) - min(keyless.values()) <= 1 and len(keyless) == partitions
    return by_partition


def _check_group(
    by_partition: dict[int, list[tuple[int, int]]], committed: dict[tuple[str, int], int], name: str, log: str
) -> None:
    """Each target partition's offset is its first record the group had not read; the log counts the rest."""

    def read(source: tuple[int, int]) -> bool:
        return source[1] < COMMITTED.get(source[0], 0)

    again = 0
    for partition, sources in by_partition.items():
        # Offsets are dense here: one transaction (one commit marker at its end) per partition.
        first_unread = next((i for i, source in enumerate(sources) if not read(source)), len(sources))
        position = committed[(name, partition)]
        assert position == first_unread if first_unread < len(sources) else position >= len(sources)
        after = sum(1 for source in sources[first_unread:] if read(source))
        again += after
        if after:
            assert (f"group spread-readers: {name}/{partition} was repartitioned: the group resumes at the first "
                    f"record it had not read, and reads {after} records it had read before again") in log  # fmt: skip
    assert again > 0  # the interleaving makes the placement approximate here


@pytest.mark.long  # CI time (35 s): murmur2 itself stays in CI (tests/unit/test_stream_columns.py, Kafka's hashes)
def test_murmur2_puts_keys_where_kafka_would_and_groups_at_their_first_unread_record(
    target: Target, tmp_path: Path
) -> None:
    assert [murmur2(k) for k in (b"21", b"foobar", b"abc")] == [-973932308, -790332482, 479470107]  # Kafka's own
    backup = tmp_path / "backup"
    where = _backup(backup, "spread-orders", 1000)
    name = target.name("spread-orders")
    maps = ["--topic-map", f"spread-orders={name}"] if target.prefix else []
    dry = restore_python(*target.args(tmp_path), "--source-dir", backup, *maps, "--repartition", "murmur2",
                         "--partitions", f"{name}=5", "--dry-run")  # fmt: skip
    assert dry.returncode == 0, dry.stdout[-3000:]
    assert f"spread-orders/* -> {name}/4 (repartitioned, murmur2 over 5 partitions): " in dry.stdout
    # Killed once after its first commit (a transaction is cut by time at 5 s: 100 records/s per partition).
    args: list[str | Path] = [*target.args(tmp_path), "--source-dir", backup, *maps, "--repartition", "murmur2",
            "--partitions", f"{name}=5", "--max-rate", "100"]  # fmt: skip
    log_path = tmp_path / "killed.log"
    killed_after_first_commit(target.broker, name, 5, *args, log=log_path)
    assert "throttled to 100 records/s in each partition (--max-rate)" in log_path.read_text()
    assert 0 < committed_end(target.broker, name, 5) < 3000
    result = run_restore(*args[:-2])
    assert result.returncode == 0, result.stdout[-3000:]
    assert "were already in the target (from an earlier run" in result.stdout
    assert "produced through the native Kafka edge)" in result.stdout  # the columnar merged stream, not the reference
    restored = _decoded(consume_all(target.broker, [name]))
    keys = {r["key"] for r in restored if r["key"] is not None}
    assert _where_kafka_puts(target, keys, 5) == {key: key_partition(key, 5) for key in keys}
    # Offsets are not dense after two runs: compare positions among the partition's records.
    positions: dict[int, dict[int, int]] = {r["partition"]: {} for r in restored}
    for record in restored:
        positions[record["partition"]][record["offset"]] = len(positions[record["partition"]])
    committed = group_offsets(target.broker, "spread-readers")
    placed: dict[tuple[str, int], int] = {}
    for (topic, partition), offset in committed.items():
        by_offset = positions[partition]
        placed[(topic, partition)] = by_offset.get(offset, len(by_offset))
    _check_group(_check_placement(restored, where, 5), placed, name, result.stdout)
    again = run_restore(*args[:-2])
    assert again.returncode == 0 and "3000 records were already in the target" in again.stdout
    assert len(consume_all(target.broker, [name])) == 3000


def test_round_robin_into_fewer_existing_partitions(target: Target, tmp_path: Path) -> None:
    backup = tmp_path / "backup"
    where = _backup(backup, "spread-events", 300)
    name = target.name("spread-events")
    create_topics(target.broker, {name: 2})
    maps = ["--topic-map", f"spread-events={name}"] if target.prefix else []
    refused = run_restore(*target.args(tmp_path), "--source-dir", backup, *maps)
    assert refused.returncode != 0
    assert "(--repartition murmur2 or round-robin spreads them)" in refused.stdout + refused.stderr
    typo = restore_python(*target.args(tmp_path), "--source-dir", backup, *maps, "--repartition", "spread=round-robin")
    said = typo.stdout + typo.stderr
    assert typo.returncode == 1 and f"it writes into '{name}'" in said and "Traceback" not in said, said
    assert "--repartition spread=...: 'spread' is not a topic this restore writes into" in said
    # Per target topic (the only one here).
    result = run_restore(*target.args(tmp_path), "--source-dir", backup, *maps, "--repartition", f"{name}=round-robin")
    assert result.returncode == 0, result.stdout[-3000:]
    restored = _decoded(consume_all(target.broker, [name]))
    assert sorted(r["value"] for r in restored) == sorted(where)
    counts = Counter(r["partition"] for r in restored)
    assert sorted(counts.values()) == [450, 450]
    # The merged stream interleaves by timestamp: each target partition's records keep their timestamp order.
    for partition in (0, 1):
        stamps = [r["timestamp"] for r in restored if r["partition"] == partition]
        assert stamps == sorted(stamps)
    by_partition: dict[int, list[tuple[int, int]]] = {}
    for record in restored:
        by_partition.setdefault(record["partition"], []).append(where[record["value"]])
    _check_group(by_partition, group_offsets(target.broker, "spread-readers"), name, result.stdout)
