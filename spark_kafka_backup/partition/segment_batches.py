"""Reading a segment as columnar batches: the restore's read path.

The same records, checks and order as :func:`~spark_kafka_backup.partition.segment_reader.iter_segment`
(the reference), read differently: up to :data:`BATCH_RECORDS` index entries
at a time are read in one piece and checked as arrays (offsets increase,
records do not overlap, each within the records file); the records they name
are read with one ``pread`` of at most :data:`BATCH_BYTES` (or one record, if
larger) and decoded by :func:`~spark_kafka_backup.format.record_columns.decode_columns`.
Bytes between records that no entry names are skipped, as by the reference.

Memory: one batch's bytes and arrays, whatever the segment's size.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from spark_kafka_backup.errors import FormatError, TruncatedError
from spark_kafka_backup.format.encryption import KeyRing
from spark_kafka_backup.format.record import Record
from spark_kafka_backup.format.record_columns import DecodedRecords, binary_column, decode_columns
from spark_kafka_backup.format.segment_index import ENTRY_DTYPE
from spark_kafka_backup.partition.records_file import NO_KEYS, is_sealed, open_records, refuse_unindexed
from spark_kafka_backup.partition.segment_reader import SegmentIndexFile, check_segment_pair, warn_once
from spark_kafka_backup.storage import Location, ReadHandle

BATCH_RECORDS = 10_000
BATCH_BYTES = 8 << 20

#: Index entries read at a time when only some records are kept (``keep``).
KEPT_ENTRIES = 262_144
#: Bytes between kept records read anyway rather than in reads of their own.
SPARSE_SLACK = 64 << 10
#: Which of a batch's offsets to decode (a boolean per offset).
Keep = Callable[[npt.NDArray[np.int64]], npt.NDArray[np.bool_]]


@dataclass(frozen=True)
class RecordBatch:
    """Consecutive records of one segment: their columns and the bytes the columns point into."""

    columns: DecodedRecords
    data: bytes

    def __len__(self) -> int:
        return len(self.columns)

    def head(self, count: int) -> RecordBatch:
        """The first ``count`` records."""
        return self.rows(0, count)

    def rows(self, start: int, stop: int) -> RecordBatch:
        """Records ``start`` to ``stop - 1``."""
        c = self.columns
        return RecordBatch(
            dataclasses.replace(
                c,
                offsets=c.offsets[start:stop],
                timestamp_types=c.timestamp_types[start:stop],
                timestamps=c.timestamps[start:stop],
                key_starts=c.key_starts[start:stop],
                key_lengths=c.key_lengths[start:stop],
                value_starts=c.value_starts[start:stop],
                value_lengths=c.value_lengths[start:stop],
                header_counts=c.header_counts[start:stop],
                header_first=c.header_first[start:stop],
            ),
            self.data,
        )

    def record(self, row: int) -> Record:
        """Record ``row`` alone."""
        return next(self.rows(row, row + 1).records())

    def records(self) -> Iterator[Record]:
        """The records as :class:`Record` tuples (what a Kafka producer call needs, one by one).

        Keys, values and headers become Python objects column by column in
        Arrow's C++ (``to_pylist``); Python only zips them into tuples.
        """
        c = self.columns
        n = len(c)
        buf = np.frombuffer(self.data, dtype=np.uint8)
        keys = binary_column(buf, c.key_starts, c.key_lengths).to_pylist()
        values = binary_column(buf, c.value_starts, c.value_lengths).to_pylist()
        kinds = c.timestamp_types.tolist()
        has_time = (c.timestamp_types == 0) | (c.timestamp_types == 1)
        times: list[int | None] = c.timestamps.tolist()
        if not has_time.all():
            for i in np.flatnonzero(~has_time).tolist():
                times[i] = None
        headers: list[tuple[tuple[str, bytes | None], ...]] = [()] * n
        with_headers = np.flatnonzero(c.header_counts)
        if len(with_headers):
            header_keys = binary_column(buf, c.header_key_starts, c.header_key_lengths)
            pairs = list(
                zip(
                    header_keys.cast(pa.large_string()).to_pylist(),
                    binary_column(buf, c.header_value_starts, c.header_value_lengths).to_pylist(),
                    strict=True,
                )
            )
            firsts, counts = c.header_first.tolist(), c.header_counts.tolist()
            for i in with_headers.tolist():
                headers[i] = tuple(pairs[firsts[i] : firsts[i] + counts[i]])
        new = tuple.__new__
        for fields in zip(c.offsets.tolist(), kinds, times, keys, values, headers, strict=True):
            yield new(Record, fields)


#: The columns a producer takes (:meth:`RecordBatch.produce_columns`): timestamps in milliseconds, -1 for none.
PRODUCE_SCHEMA = pa.schema(
    [
        ("key", pa.large_binary()),
        ("value", pa.large_binary()),
        ("timestamp", pa.int64()),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.large_binary())]))),
    ]
)


def produce_columns(batch: RecordBatch) -> pa.RecordBatch:
    """``batch``'s records as a producer takes them, without a Python object per record (what
    :meth:`RecordBatch.records` gives one by one): keys and values (null stays null), the timestamp in milliseconds
    (-1 when the record has none), the headers in order (null when a record has none)."""
    c = batch.columns
    n = len(c)
    buf = np.frombuffer(batch.data, dtype=np.uint8)
    keys = binary_column(buf, c.key_starts, c.key_lengths)
    values = binary_column(buf, c.value_starts, c.value_lengths)
    has_time = (c.timestamp_types == 0) | (c.timestamp_types == 1)
    stamps = np.where(has_time, c.timestamps, -1).astype(np.int64)
    counts = np.asarray(c.header_counts, dtype=np.int64)
    list_offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts, out=list_offsets[1:])
    total = int(list_offsets[-1])
    # Each record's headers, in order: header_first[i] .. header_first[i] + counts[i] - 1.
    where = np.repeat(np.asarray(c.header_first, dtype=np.int64) - list_offsets[:-1], counts) + np.arange(total)
    names = binary_column(buf, c.header_key_starts[where], c.header_key_lengths[where]).cast(pa.string())
    header_values = binary_column(buf, c.header_value_starts[where], c.header_value_lengths[where])
    pairs = pa.StructArray.from_arrays(
        [names, header_values], fields=list(PRODUCE_SCHEMA.field("headers").type.value_type)
    )
    none = counts == 0
    validity = pa.py_buffer(np.packbits(~none, bitorder="little")) if none.any() else None
    headers = pa.ListArray.from_buffers(
        PRODUCE_SCHEMA.field("headers").type, n, [validity, pa.py_buffer(list_offsets)], children=[pairs]
    )
    return pa.RecordBatch.from_arrays([keys, values, pa.array(stamps), headers], schema=PRODUCE_SCHEMA)


def iter_segment_batches(
    records_path: Location,
    index_path: Location,
    *,
    from_offset: int | None = None,
    legacy: bool = False,
    batch_records: int = BATCH_RECORDS,
    batch_bytes: int = BATCH_BYTES,
    keep: Keep | None = None,
    keys: KeyRing = NO_KEYS,
) -> Iterator[RecordBatch]:
    """Yield the records the segment's index lists, from ``from_offset`` on, in batches; with ``keep``, only the
    records whose offsets it holds for (``restore --where``): the others are checked in the index, never decoded,
    and a stretch holding none of them is not read."""
    with SegmentIndexFile(index_path, legacy=legacy) as index:
        records = open_records(records_path, keys)
        try:
            label = str(records_path)
            sealed = is_sealed(records)
            check_segment_pair(index, records, records_path, legacy=legacy)
            if index.count == 0:
                return
            at = 0 if from_offset is None else index.bisect(from_offset)
            if at > 0:
                before = index.entry(at - 1)
                previous_offset, previous_end = before.offset, before.end
            else:
                previous_offset, previous_end = -1, index.data_start
            while at < index.count:
                count = min(batch_records if keep is None else KEPT_ENTRIES, index.count - at)
                entries = np.frombuffer(index.read_entries(at, count), dtype=ENTRY_DTYPE)
                offsets = entries["offset"].astype(np.int64)
                positions = entries["position"].astype(np.int64)
                lengths = entries["length"].astype(np.int64)
                _check_entries(index, at, offsets, positions, lengths, previous_offset, previous_end, records.size)
                ends = positions + lengths
                if keep is None:
                    # As many as fit in batch_bytes from the first (at least one record, however large).
                    take = max(1, int(np.searchsorted(ends - positions[0], batch_bytes, side="right")))
                    rows = np.arange(take)
                else:
                    # As many as keep batch_bytes and batch_records of the records kept (at least one entry).
                    kept = keep(offsets)
                    take = max(1, min(int(np.searchsorted(np.cumsum(np.where(kept, lengths, 0)), batch_bytes, "right")),
                                      int(np.searchsorted(np.cumsum(kept), batch_records, "right"))))  # fmt: skip
                    rows = np.flatnonzero(kept[:take])
                high = int(ends[take - 1])
                if high > records.size:
                    raise TruncatedError(
                        "records file is shorter than its index says",
                        file=label,
                        position=records.size,
                        expected=f"{high} bytes",
                        found=f"{records.size}",
                    )
                gaps = np.flatnonzero(positions[1:take] != ends[: take - 1])
                if sealed and (gaps.size or positions[0] != previous_end):
                    first = 0 if positions[0] != previous_end else int(gaps[0]) + 1
                    after = previous_end if first == 0 else int(ends[first - 1])
                    refuse_unindexed(label, after, int(positions[first]))
                for gap in gaps.tolist():
                    warn_once(f"{records_path}: bytes {int(ends[gap])}..{int(positions[gap + 1]) - 1} are not indexed "
                              "(left by a crash); skipped")  # fmt: skip
                if len(rows):
                    yield _read_rows(records, label, offsets[rows], positions[rows], lengths[rows], sealed=sealed)
                previous_offset, previous_end = int(offsets[take - 1]), high
                at += take
        finally:
            records.close()


def _read_rows(
    records: ReadHandle, label: str, offsets: np.ndarray, positions: np.ndarray, lengths: np.ndarray, *, sealed: bool
) -> RecordBatch:
    """The records at ``positions``: the stretch from the first to the last in one read, or, when they are a small
    part of it (a plain file: a sealed one is read by frames), each run of adjacent ones in a read of its own."""
    low, high = int(positions[0]), int(positions[-1] + lengths[-1])
    wanted = int(lengths.sum())
    if sealed or high - low <= 4 * wanted + SPARSE_SLACK:
        data = records.pread(high - low, low)
        return RecordBatch(decode_columns(data, offsets, positions, lengths, file=label, base=low), data)
    ends = positions + lengths
    breaks = np.flatnonzero(positions[1:] != ends[:-1]) + 1
    starts, stops = np.concatenate(([0], breaks)), np.concatenate((breaks, [len(positions)]))
    data = b"".join(
        records.pread(int(ends[stop - 1] - positions[start]), int(positions[start]))
        for start, stop in zip(starts.tolist(), stops.tolist(), strict=True)
    )
    packed = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    try:
        return RecordBatch(decode_columns(data, offsets, packed, lengths, file=label), data)
    except FormatError:
        # Said with the file's own positions: the stretch read whole.
        whole = records.pread(high - low, low)
        return RecordBatch(decode_columns(whole, offsets, positions, lengths, file=label, base=low), whole)


def _check_entries(
    index: SegmentIndexFile,
    at: int,
    offsets: np.ndarray,
    positions: np.ndarray,
    lengths: np.ndarray,
    previous_offset: int,
    previous_end: int,
    records_size: int,
) -> None:
    """Offsets increase and records do not overlap, across the batch boundary too (the reference's checks);
    every record lies inside the records file (checked first: a corrupt position or length must not overflow)."""
    outside = (positions < 0) | (lengths > records_size) | (positions > records_size - lengths)
    if outside.any():
        row = int(np.flatnonzero(outside)[0])
        raise FormatError(
            f"index entry {at + row} (offset {int(offsets[row])}) points outside its records file",
            file=str(index.path),
            position=index.entry_position(at + row) + 8,
            expected=f"position + length <= {records_size}",
            found=f"position {int(positions[row])}, length {int(lengths[row])}",
        )
    prior_offsets = np.concatenate(([previous_offset], offsets[:-1]))
    prior_ends = np.concatenate(([previous_end], (positions + lengths)[:-1]))
    bad = (offsets <= prior_offsets) | (positions < prior_ends) | (lengths <= 0)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        entry = (int(offsets[row]), int(positions[row]), int(lengths[row]))
        index.entry_error(at + row, entry, int(prior_offsets[row]), int(prior_ends[row]))
