"""Encode/decode of single records: every field case, errors, and a property round trip."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_kafka_backup.errors import InvalidRecordError
from spark_kafka_backup.format.record import (
    Record,
    TimestampType,
    append_record,
    decode_record,
    decode_records,
    encode_record,
)
from tests.strategies import records


@pytest.mark.parametrize(
    ("ts_type", "timestamp", "size"),
    [
        (TimestampType.NO_TIMESTAMP, None, 24),
        (TimestampType.CREATE_TIME, 1_700_000_000_123, 32),
        (TimestampType.LOG_APPEND_TIME, 1_700_000_000_456, 32),
        (TimestampType.CREATE_TIME_NULL, None, 24),
    ],
)
def test_timestamp_types(ts_type: int, timestamp: int | None, size: int) -> None:
    record = Record(7, ts_type, timestamp, None, None)
    data = encode_record(record)
    assert len(data) == size
    assert data[8:12] == int(ts_type).to_bytes(4, "big", signed=True)
    assert decode_record(data) == (record, size)


def test_create_time_null_has_no_timestamp_field() -> None:
    data = encode_record(Record(1, -2, None, b"k", b"v"))
    expected = bytes.fromhex("0000000000000001 fffffffe 00000001") + b"k" + bytes.fromhex("00000001") + b"v"
    assert data == expected + bytes(4)


def test_null_empty_and_header_variants_round_trip() -> None:
    record = Record(
        12_345_678_901,
        TimestampType.CREATE_TIME,
        -1,
        b"",
        None,
        (("dup", b"1"), ("dup", None), ("", b""), ("größe-ключ-🔑", b"\x00\xff"), ("dup", b"3")),
    )
    decoded, _ = decode_record(encode_record(record))
    assert decoded == record
    assert decoded.key == b"" and decoded.value is None
    assert [key for key, _ in decoded.headers] == ["dup", "dup", "", "größe-ключ-🔑", "dup"]


def test_utf8_header_key_bytes_on_disk() -> None:
    data = encode_record(Record(0, -1, None, None, None, (("é", None),)))
    # header count 1, key length 2 (UTF-8 of é is c3 a9), key, value length -1
    assert data[-14:] == bytes.fromhex("00000001 00000002 c3a9 ffffffff")


@pytest.mark.parametrize(
    ("record", "field"),
    [
        (Record(-1, -1, None, None, None), "offset"),
        (Record(2**63, -1, None, None, None), "offset"),
        (Record(0, 5, None, None, None), "timestamp type"),
        (Record(0, 0, None, None, None), "timestamp type 0 needs"),
        (Record(0, -1, 17, None, None), "stores no timestamp"),
        (Record(0, -1, None, "text", None), "key must be bytes"),  # type: ignore[arg-type]
        (Record(0, -1, None, None, None, ((b"k", None),)), "header 0 key must be str"),  # type: ignore[arg-type]
        (Record(0, -1, None, None, None, (("\ud800", None),)), "not encodable"),
    ],
)
def test_invalid_records_are_refused_and_leave_buffer_untouched(record: Record, field: str) -> None:
    out = bytearray(b"previous")
    with pytest.raises(InvalidRecordError, match=field):
        append_record(out, record)
    assert out == b"previous"


@given(records())
@settings(max_examples=400)
def test_property_round_trip(record: Record) -> None:
    data = encode_record(record)
    decoded, end = decode_record(data)
    assert end == len(data)
    assert decoded == record


@given(st.lists(records(), max_size=20))
def test_property_concatenated_records(batch: list[Record]) -> None:
    out = bytearray(b"\x01")
    lengths = [append_record(out, record) for record in batch]
    decoded = list(decode_records(bytes(out), 1, len(out)))
    assert [record for record, _, _ in decoded] == batch
    assert [length for _, _, length in decoded] == lengths
    positions = [position for _, position, _ in decoded]
    assert positions == [1 + sum(lengths[:i]) for i in range(len(lengths))]


@given(st.lists(records(), min_size=1, max_size=10), st.integers(1, 64))
def test_property_chunked_decoding_sees_the_same_records(batch: list[Record], chunk: int) -> None:
    """Decoding in pieces (the ``more`` protocol) yields exactly the whole-buffer result."""
    data = b"".join(encode_record(record) for record in batch)
    seen: list[Record] = []
    start = 0
    read_to = 0
    while start < len(data):
        read_to = min(len(data), max(read_to, start) + chunk)
        consumed = start
        for record, position, length in decode_records(data[:read_to], start, read_to, more=len(data) - read_to):
            seen.append(record)
            consumed = position + length
        start = consumed
    assert seen == batch
