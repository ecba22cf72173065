"""Files the original tool leaves after it crashed and resumed: every record comes back exactly once.

The original opens its records and index files in append mode after a
restart (Java's ``FileOutputStream(file, true)``: a write always lands at the
end of the file, whatever position was set before it). So a crash leaves:

- (a) a partial record between two indexed records (the next record was
  written after it, and indexed where it landed);
- (b) a record written but not indexed, written and indexed again after it;
- (c) a partial index entry followed by whole entries, which sit 1..23 bytes
  off the 24-byte grid from then on.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spark_kafka_backup.cli import record_to_json
from spark_kafka_backup.errors import FormatError
from spark_kafka_backup.format.magic import MAGIC_V1
from spark_kafka_backup.format.partition_index import PartitionIndexEntry, encode_partition_index
from spark_kafka_backup.format.record import Record, encode_record
from spark_kafka_backup.format.segment_index import ENTRY
from spark_kafka_backup.partition.writer import PartitionWriter
from tests.kafka_helpers import run_kbackup

SEGMENT = "segment_partition_{:03d}_from_offset_0000000000"
RECORDS = [
    Record(i, 0, 1_700_000_000_000 + i, b"key-%d" % i, b"value-%d" % i * 4, (("h", b"%d" % i),)) for i in range(8)
]
CRASHED_AT = 4  # the record the original was writing when it crashed


def _write(topic_dir: Path, partition: int, records: bytes, index: bytes) -> None:
    name = SEGMENT.format(partition)
    topic_dir.mkdir(parents=True, exist_ok=True)
    (topic_dir / f"{name}_records").write_bytes(records)
    (topic_dir / f"{name}_index").write_bytes(index)
    (topic_dir / f"index_partition_{partition:03d}").write_bytes(encode_partition_index([PartitionIndexEntry(name, 0)]))


def build_shapes(topic_dir: Path) -> dict[str, tuple[int, int]]:
    """Partition 0: shape (a), 1: shape (b), 2: shape (c). Returns the unindexed byte ranges of (a) and (b)."""
    unindexed: dict[str, tuple[int, int]] = {}
    for partition, shape in enumerate("abc"):
        records = bytearray(MAGIC_V1)
        index = bytearray(MAGIC_V1)
        for record in RECORDS:
            encoded = encode_record(record)
            if record.offset == CRASHED_AT and shape in "ab":
                # (a) the first 11 bytes of the record, (b) all of it: never indexed, then written again.
                left = encoded[:11] if shape == "a" else encoded
                unindexed[shape] = (len(records), len(records) + len(left) - 1)
                records += left
            entry = ENTRY.pack(record.offset, len(records), len(encoded))
            if record.offset == CRASHED_AT and shape == "c":
                index += entry[:10]  # the entry being written when it crashed
            index += entry
            records += encoded
        _write(topic_dir, partition, bytes(records), bytes(index))
    return unindexed


def expected(partition: int) -> list[dict[str, object]]:
    return [record_to_json("old", partition, record) for record in RECORDS]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "backup"
    build_shapes(root / "old")
    return root


def test_cat_follows_the_index_and_names_the_skipped_bytes(root: Path) -> None:
    unindexed = build_shapes(root / "old")
    result = run_kbackup("cat", root, "--topic", "old")
    assert result.returncode == 0, result.stderr
    printed = [json.loads(line) for line in result.stdout.splitlines()]
    assert printed == expected(0) + expected(1) + expected(2)
    for partition, shape in ((0, "a"), (1, "b")):
        first, last = unindexed[shape]
        assert f"{SEGMENT.format(partition)}_records: bytes {first}..{last} are not indexed" in result.stderr
    assert f"{SEGMENT.format(2)}_index: bytes " in result.stderr and "are a partial index entry" in result.stderr


def test_verify_describe_and_the_catalog_see_every_record_once(root: Path) -> None:
    deep = run_kbackup("verify", root, "--deep")
    assert deep.returncode == 0, deep.stdout + deep.stderr
    assert all(f"old/{p}: ok (1 segment, 8 records)" in deep.stdout for p in range(3))
    described = run_kbackup("describe", root, "--json")
    assert described.returncode == 0, described.stderr
    partitions = json.loads(described.stdout)["topics"][0]["partitions"]
    assert [(p["records"], p["firstOffset"], p["lastOffset"]) for p in partitions] == [(8, 0, 7)] * 3
    rebuilt = run_kbackup("catalog", "rebuild", root)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert run_kbackup("verify", root, "--deep").returncode == 0


def test_index_rebuild_writes_the_index_the_records_deserve(root: Path) -> None:
    topic_dir = root / "old"
    with pytest.raises(
        FormatError, match=r"partial entry followed by more entries .* spark-kafka-backup index rebuild"
    ):
        PartitionWriter(topic_dir, "old", 2, fsync=False)
    for partition in range(3):
        result = run_kbackup("index", "rebuild", topic_dir, "--partition", str(partition))
        assert result.returncode == 0, result.stderr
    for partition in range(3):
        index = (topic_dir / f"{SEGMENT.format(partition)}_index").read_bytes()
        assert (len(index) - 1) % 24 == 0
        entries = list(ENTRY.iter_unpack(index[1:]))
        assert [offset for offset, _, _ in entries] == list(range(8))
    result = run_kbackup("cat", root, "--topic", "old")
    assert [json.loads(line) for line in result.stdout.splitlines()] == expected(0) + expected(1) + expected(2)
    assert "not indexed" in result.stderr  # the bytes are still there, still skipped
    assert "partial index entry" not in result.stderr
    # Now spark-kafka-backup's writer continues every partition.
    for partition in range(3):
        with PartitionWriter(topic_dir, "old", partition, fsync=False) as writer:
            assert writer.last_offset == 7
            writer.append(Record(8, 0, 1, b"k", b"new"))
    appended = [json.loads(line) for line in run_kbackup("cat", root, "--topic", "old").stdout.splitlines()]
    assert [r["offset"] for r in appended] == (list(range(9))) * 3


def test_kbackups_writer_keeps_records_after_unindexed_bytes(root: Path) -> None:
    """A writer reopening shape (a) or (b) must not cut the records after the unindexed bytes."""
    topic_dir = root / "old"
    for partition in (0, 1):
        size = (topic_dir / f"{SEGMENT.format(partition)}_records").stat().st_size
        with PartitionWriter(topic_dir, "old", partition, fsync=False) as writer:
            assert writer.last_offset == 7
        assert (topic_dir / f"{SEGMENT.format(partition)}_records").stat().st_size == size
