"""The original kafka-backup's own v1 golden files decode exactly and re-encode byte for byte."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from spark_kafka_backup.format.partition_index import (
    PartitionIndexEntry,
    decode_partition_index,
    encode_partition_index,
)
from spark_kafka_backup.format.record import Record, TimestampType, decode_record, encode_record
from spark_kafka_backup.format.segment_index import SegmentIndexEntry, decode_segment_index, encode_segment_index
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.segment_reader import iter_segment
from tests.conftest import INDEX_VECTORS, SHAPES_TOPIC, UPSTREAM_MISSING, upstream_golden_dir

if upstream_golden_dir() is None:
    pytest.skip(UPSTREAM_MISSING, allow_module_level=True)

NONE = TimestampType.NO_TIMESTAMP
SIMPLE = Record(123, NONE, None, b"test-key", b"test-value", ())
NULL = Record(123, NONE, None, None, None, ())
EMPTY = Record(123, NONE, None, b"", b"", ())
HEADERS = (("", b""), ("null", None), ("value", b"test-value"))
HEADER = Record(123, NONE, None, b"test-key", b"test-value", HEADERS)

SEGMENT_RECORDS = [
    Record(0, NONE, None, b"test-key", b"test-value", ()),
    Record(1, NONE, None, None, None, ()),
    Record(3, NONE, None, b"test-key", b"test-value", HEADERS),
    Record(10, NONE, None, b"test-key", b"test-value", ()),
]
SEGMENT_INDEX = [
    SegmentIndexEntry(0, 1, 42),
    SegmentIndexEntry(1, 43, 24),
    SegmentIndexEntry(3, 67, 85),
    SegmentIndexEntry(10, 152, 42),
]
SEGMENT_PREFIX = "segment_partition_000_from_offset_0000000000"


def test_bare_records_decode_field_by_field(upstream: Path) -> None:
    expected = {
        "simple_record": (SIMPLE, 42),
        "null_record": (NULL, 24),
        "empty_record": (EMPTY, 24),
        "header_record": (HEADER, 85),
    }
    for name, (record, size) in expected.items():
        data = (upstream / "records" / name).read_bytes()
        assert len(data) == size
        decoded, end = decode_record(data, file=name)
        assert end == size
        assert decoded.offset == 123
        assert decoded.timestamp_type == -1
        assert decoded.timestamp is None
        assert decoded.key == record.key
        assert decoded.value == record.value
        assert decoded.headers == record.headers
        assert decoded == record


def test_null_and_empty_are_distinct(upstream: Path) -> None:
    null, _ = decode_record((upstream / "records" / "null_record").read_bytes())
    empty, _ = decode_record((upstream / "records" / "empty_record").read_bytes())
    assert null.key is None and null.value is None
    assert empty.key == b"" and empty.value == b""


def test_header_record_keeps_order_empty_and_null_values(upstream: Path) -> None:
    record, _ = decode_record((upstream / "records" / "header_record").read_bytes())
    assert [key for key, _ in record.headers] == ["", "null", "value"]
    assert record.headers[0][1] == b""
    assert record.headers[1][1] is None
    assert record.headers[2][1] == b"test-value"


def test_bare_records_reencode_byte_identical(upstream: Path) -> None:
    for name, record in (
        ("simple_record", SIMPLE),
        ("null_record", NULL),
        ("empty_record", EMPTY),
        ("header_record", HEADER),
    ):
        assert encode_record(record) == (upstream / "records" / name).read_bytes()


def test_segment_decodes_through_its_index(upstream: Path) -> None:
    segments = upstream / "segments"
    records = list(iter_segment(segments / f"{SEGMENT_PREFIX}_records", segments / f"{SEGMENT_PREFIX}_index"))
    assert records == SEGMENT_RECORDS
    index = decode_segment_index((segments / f"{SEGMENT_PREFIX}_index").read_bytes())
    assert index == SEGMENT_INDEX


def test_segment_reencodes_byte_identical(upstream: Path) -> None:
    segments = upstream / "segments"
    records_bytes = bytearray(b"\x01")
    entries = []
    for record in SEGMENT_RECORDS:
        encoded = encode_record(record)
        entries.append(SegmentIndexEntry(record.offset, len(records_bytes), len(encoded)))
        records_bytes += encoded
    assert bytes(records_bytes) == (segments / f"{SEGMENT_PREFIX}_records").read_bytes()
    assert encode_segment_index(entries) == (segments / f"{SEGMENT_PREFIX}_index").read_bytes()


def test_kbackup_writer_reproduces_the_segment_files(upstream: Path, tmp_path: Path) -> None:
    from spark_kafka_backup.partition.writer import PartitionWriter

    topic_dir = tmp_path / "t"
    with PartitionWriter(topic_dir, "t", 0, fsync=False) as writer:
        for record in SEGMENT_RECORDS:
            writer.append(record)
    for suffix in ("_records", "_index"):
        written = (topic_dir / f"{SEGMENT_PREFIX}{suffix}").read_bytes()
        assert written == (upstream / "segments" / f"{SEGMENT_PREFIX}{suffix}").read_bytes()


def test_standalone_segment_index(upstream: Path) -> None:
    data = (upstream / "segmentindex" / "testIndex").read_bytes()
    entries = decode_segment_index(data, file="testIndex")
    assert entries == [
        SegmentIndexEntry(0, 1, 10),
        SegmentIndexEntry(1, 11, 10),
        SegmentIndexEntry(5, 21, 15),
        SegmentIndexEntry(6, 36, 10),
    ]
    assert encode_segment_index(entries) == data


def test_partition_index(upstream: Path) -> None:
    data = (upstream / "partitionindex" / "testIndex").read_bytes()
    entries, end = decode_partition_index(data, file="testIndex")
    assert end == len(data) == 63
    assert entries == [
        PartitionIndexEntry("s0", 0),
        PartitionIndexEntry("s100", 100),
        PartitionIndexEntry("s200", 200),
        PartitionIndexEntry("s300", 300),
    ]
    assert encode_partition_index(entries) == data


def test_partition_reader_over_upstream_segment(upstream: Path, tmp_path: Path) -> None:
    topic_dir = tmp_path / "topic"
    shutil.copytree(upstream / "segments", topic_dir)
    (topic_dir / "index_partition_000").write_bytes(encode_partition_index([PartitionIndexEntry(SEGMENT_PREFIX, 0)]))
    reader = PartitionReader(topic_dir, 0)
    assert list(reader.records()) == SEGMENT_RECORDS
    assert list(reader.records(from_offset=2)) == SEGMENT_RECORDS[2:]
    assert list(reader.records(from_offset=4, to_offset=10)) == SEGMENT_RECORDS[3:]
    assert list(reader.records(from_offset=11)) == []


def test_the_projects_own_vectors_of_the_same_shapes_are_the_originals_bytes(upstream: Path) -> None:
    """The vectors every other test reads (formats/vectors, written by spark-kafka-backup's encoders) hold byte for byte
    what the original's files hold: the tests that use them test the original's format."""
    for suffix in ("records", "index"):
        name = f"{SEGMENT_PREFIX}_{suffix}"
        assert (SHAPES_TOPIC / name).read_bytes() == (upstream / "segments" / name).read_bytes()
    pairs = {"partition_index_four_segments": "partitionindex", "segment_index_without_records": "segmentindex"}
    for vector, original in pairs.items():
        assert (INDEX_VECTORS / vector).read_bytes() == (upstream / original / "testIndex").read_bytes()
