"""The columnar v1 codec against the scalar reference codec, byte for byte; the compiled scanner against the
numpy decoding (same positions, the same batches refused)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_kafka_backup.errors import FormatError, InvalidRecordError, TruncatedError
from spark_kafka_backup.format import record_columns
from spark_kafka_backup.format.record import Record, decode_records, encode_record
from spark_kafka_backup.format.record_columns import (
    binary_column,
    decode_columns,
    encode_columns,
    gather,
    index_entries,
)
from spark_kafka_backup.format.segment_index import SegmentIndexEntry, decode_segment_index, encode_segment_index
from tests.strategies import record_runs

HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def as_columns(records: list[Record], *, null_header_lists: bool = False) -> dict[str, Any]:
    """Records as the Arrow and numpy columns the sink hands the encoder."""
    return {
        "offsets": np.array([r.offset for r in records], dtype=np.int64),
        "timestamp_types": np.array([r.timestamp_type for r in records], dtype=np.int32),
        "timestamps": np.array([r.timestamp or 0 for r in records], dtype=np.int64),
        "keys": pa.array([r.key for r in records], pa.binary()),
        "values": pa.array([r.value for r in records], pa.binary()),
        "headers": pa.array(
            [
                None if null_header_lists and not r.headers else [{"key": k, "value": v} for k, v in r.headers]
                for r in records
            ],
            HEADER_TYPE,
        ),
    }


def scalar_bytes(records: list[Record]) -> bytes:
    return b"".join(encode_record(r) for r in records)


@settings(max_examples=300, deadline=None)
@given(record_runs(max_size=40), st.booleans())
def test_columnar_encoding_is_byte_identical_to_the_scalar_codec(records: list[Record], null_lists: bool) -> None:
    encoded = encode_columns(**as_columns(records, null_header_lists=null_lists))
    assert bytes(encoded.data) == scalar_bytes(records)
    assert encoded.lengths.tolist() == [len(encode_record(r)) for r in records]
    assert encoded.offsets.tolist() == [r.offset for r in records]


@settings(max_examples=100, deadline=None)
@given(record_runs(max_size=40), st.integers(0, 5), st.integers(0, 5))
def test_encoding_a_slice_of_a_batch_reads_only_that_slice(
    records: list[Record], cut_front: int, cut_back: int
) -> None:
    """Arrow arrays sliced out of a bigger batch carry an offset into shared buffers."""
    columns = as_columns(records)
    end = max(cut_front, len(records) - cut_back)
    sliced = {
        name: column[cut_front:end] if isinstance(column, np.ndarray) else column.slice(cut_front, end - cut_front)
        for name, column in columns.items()
    }
    encoded = encode_columns(**sliced)
    assert bytes(encoded.data) == scalar_bytes(records[cut_front:end])


def test_no_header_column_and_type_without_timestamp() -> None:
    records = [
        Record(5, -1, None, None, b"v", ()),
        Record(9, -2, None, b"", None, ()),
        Record(10, 0, -7, b"k", b"", ()),
    ]
    columns = as_columns(records)
    columns["headers"] = None
    encoded = encode_columns(**columns)
    assert bytes(encoded.data) == scalar_bytes(records)
    sizes = [len(encode_record(r)) for r in records]
    assert encoded.bounds.tolist() == [0, sizes[0], sizes[0] + sizes[1], sum(sizes)]
    tail = encoded.slice(1, 3)
    assert bytes(tail.data) == scalar_bytes(records[1:]) and tail.bounds.tolist() == [0, sizes[1], sum(sizes[1:])]


def test_an_invalid_record_is_named_by_its_offset() -> None:
    columns = as_columns([Record(3, 0, 1, b"k", b"v", ()), Record(4, 0, 1, b"k", b"v", ())])
    columns["timestamp_types"] = np.array([0, 7], dtype=np.int32)
    with pytest.raises(InvalidRecordError, match="offset 4: timestamp type must be one of"):
        encode_columns(**columns)
    columns = as_columns([Record(3, 0, 1, b"k", b"v", ())])
    columns["headers"] = pa.array([[{"key": None, "value": b"x"}]], HEADER_TYPE)
    with pytest.raises(InvalidRecordError, match="offset 3: header 0 key"):
        encode_columns(**columns)


def test_index_entries_are_the_segment_index_format() -> None:
    entries = [SegmentIndexEntry(7, 1, 30), SegmentIndexEntry(9, 31, 44)]
    raw = index_entries(np.array([7, 9]), np.array([1, 31]), np.array([30, 44]))
    assert b"\x01" + raw == encode_segment_index(entries)
    assert decode_segment_index(b"\x01" + raw) == entries


@settings(max_examples=300, deadline=None)
@given(record_runs(max_size=40), st.integers(0, 3))
def test_columnar_decoding_matches_the_scalar_decoder(records: list[Record], base: int) -> None:
    data = b"\xff" * base + scalar_bytes(records)
    lengths = np.array([len(encode_record(r)) for r in records], dtype=np.int64)
    positions = np.zeros(len(records), dtype=np.int64)
    np.cumsum(lengths[:-1], out=positions[1:])
    positions += 100  # file positions; the buffer starts at file byte 100 - base
    decoded = decode_columns(data, np.array([r.offset for r in records]), positions, lengths, base=100 - base)
    buf = np.frombuffer(data, dtype=np.uint8)
    expected = [r for r, _, _ in decode_records(data, base, len(data))]
    assert len(decoded) == len(expected)
    keys = binary_column(buf, decoded.key_starts, decoded.key_lengths).to_pylist()
    values = binary_column(buf, decoded.value_starts, decoded.value_lengths).to_pylist()
    for i, record in enumerate(expected):
        assert decoded.offsets[i] == record.offset
        assert decoded.timestamp_types[i] == record.timestamp_type
        if record.timestamp is not None:
            assert decoded.timestamps[i] == record.timestamp
        assert keys[i] == record.key
        assert values[i] == record.value
        first, count = decoded.header_first[i], decoded.header_counts[i]
        headers = tuple(
            (
                bytes(
                    buf[decoded.header_key_starts[j] : decoded.header_key_starts[j] + decoded.header_key_lengths[j]]
                ).decode(),
                None
                if decoded.header_value_lengths[j] < 0
                else bytes(
                    buf[
                        decoded.header_value_starts[j] : decoded.header_value_starts[j]
                        + decoded.header_value_lengths[j]
                    ]
                ),
            )
            for j in range(first, first + count)
        )
        assert headers == record.headers


def one_record(record: Record) -> tuple[bytearray, np.ndarray, np.ndarray, np.ndarray]:
    data = bytearray(encode_record(record))
    return data, np.array([record.offset]), np.array([1]), np.array([len(data)])


def test_corrupt_records_raise_naming_the_byte() -> None:
    data, offsets, positions, lengths = one_record(Record(5, 0, 1, b"key", b"value", (("h", b"x"),)))
    with pytest.raises(FormatError, match="differs from its index entry"):
        decode_columns(data, offsets + 1, positions, lengths, base=1)
    bad_type = bytearray(data)
    bad_type[8:12] = (9).to_bytes(4, "big")
    with pytest.raises(FormatError, match="unknown timestamp type") as caught:
        decode_columns(bad_type, offsets, positions, lengths, base=1, file="seg")
    assert caught.value.position == 9 and caught.value.file == "seg"
    huge_key = bytearray(data)
    huge_key[20:24] = (2**31 - 1).to_bytes(4, "big")
    with pytest.raises(TruncatedError, match="key length reaches past the end"):
        decode_columns(huge_key, offsets, positions, lengths, base=1)
    negative_value = bytearray(data)
    negative_value[27:31] = (-5).to_bytes(4, "big", signed=True)
    with pytest.raises(FormatError, match="invalid value length"):
        decode_columns(negative_value, offsets, positions, lengths, base=1)
    with pytest.raises(FormatError, match="does not fill its indexed length"):
        decode_columns(data + b"\0", offsets, positions, lengths + 1, base=1)
    with pytest.raises(TruncatedError, match="outside the bytes read"):
        decode_columns(data[:-1], offsets, positions, lengths, base=1)
    assert bytes(data[44:45]) == b"h"  # the header key, after count and key length
    bad_utf8 = bytearray(data)
    bad_utf8[44] = 0xFF
    with pytest.raises(FormatError, match="not valid UTF-8"):
        decode_columns(bad_utf8, offsets, positions, lengths, base=1)


def test_gather_takes_slices_back_to_back() -> None:
    buf = np.frombuffer(b"abcdefghij", dtype=np.uint8)
    assert gather(buf, np.array([2, 0, 5]), np.array([3, -1, 2])).tobytes() == b"cdefg"
    assert binary_column(buf, np.array([2, 0, 5]), np.array([3, -1, 0])).to_pylist() == [b"cde", None, b""]


def test_records_with_more_headers_than_the_array_rounds() -> None:
    """Past HEADER_ROUNDS header slots the decoder goes header by header: same result, same refusals."""
    from spark_kafka_backup.format.record_columns import HEADER_ROUNDS

    records = [
        Record(o, 0, o, b"k", b"v", tuple((f"h{i}", None if i % 3 == 1 else b"%d" % i) for i in range(o * 7)))
        for o in range(8)
    ]
    assert len(records[-1].headers) > HEADER_ROUNDS
    data = scalar_bytes(records)
    lengths = np.array([len(encode_record(r)) for r in records], dtype=np.int64)
    positions = np.concatenate(([0], np.cumsum(lengths[:-1])))
    offsets = np.array([r.offset for r in records])
    decoded = decode_columns(data, offsets, positions, lengths)
    buf = np.frombuffer(data, dtype=np.uint8)
    last = len(records) - 1
    first, count = int(decoded.header_first[last]), int(decoded.header_counts[last])
    keys = binary_column(buf, decoded.header_key_starts, decoded.header_key_lengths).to_pylist()
    values = binary_column(buf, decoded.header_value_starts, decoded.header_value_lengths).to_pylist()
    assert [
        (k.decode(), v) for k, v in zip(keys[first : first + count], values[first : first + count], strict=True)
    ] == list(records[last].headers)
    damaged = bytearray(data)
    # The last header's value length of the last record, made to reach past the record.
    tail_value_length = int(positions[last] + lengths[last]) - 4 - len(b"%d" % 48)
    damaged[tail_value_length : tail_value_length + 4] = (1000).to_bytes(4, "big")
    with pytest.raises(TruncatedError, match="header value length reaches past the end of the record"):
        decode_columns(damaged, offsets, positions, lengths)


def _same(a: Any, b: Any) -> bool:
    names = [f.name for f in dataclasses.fields(a)]
    return all(np.array_equal(getattr(a, n), getattr(b, n)) and getattr(a, n).dtype == getattr(b, n).dtype
               for n in names)  # fmt: skip


def test_the_compiled_scanner_is_built_here() -> None:
    """``./dev setup`` builds it (a C compiler is part of the machine); an install without one decodes with numpy."""
    assert record_columns._native_records is not None


@settings(max_examples=300, deadline=None)
@given(record_runs(max_size=30), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=3),
       st.integers(0, 3))  # fmt: skip
def test_the_compiled_scanner_answers_as_numpy_and_refuses_what_numpy_refuses(
    records: list[Record], damage: list[tuple[int, int]], base: int
) -> None:
    """On valid batches both give the same positions; on damaged ones (bytes overwritten at random) the scanner
    answers only when numpy decodes the batch too, and then the same."""
    data = bytearray(b"\xff" * base + scalar_bytes(records))
    for at, byte in damage:
        if len(data) > base:
            data[base + at % (len(data) - base)] = byte
    lengths = np.array([len(encode_record(r)) for r in records], dtype=np.int64)
    positions = np.zeros(len(records), dtype=np.int64)
    np.cumsum(lengths[:-1], out=positions[1:])
    offsets = np.array([r.offset for r in records], dtype=np.int64)
    starts = positions + base
    scanned = record_columns._scanned(data, offsets, starts, starts + lengths) if len(records) else None
    try:
        reference = decode_columns(data, offsets, positions + 100, lengths, base=100 - base, compiled=False)
    except (FormatError, TruncatedError):
        assert scanned is None
        return
    assert not len(records) or (scanned is not None and _same(scanned, reference))
    assert _same(decode_columns(data, offsets, positions + 100, lengths, base=100 - base), reference)


@settings(max_examples=500, deadline=None)
@given(st.binary(min_size=1, max_size=12))
def test_the_compiled_scanner_takes_a_header_key_exactly_when_it_is_utf8(key: bytes) -> None:
    placeholder = "Z" * len(key)
    data = bytearray(encode_record(Record(3, 0, 1, b"k", b"v", ((placeholder, b"x"),))))
    at = bytes(data).rindex(placeholder.encode())
    data[at : at + len(key)] = key
    ends = np.array([len(data)], dtype=np.int64)
    scanned = record_columns._scanned(data, np.array([3]), np.array([0]), ends)
    try:
        key.decode()
    except UnicodeDecodeError:
        assert scanned is None
    else:
        assert scanned is not None and int(scanned.header_key_lengths[0]) == len(key)


@pytest.mark.parametrize("compiled", [True, False])
def test_an_index_entry_outside_the_bytes_is_refused_by_both_decoders(compiled: bool) -> None:
    """Positions or lengths no segment index of these bytes could give (a start near 2^63 whose end wraps around, a
    negative length) are refused, never read (the compiled scanner's reads stay inside the buffer)."""
    data, offsets, _, _ = one_record(Record(5, 0, 1, b"key", b"value", (("h", b"x"),)))
    for at, length in [(2**63 - 5, 20), (2**63 - 5, -30), (1, -1), (1, 2**63 - 1)]:
        with pytest.raises(TruncatedError, match="outside the bytes read"):
            decode_columns(data, offsets, np.array([at]), np.array([length]), base=1, compiled=compiled)


def test_the_compiled_headers_pass_stays_inside_its_arrays_whatever_it_is_given() -> None:
    """``headers`` takes ``scan``'s own positions; given others (a slot past the output, an end past the bytes) it
    refuses instead of writing or reading outside."""
    native = record_columns._native_records
    assert native is not None
    records = [Record(o, 0, o, b"k", b"v", (("a", b"1"), ("b", None))) for o in range(3)]
    data = scalar_bytes(records)
    lengths = np.array([len(encode_record(r)) for r in records], dtype=np.int64)
    starts = np.concatenate(([0], np.cumsum(lengths[:-1]))).astype(np.int64)
    ends = starts + lengths
    fixed = np.empty(24, dtype=np.int64)
    assert native.scan(data, starts, ends, np.arange(3, dtype=np.int64), fixed) == 6
    out = np.empty(24, dtype=np.int64)
    assert native.headers(data, starts, ends, fixed, out) == 0
    slot_past = fixed.copy()
    slot_past[7 * 3] = 5  # record 0's first slot: its two headers would go past the six
    assert native.headers(data, starts, ends, slot_past, out) == -1
    end_past = ends.copy()
    end_past[1] = len(data) + 100
    assert native.headers(data, starts, end_past, fixed, out) == -1
    negative = fixed.copy()
    negative[6 * 3 + 2] = -10  # the last record's header count: a negative total
    with pytest.raises(ValueError, match="out must be 4 \\* total"):
        native.headers(data, starts, ends, negative, out)
    negative[6 * 3 + 1] = -1  # a negative count in the middle
    negative[6 * 3 + 2] = 2
    assert native.headers(data, starts, ends, negative, out) == -1
