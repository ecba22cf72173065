"""Reading partitions (seeks, gaps, the original's naming habit) and rebuilding indexes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from spark_kafka_backup.errors import BackupNotFoundError, FormatError
from spark_kafka_backup.format.record import Record, encode_record
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.rebuild import rebuild_partition_index, rebuild_segment_index
from spark_kafka_backup.partition.writer import PartitionWriter
from tests.backup_builders import write_original_style
from tests.conftest import SHAPES_TOPIC
from tests.recordgen import sample_record
from tests.strategies import record_runs


def test_first_segment_named_zero_holding_offset_1000(tmp_path: Path) -> None:
    first = [sample_record(i)._replace(offset=1000 + i) for i in range(5)]
    second = [sample_record(i)._replace(offset=2000 + i) for i in range(5)]
    write_original_style(tmp_path / "t", 0, [first, second])
    reader = PartitionReader(tmp_path / "t", 0)
    assert [s.start_offset for s in reader.segments] == [0, 2000]
    assert list(reader.records()) == first + second
    assert list(reader.records(from_offset=0)) == first + second
    assert list(reader.records(from_offset=1003)) == first[3:] + second
    assert list(reader.records(from_offset=1500)) == second
    assert list(reader.records(from_offset=2003)) == second[3:]
    assert list(reader.records(to_offset=999)) == []
    assert list(reader.records(from_offset=1002, to_offset=2001)) == first[2:] + second[:2]
    summaries = reader.summaries()
    assert [(s.first_offset, s.last_offset, s.record_count) for s in summaries] == [(1000, 1004, 5), (2000, 2004, 5)]


def test_kbackup_continues_an_original_backup(tmp_path: Path) -> None:
    first = [sample_record(i)._replace(offset=1000 + i) for i in range(5)]
    write_original_style(tmp_path / "t", 0, [first])
    with PartitionWriter(tmp_path / "t", "t", 0, fsync=False) as writer:
        assert writer.last_offset == 1004
        assert not writer.append(first[-1])
        writer.append(sample_record(9)._replace(offset=1010))
    assert [r.offset for r in PartitionReader(tmp_path / "t", 0).records()] == [1000, 1001, 1002, 1003, 1004, 1010]


@given(record_runs())
@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
def test_property_seek_returns_every_record_at_or_after(
    tmp_path_factory: pytest.TempPathFactory, runs: list[Record]
) -> None:
    topic_dir = tmp_path_factory.mktemp("p") / "t"
    with PartitionWriter(topic_dir, "t", 0, max_segment_size=300, fsync=False) as writer:
        for record in runs:
            writer.append(record)
    reader = PartitionReader(topic_dir, 0)
    assert list(reader.records()) == runs
    probes = {runs[0].offset - 1, runs[-1].offset + 1} | {r.offset + d for r in runs[::3] for d in (-1, 0, 1)}
    for probe in sorted(p for p in probes if p >= 0):
        assert list(reader.records(from_offset=probe)) == [r for r in runs if r.offset >= probe]
        assert list(reader.records(to_offset=probe)) == [r for r in runs if r.offset <= probe]


def test_missing_partition_index_says_how_to_rebuild(tmp_path: Path) -> None:
    (tmp_path / "t").mkdir()
    with pytest.raises(BackupNotFoundError, match="spark-kafka-backup index rebuild"):
        PartitionReader(tmp_path / "t", 0)


def test_missing_segment_file_is_named(tmp_path: Path) -> None:
    with PartitionWriter(tmp_path / "t", "t", 0, fsync=False) as writer:
        writer.append(sample_record(0))
    (tmp_path / "t" / "segment_partition_000_from_offset_0000000000_records").unlink()
    with pytest.raises(
        BackupNotFoundError, match=r"segment_partition_000_from_offset_0000000000_records: file does not exist"
    ):
        list(PartitionReader(tmp_path / "t", 0).records())


def test_rebuild_segment_index_reproduces_the_written_index(tmp_path: Path) -> None:
    prefix = "segment_partition_000_from_offset_0000000000"
    shutil.copyfile(SHAPES_TOPIC / f"{prefix}_records", tmp_path / f"{prefix}_records")
    result = rebuild_segment_index(tmp_path / f"{prefix}_records", tmp_path / f"{prefix}_index")
    assert (tmp_path / f"{prefix}_index").read_bytes() == (SHAPES_TOPIC / f"{prefix}_index").read_bytes()
    assert (result.record_count, result.first_offset, result.last_offset, result.bad_tail_position) == (4, 0, 10, None)


def test_rebuild_segment_index_reports_an_undecodable_tail(tmp_path: Path) -> None:
    with PartitionWriter(tmp_path / "t", "t", 0, fsync=False) as writer:
        for i in range(4):
            writer.append(sample_record(i))
    records = tmp_path / "t" / "segment_partition_000_from_offset_0000000000_records"
    index = records.with_name("segment_partition_000_from_offset_0000000000_index")
    good_size = records.stat().st_size
    expected_index = index.read_bytes()
    with open(records, "ab") as handle:
        handle.write(encode_record(sample_record(4))[:-3])
    index.unlink()
    result = rebuild_segment_index(records, index)
    assert result.record_count == 4
    assert result.bad_tail_position == good_size
    assert result.bad_tail_reason is not None and "cut short" in result.bad_tail_reason
    assert index.read_bytes() == expected_index
    assert records.stat().st_size > good_size  # record data is never cut by a rebuild


def test_rebuild_partition_index_from_segment_names(tmp_path: Path) -> None:
    first = [sample_record(i)._replace(offset=1000 + i) for i in range(3)]
    second = [sample_record(i)._replace(offset=5000 + i) for i in range(3)]
    write_original_style(tmp_path / "t", 3, [first, second])
    original = (tmp_path / "t" / "index_partition_003").read_bytes()
    (tmp_path / "t" / "index_partition_003").unlink()
    entries = rebuild_partition_index(tmp_path / "t", 3)
    assert [(e.name, e.start_offset) for e in entries] == [
        ("segment_partition_003_from_offset_0000000000", 0),
        ("segment_partition_003_from_offset_0000005000", 5000),
    ]
    assert (tmp_path / "t" / "index_partition_003").read_bytes() == original
    assert list(PartitionReader(tmp_path / "t", 3).records()) == first + second


def test_rebuild_orders_segments_numerically_not_by_text(tmp_path: Path) -> None:
    # 11-digit offsets sort after 10-digit ones as numbers, not as strings.
    records = [[sample_record(0)._replace(offset=9_999_999_999)], [sample_record(1)._replace(offset=10_000_000_000)]]
    topic_dir = tmp_path / "t"
    with PartitionWriter(topic_dir, "t", 0, max_segment_size=1, fsync=False) as writer:
        for run in records:
            writer.append(run[0])
    (topic_dir / "index_partition_000").unlink()
    entries = rebuild_partition_index(topic_dir, 0)
    assert [e.start_offset for e in entries] == [9_999_999_999, 10_000_000_000]


def test_reader_refuses_offsets_going_back_across_segments(tmp_path: Path) -> None:
    write_original_style(
        tmp_path / "t",
        0,
        [[sample_record(0)._replace(offset=50)], [sample_record(1)._replace(offset=40)]],
    )
    with pytest.raises(FormatError, match=r"start offsets must increase|goes back"):
        list(PartitionReader(tmp_path / "t", 0).records())


def test_reader_leaves_out_entries_being_written(tmp_path: Path) -> None:
    """A live backup: a partial index entry or partition index entry is not yet committed."""
    from spark_kafka_backup.format.segment_index import ENTRY

    with PartitionWriter(tmp_path / "t", "t", 0, fsync=False) as writer:
        for i in range(3):
            writer.append(sample_record(i))
    index = tmp_path / "t" / "segment_partition_000_from_offset_0000000000_index"
    with open(index, "ab") as handle:
        handle.write(ENTRY.pack(9, 999, 50)[:13])
    with open(tmp_path / "t" / "index_partition_000", "ab") as handle:
        handle.write(b"\x00\x00\x00\x2dsegment_partition_0")
    assert list(PartitionReader(tmp_path / "t", 0).records()) == [sample_record(i) for i in range(3)]
