"""The restore's columnar segment reader against the reference record reader: same records, same refusals."""

from __future__ import annotations

import tempfile
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_kafka_backup.errors import FormatError
from spark_kafka_backup.format.magic import MAGIC_V1
from spark_kafka_backup.format.record import Record, encode_record
from spark_kafka_backup.format.segment_index import SegmentIndexEntry, encode_segment_index
from spark_kafka_backup.partition import segment_batches
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.segment_batches import iter_segment_batches, produce_columns
from spark_kafka_backup.partition.segment_reader import SegmentIndexFile, iter_segment
from spark_kafka_backup.partition.writer import PartitionWriter
from tests.strategies import record_runs


def written(directory: Path, records: list[Record], segment_size: int) -> PartitionReader:
    """A reader of partition 0 of topic ``t`` in ``directory``, holding ``records``."""
    with PartitionWriter(directory / "t", "t", 0, max_segment_size=segment_size, fsync=False) as writer:
        for record in records:
            writer.append(record)
    return PartitionReader(directory / "t", 0)


def batched(reader: PartitionReader, low: int | None, high: int | None) -> list[Record]:
    return [record for batch in reader.record_batches(low, high) for record in batch.records()]


@settings(max_examples=80, deadline=None)
@given(record_runs(max_size=40), st.sampled_from([80, 600, 1 << 30]), st.data())
def test_batches_hold_the_records_the_reference_reader_yields(
    records: list[Record], segment_size: int, data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        reader = written(Path(tmp), records, segment_size)
        offsets = [r.offset for r in records]
        low = data.draw(st.one_of(st.none(), st.integers(offsets[0] - 2, offsets[-1] + 2)))
        high = data.draw(st.one_of(st.none(), st.integers(offsets[0] - 2, offsets[-1] + 2)))
        assert batched(reader, low, high) == list(reader.records(low, high))
        # Small batches cut by records and by bytes read the same.
        for segment in reader.segments:
            records_path, index_path = reader.segment_paths(segment)
            expected = list(iter_segment(records_path, index_path, from_offset=low))
            for limits in ({"batch_records": 3}, {"batch_bytes": 50}):
                pieces = list(iter_segment_batches(records_path, index_path, from_offset=low, **limits))  # type: ignore[arg-type]
                assert [r for piece in pieces for r in piece.records()] == expected


@settings(max_examples=60, deadline=None)
@given(record_runs(max_size=40), st.sampled_from([80, 600, 1 << 30]), st.data())
def test_batches_kept_by_offset_hold_exactly_those_records(
    records: list[Record], segment_size: int, data: st.DataObject
) -> None:
    """``keep`` (restore --where's matches): the records it holds for, as the whole read filtered gives them."""
    with tempfile.TemporaryDirectory() as tmp:
        reader = written(Path(tmp), records, segment_size)
        kept = frozenset(data.draw(st.sets(st.sampled_from([r.offset for r in records]))))

        def keep(offsets: np.ndarray) -> np.ndarray:
            return np.isin(offsets, list(kept))

        low = data.draw(st.one_of(st.none(), st.sampled_from([r.offset for r in records])))
        # Read as one stretch, and (no slack) each run of adjacent kept records by itself.
        for slack in (segment_batches.SPARSE_SLACK, 0):
            with mock.patch.object(segment_batches, "SPARSE_SLACK", slack):
                chosen = [r for batch in reader.record_batches(low, None, keep=keep) for r in batch.records()]
            assert chosen == [r for r in reader.records(low, None) if r.offset in kept]
        for segment in reader.segments:
            records_path, index_path = reader.segment_paths(segment)
            pieces = iter_segment_batches(records_path, index_path, batch_records=3, keep=keep)
            assert [r for piece in pieces for r in piece.records()] == [
                r for r in iter_segment(records_path, index_path) if r.offset in kept
            ]


def test_kept_records_read_apart_are_the_stored_ones_and_damage_is_named_at_its_file_position(tmp_path: Path) -> None:
    records = [Record(i, 0, 1_000 + i, b"k%d" % i, b"v" * (i % 7)) for i in range(300)]
    reader = written(tmp_path, records, 1 << 30)

    def keep(offsets: np.ndarray) -> np.ndarray:
        kept: np.ndarray = (offsets % 10 == 0) | (offsets == 11)
        return kept

    with mock.patch.object(segment_batches, "SPARSE_SLACK", 0):
        chosen = [r for batch in reader.record_batches(keep=keep) for r in batch.records()]
        assert chosen == [r for r in records if r.offset % 10 == 0 or r.offset == 11]
        records_path, index_path = reader.segment_paths(reader.segments[0])
        assert isinstance(records_path, Path)
        with SegmentIndexFile(index_path) as index:
            position = next(at for offset, at, _ in index.iter_entries() if offset == 150)
        damaged = bytearray(records_path.read_bytes())
        damaged[position : position + 8] = (999).to_bytes(8, "big")  # the record's offset
        records_path.write_bytes(bytes(damaged))
        with pytest.raises(FormatError) as raised:
            list(reader.record_batches(keep=keep))
    assert raised.value.position == position and str(records_path) in str(raised.value)


def hand_made_segment(directory: Path, body: bytes, entries: list[SegmentIndexEntry]) -> tuple[Path, Path]:
    records_path = directory / "segment_partition_000_from_offset_0000000000_records"
    index_path = directory / "segment_partition_000_from_offset_0000000000_index"
    records_path.write_bytes(MAGIC_V1 + body)
    index_path.write_bytes(encode_segment_index(entries))
    return records_path, index_path


def test_unindexed_bytes_between_records_are_skipped_as_by_the_reference(tmp_path: Path) -> None:
    """The original tool's crash shape: a partial record left between two indexed ones."""
    first, second = Record(0, 0, 5, b"a", b"b", (("h", None),)), Record(1, -1, None, None, b"c")
    one, two = encode_record(first), encode_record(second)
    junk = one[:10]
    entries = [SegmentIndexEntry(0, 1, len(one)), SegmentIndexEntry(1, 1 + len(one) + len(junk), len(two))]
    records_path, index_path = hand_made_segment(tmp_path, one + junk + two, entries)
    batches = list(iter_segment_batches(records_path, index_path))
    assert [r for b in batches for r in b.records()] == list(iter_segment(records_path, index_path)) == [first, second]


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("offset", "record offset differs from its index entry"),
        ("order", "offsets must increase"),
        ("outside", "points outside its records file"),
        ("length", "does not fill its indexed length"),
    ],
)
def test_damage_is_refused_naming_the_file(tmp_path: Path, damage: str, message: str) -> None:
    records = [Record(o, 0, o, b"k", b"v" * o, ()) for o in range(3)]
    body = b"".join(encode_record(r) for r in records)
    entries, position = [], 1
    for record in records:
        entries.append(SegmentIndexEntry(record.offset, position, len(encode_record(record))))
        position += len(encode_record(record))
    if damage == "offset":
        entries[1] = entries[1]._replace(offset=7)
        entries[2] = entries[2]._replace(offset=8)
    elif damage == "order":
        entries[2] = entries[2]._replace(offset=0)
    elif damage == "outside":
        entries[2] = entries[2]._replace(length=entries[2].length + 100)
    elif damage == "length":
        body += b"\0"
        entries[2] = entries[2]._replace(length=entries[2].length + 1)
    records_path, index_path = hand_made_segment(tmp_path, body, entries)
    with pytest.raises(FormatError, match=message) as caught:
        for _ in iter_segment_batches(records_path, index_path):
            pass
    assert tmp_path.name in str(caught.value)


@settings(max_examples=60, deadline=None)
@given(record_runs(max_size=40), st.sampled_from([80, 1 << 30]))
def test_produce_columns_hold_what_a_producer_is_given_record_by_record(
    records: list[Record], segment_size: int
) -> None:
    """The columns the native producer takes carry, row for row, what the reference restore passes to ``produce``:
    key, value, the timestamp (-1 when none), headers in order (none: null)."""
    with tempfile.TemporaryDirectory() as tmp:
        reader = written(Path(tmp), records, segment_size)
        for batch in reader.record_batches(None, None):
            columns = produce_columns(batch)
            expected = [
                {
                    "key": r.key,
                    "value": r.value,
                    "timestamp": -1 if r.timestamp is None else r.timestamp,
                    "headers": [{"key": k, "value": v} for k, v in r.headers] if r.headers else None,
                }
                for r in batch.records()
            ]
            assert columns.to_pylist() == expected
