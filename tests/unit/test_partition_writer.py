"""The partition writer: placement by offset, segment rolls, naming, locking, reopening."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_kafka_backup.errors import OffsetConflictError, PlacementError
from spark_kafka_backup.format.partition_index import decode_partition_index
from spark_kafka_backup.format.record import Record, encode_record
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.writer import PartitionWriter
from tests.recordgen import sample_record

SIMPLE = Record(0, -1, None, b"test-key", b"test-value")  # 42 bytes, like the original's golden record


def _files(topic_dir: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(topic_dir.iterdir())}


def test_identical_replay_is_a_no_op(tmp_path: Path) -> None:
    records = [sample_record(i) for i in range(50)]
    with PartitionWriter(tmp_path / "t", "t", 0, max_segment_size=2000, fsync=False) as writer:
        assert all(writer.append(record) for record in records)
    before = _files(tmp_path / "t")
    with PartitionWriter(tmp_path / "t", "t", 0, max_segment_size=2000, fsync=False) as writer:
        assert not any(writer.append(record) for record in records)
        assert writer.last_offset == records[-1].offset
    assert _files(tmp_path / "t") == before
    assert list(PartitionReader(tmp_path / "t", 0).records()) == records


def test_replay_within_the_open_writer(tmp_path: Path) -> None:
    records = [sample_record(i) for i in range(10)]
    with PartitionWriter(tmp_path / "t", "t", 0, fsync=False) as writer:
        for record in records[:6]:
            writer.append(record)
        assert [writer.append(record) for record in records[3:]] == [False] * 3 + [True] * 4
    assert list(PartitionReader(tmp_path / "t", 0).records()) == records


def test_a_replay_in_a_segment_that_grew_and_rolled_since_it_was_last_replayed(tmp_path: Path) -> None:
    """A replay read the newest segment while it held one record; it then took two more and rolled. A later replay
    of its last record finds it there (hypothesis found the stale entry count: 'not in the backup')."""
    records = [Record(offset, -2, None, None, None, ()) for offset in range(14)]
    with PartitionWriter(tmp_path / "t", "t", 3, max_segment_size=60, fsync=False) as writer:  # 2-3 per segment
        for batch in (records[0:10], records[8:13], records[11:14]):
            for record in batch:
                writer.append(record)
    assert list(PartitionReader(tmp_path / "t", 3).records()) == records


def test_conflicting_bytes_name_topic_partition_offset(tmp_path: Path) -> None:
    with PartitionWriter(tmp_path / "orders", "orders", 7, fsync=False) as writer:
        writer.append(sample_record(0))
        writer.append(sample_record(1))
        changed = sample_record(0)._replace(value=b"other")
        with pytest.raises(OffsetConflictError) as info:
            writer.append(changed)
    assert (info.value.topic, info.value.partition, info.value.offset) == ("orders", 7, 0)
    assert "topic 'orders' partition 7 offset 0" in str(info.value)


def test_offset_in_a_gap_below_the_last_is_refused(tmp_path: Path) -> None:
    with PartitionWriter(tmp_path / "t", "t", 0, fsync=False) as writer:
        writer.append(sample_record(0))  # offset 0
        writer.append(sample_record(1))  # offset 3
        with pytest.raises(PlacementError, match="offset 1: offset is below the last stored offset 3"):
            writer.append(sample_record(0)._replace(offset=1))


def test_segments_roll_like_the_original(tmp_path: Path) -> None:
    # Original rule: before appending, roll when the records file (magic byte
    # included) is larger than the limit. With 42-byte records and limit 100:
    # sizes 1 -> 43 -> 85 -> 127, and the 4th record opens a new segment.
    with PartitionWriter(tmp_path / "t", "t", 0, max_segment_size=100, fsync=False) as writer:
        for offset in range(10):
            writer.append(SIMPLE._replace(offset=offset))
    summaries = PartitionReader(tmp_path / "t", 0).summaries()
    assert [(s.start_offset, s.record_count, s.records_bytes) for s in summaries] == [
        (0, 3, 127),
        (3, 3, 127),
        (6, 3, 127),
        (9, 1, 43),
    ]


def test_segment_exactly_at_limit_does_not_roll(tmp_path: Path) -> None:
    with PartitionWriter(tmp_path / "t", "t", 0, max_segment_size=85, fsync=False) as writer:
        for offset in range(4):
            writer.append(SIMPLE._replace(offset=offset))
    assert [s.record_count for s in PartitionReader(tmp_path / "t", 0).summaries()] == [3, 1]


def test_names_for_large_partitions_and_offsets(tmp_path: Path) -> None:
    with PartitionWriter(tmp_path / "t", "t", 1234, fsync=False) as writer:
        writer.append(SIMPLE._replace(offset=12_345_678_901))
    names = sorted(path.name for path in (tmp_path / "t").iterdir())
    assert names == [
        "index_partition_1234",
        "segment_partition_1234_from_offset_12345678901_index",
        "segment_partition_1234_from_offset_12345678901_records",
    ]
    entries, _ = decode_partition_index((tmp_path / "t" / "index_partition_1234").read_bytes())
    assert entries[0].name == "segment_partition_1234_from_offset_12345678901"
    assert [r.offset for r in PartitionReader(tmp_path / "t", 1234).records()] == [12_345_678_901]


def test_first_segment_is_named_after_its_first_record(tmp_path: Path) -> None:
    with PartitionWriter(tmp_path / "t", "t", 0, fsync=False) as writer:
        writer.append(SIMPLE._replace(offset=1000))
    assert (tmp_path / "t" / "segment_partition_000_from_offset_0000001000_records").exists()


def test_empty_partition_gets_an_empty_segment(tmp_path: Path) -> None:
    with PartitionWriter(tmp_path / "t", "t", 2, fsync=False) as writer:
        writer.ensure_segment(500)
        writer.ensure_segment(900)  # no-op: a segment exists
    reader = PartitionReader(tmp_path / "t", 2)
    assert [(s.name, s.record_count) for s in reader.summaries()] == [
        ("segment_partition_002_from_offset_0000000500", 0)
    ]
    assert list(reader.records()) == []
    with PartitionWriter(tmp_path / "t", "t", 2, fsync=False) as writer:
        assert writer.last_offset is None
        with pytest.raises(PlacementError, match="below the start offset 500"):
            writer.append(SIMPLE._replace(offset=499))
        writer.append(SIMPLE._replace(offset=501))
    assert [r.offset for r in PartitionReader(tmp_path / "t", 2).records()] == [501]


def test_partition_without_records_has_only_its_index(tmp_path: Path) -> None:
    PartitionWriter(tmp_path / "t", "t", 0, fsync=False).close()
    assert [p.name for p in (tmp_path / "t").iterdir()] == ["index_partition_000"]
    assert list(PartitionReader(tmp_path / "t", 0).records()) == []


def test_second_writer_on_a_partition_is_refused(tmp_path: Path) -> None:
    first = PartitionWriter(tmp_path / "t", "t", 0, fsync=False)
    with pytest.raises(PlacementError, match="already open for writing"):
        PartitionWriter(tmp_path / "t", "t", 0, fsync=False)
    first.close()
    PartitionWriter(tmp_path / "t", "t", 0, fsync=False).close()


def test_reopen_continues_after_the_last_offset(tmp_path: Path) -> None:
    records = [sample_record(i) for i in range(30)]
    for chunk in (records[:10], records[10:25], records[25:]):
        with PartitionWriter(tmp_path / "t", "t", 0, max_segment_size=700, fsync=False) as writer:
            for record in chunk:
                assert writer.append(record)
    assert list(PartitionReader(tmp_path / "t", 0).records()) == records


def test_abandon_drops_unflushed_records(tmp_path: Path) -> None:
    writer = PartitionWriter(tmp_path / "t", "t", 0, fsync=False)
    writer.append(sample_record(0))
    writer.sync()
    writer.append(sample_record(1))
    writer.abandon()
    assert [r.offset for r in PartitionReader(tmp_path / "t", 0).records()] == [0]


def test_encoded_bytes_on_disk_are_the_codec_bytes(tmp_path: Path) -> None:
    records = [sample_record(i) for i in range(5)]
    with PartitionWriter(tmp_path / "t", "t", 0, fsync=False) as writer:
        for record in records:
            writer.append(record)
    data = (tmp_path / "t" / "segment_partition_000_from_offset_0000000000_records").read_bytes()
    assert data == b"\x01" + b"".join(encode_record(r) for r in records)


def test_a_retried_attempt_waits_for_the_earlier_one_then_replays_harmlessly(tmp_path: Path) -> None:
    import threading
    import time

    records = [sample_record(i) for i in range(20)]
    first = PartitionWriter(tmp_path / "t", "t", 0, fsync=False)
    for record in records[:15]:
        first.append(record)

    def finish_later() -> None:
        time.sleep(0.5)
        first.close()

    threading.Thread(target=finish_later).start()
    started = time.monotonic()
    with PartitionWriter(tmp_path / "t", "t", 0, fsync=False, lock_timeout=10) as second:
        assert time.monotonic() - started >= 0.4
        assert [second.append(record) for record in records] == [False] * 15 + [True] * 5
    assert list(PartitionReader(tmp_path / "t", 0).records()) == records
