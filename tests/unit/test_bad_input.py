"""Damaged input raises one documented error naming file, position and expectation."""

from __future__ import annotations

import contextlib
import shutil
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_kafka_backup.errors import FormatError, MagicByteError, SparkKafkaBackupError, TruncatedError
from spark_kafka_backup.format.consumer_offsets import decode_consumer_offsets
from spark_kafka_backup.format.partition_index import decode_partition_index
from spark_kafka_backup.format.record import decode_record, decode_records, encode_record
from spark_kafka_backup.format.segment_index import ENTRY, decode_segment_index
from spark_kafka_backup.partition.segment_reader import iter_segment
from tests.conftest import INDEX_VECTORS, SHAPES_TOPIC

PREFIX = "segment_partition_000_from_offset_0000000000"


def _segment(tmp_path: Path) -> tuple[Path, Path]:
    records = tmp_path / f"{PREFIX}_records"
    index = tmp_path / f"{PREFIX}_index"
    shutil.copyfile(SHAPES_TOPIC / records.name, records)
    shutil.copyfile(SHAPES_TOPIC / index.name, index)
    return records, index


# -- magic byte ----------------------------------------------------------------


@pytest.mark.parametrize("first", [b"\x02", b"\xff", b"\x00"])
def test_wrong_magic_byte_in_each_file_kind(tmp_path: Path, first: bytes) -> None:
    records, index = _segment(tmp_path)
    records.write_bytes(first + records.read_bytes()[1:])
    with pytest.raises(MagicByteError) as info:
        list(iter_segment(records, index))
    assert info.value.file == str(records)
    assert info.value.position == 0
    assert f"0x{first[0]:02x}" in str(info.value)
    assert "expected magic byte 0x01" in str(info.value)

    with pytest.raises(MagicByteError, match="testIndex at byte 0"):
        decode_segment_index(first + b"", file="testIndex")
    with pytest.raises(MagicByteError, match="pidx at byte 0"):
        decode_partition_index(first + (INDEX_VECTORS / "partition_index_four_segments").read_bytes()[1:], file="pidx")


def test_missing_magic_byte_points_to_legacy_option(tmp_path: Path) -> None:
    records, index = _segment(tmp_path)
    records.write_bytes(records.read_bytes()[1:])
    with pytest.raises(MagicByteError, match="--legacy-no-magic"):
        list(iter_segment(records, index))


def test_legacy_files_without_magic_read_when_asked(tmp_path: Path) -> None:
    records, index = _segment(tmp_path)
    expected = list(iter_segment(records, index))
    records.write_bytes(records.read_bytes()[1:])
    entries = decode_segment_index(index.read_bytes())
    index.write_bytes(b"".join(ENTRY.pack(e.offset, e.position - 1, e.length) for e in entries))
    assert list(iter_segment(records, index, legacy=True)) == expected


def test_empty_file_is_missing_magic(tmp_path: Path) -> None:
    with pytest.raises(MagicByteError, match="file is empty"):
        decode_segment_index(b"", file="x_index")


# -- truncation -------------------------------------------------------------------


def test_every_truncation_of_a_records_file_is_a_truncated_error() -> None:
    data = (SHAPES_TOPIC / f"{PREFIX}_records").read_bytes()
    boundaries = {1, 43, 67, 152, 194}
    for cut in range(2, len(data)):
        if cut in boundaries:
            assert len(list(decode_records(data, 1, cut))) > 0
            continue
        with pytest.raises(TruncatedError) as info:
            list(decode_records(data, 1, cut, file="seg_records"))
        assert info.value.file == "seg_records"
        assert info.value.position is not None and 1 <= info.value.position <= cut


def test_truncated_index_entry() -> None:
    data = (INDEX_VECTORS / "segment_index_without_records").read_bytes()
    with pytest.raises(TruncatedError, match=r"at byte 73: segment index ends inside an entry.*found 10 trailing"):
        decode_segment_index(data[:83], file="testIndex")


def test_truncated_partition_index_entry() -> None:
    data = (INDEX_VECTORS / "partition_index_four_segments").read_bytes()
    for cut in range(2, len(data)):
        if cut in (1, 15, 31, 47, 63):
            continue
        with pytest.raises(TruncatedError):
            decode_partition_index(data[:cut], file="pidx")


# -- lengths ---------------------------------------------------------------------


def test_negative_length_other_than_minus_one() -> None:
    data = bytearray(encode_record_bytes())
    data[12:16] = (-2).to_bytes(4, "big", signed=True)  # key length
    with pytest.raises(FormatError, match=r"f at byte 12: invalid key length: expected -1 or a length >= 0, found -2"):
        decode_record(bytes(data), file="f")


def test_negative_header_key_length_is_refused() -> None:
    from spark_kafka_backup.format.record import Record

    data = bytearray(encode_record(Record(0, -1, None, None, None, (("k", None),))))
    data[24:28] = (-1).to_bytes(4, "big", signed=True)
    with pytest.raises(FormatError, match="invalid header key length: expected a length >= 0, found -1"):
        decode_record(bytes(data), file="f")


def test_length_beyond_the_data_does_not_allocate() -> None:
    data = bytearray(encode_record_bytes())
    data[12:16] = (2**31 - 1).to_bytes(4, "big")  # key claims 2 GiB
    tracemalloc.start()
    try:
        with pytest.raises(TruncatedError, match="key length reaches past the end"):
            decode_record(bytes(data), file="f")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def test_absurd_header_count_fails_fast() -> None:
    from spark_kafka_backup.format.record import Record

    data = bytearray(encode_record(Record(1, -1, None, b"key", b"value")))
    data[-4:] = (2**31 - 1).to_bytes(4, "big")  # header count, then nothing
    with pytest.raises(TruncatedError, match=r"header count length reaches past the end.*found 2147483647"):
        decode_record(bytes(data), file="f")


def test_unknown_timestamp_type() -> None:
    data = bytearray(encode_record_bytes())
    data[8:12] = (7).to_bytes(4, "big")
    with pytest.raises(FormatError, match=r"f at byte 8: unknown timestamp type: expected -2, -1, 0 or 1, found 7"):
        decode_record(bytes(data), file="f")


def test_invalid_utf8_header_key() -> None:
    from spark_kafka_backup.format.record import Record

    data = bytearray(encode_record(Record(0, -1, None, None, None, (("ab", None),))))
    data[28:30] = b"\xff\xfe"
    with pytest.raises(FormatError, match="header key is not valid UTF-8"):
        decode_record(bytes(data), file="f")


# -- indexes ---------------------------------------------------------------------


def test_non_increasing_offsets_in_segment_index() -> None:
    data = b"\x01" + ENTRY.pack(5, 1, 30) + ENTRY.pack(5, 31, 30)
    with pytest.raises(FormatError, match=r"idx at byte 25: index entry 1: offsets must increase.*found 5"):
        decode_segment_index(data, file="idx")


def test_non_increasing_offsets_in_partition_index() -> None:
    from spark_kafka_backup.format.partition_index import PartitionIndexEntry, encode_entry

    data = b"\x01" + encode_entry(PartitionIndexEntry("a", 10)) + encode_entry(PartitionIndexEntry("b", 10))
    with pytest.raises(FormatError, match="start offsets must increase"):
        decode_partition_index(data, file="pidx")


def test_absurd_partition_index_name_length() -> None:
    data = b"\x01" + (2**31 - 1).to_bytes(4, "big") + b"abc"
    with pytest.raises(FormatError, match="invalid segment name length"):
        decode_partition_index(data, file="pidx")


def test_index_pointing_outside_records_file(tmp_path: Path) -> None:
    records, index = _segment(tmp_path)
    records.write_bytes(records.read_bytes()[:160])
    with pytest.raises(FormatError, match="points outside its records file") as info:
        list(iter_segment(records, index))
    assert info.value.file == str(index)


def test_index_disagreeing_with_records(tmp_path: Path) -> None:
    records, index = _segment(tmp_path)
    data = bytearray(index.read_bytes())
    data[1 + 24 : 1 + 32] = (2).to_bytes(8, "big")  # entry 1 says offset 2, record says 1
    index.write_bytes(bytes(data))
    with pytest.raises(FormatError, match="record does not match its index entry"):
        list(iter_segment(records, index))


# -- consumer offsets JSON ------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b'{"g": 1', "not valid JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"g": "12"}', "invalid committed offset"),
        (b'{"g": true}', "invalid committed offset"),
        (b'{"g": -5}', "invalid committed offset"),
        (b'{"g": 1.5}', "invalid committed offset"),
        (b"\xff\xfe", "not UTF-8"),
    ],
)
def test_malformed_consumer_offsets(text: bytes, message: str) -> None:
    with pytest.raises(FormatError, match=message) as info:
        decode_consumer_offsets(text, file="consumer_offsets_partition_000")
    assert "consumer_offsets_partition_000" in str(info.value)


# -- fuzz: nothing but documented errors ------------------------------------------------


@given(st.data())
@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_bit_flips_raise_only_kbackup_errors(data: st.DataObject) -> None:
    original = (SHAPES_TOPIC / f"{PREFIX}_records").read_bytes()
    damaged = bytearray(original)
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(1, len(damaged) - 1))
        damaged[position] ^= 1 << data.draw(st.integers(0, 7))
    with contextlib.suppress(SparkKafkaBackupError):
        list(decode_records(bytes(damaged), 1, len(damaged), file="f"))
    index = bytearray((INDEX_VECTORS / "segment_index_without_records").read_bytes())
    index[data.draw(st.integers(0, len(index) - 1))] ^= 0xFF
    with contextlib.suppress(SparkKafkaBackupError):
        decode_segment_index(bytes(index), file="i")


def encode_record_bytes() -> bytes:
    from spark_kafka_backup.format.record import Record

    return encode_record(Record(1, -1, None, b"key", b"value", (("h", b"v"),)))


@pytest.mark.parametrize("name", ["../../etc/passwd", "a/b", "..", ""])
def test_partition_index_names_cannot_leave_the_topic_directory(tmp_path: Path, name: str) -> None:
    from spark_kafka_backup.format.partition_index import PartitionIndexEntry, encode_partition_index
    from spark_kafka_backup.partition.reader import PartitionReader
    from spark_kafka_backup.partition.writer import PartitionWriter

    topic_dir = tmp_path / "t"
    topic_dir.mkdir()
    (topic_dir / "index_partition_000").write_bytes(encode_partition_index([PartitionIndexEntry(name, 0)]))
    with pytest.raises(FormatError, match="names no file in the topic directory"):
        PartitionReader(topic_dir, 0)
    with pytest.raises(FormatError, match="names no file in the topic directory"):
        PartitionWriter(topic_dir, "t", 0, fsync=False)
