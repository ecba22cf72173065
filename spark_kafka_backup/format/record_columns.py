"""Columnar codec of v1 records: Arrow columns in, segment bytes out, and back.

The byte layout is the one :mod:`spark_kafka_backup.format.record` documents; that
scalar codec is the reference and this module must produce and accept exactly
the same bytes (``tests/unit/test_record_columns.py`` checks it on random batches).
Here no Python object is built per record:

Encoding (:func:`encode_columns`) writes each record as six pieces placed side
by side by one Arrow kernel (``binary_join_element_wise``)::

    head       offset int64, timestampType int32, [timestamp int64], keyLength int32
               (one numpy structured row per record; the 8 timestamp bytes are
               dropped, by one boolean mask, from records of type -1 and -2)
    key        the key bytes, straight from the Arrow data buffer (none when null)
    valueLen   int32
    value      the value bytes (none when null)
    count      headerCount int32
    headers    per header keyLength, key, valueLength, value, built the same way
               and joined per record by ``binary_join`` over the header lists

The result is one buffer holding every record back to back and the per-record
lengths, from which a writer derives positions by prefix sum.

Decoding (:func:`decode_columns`) goes the other way, guided by the segment
index: the index already says where each record starts and how long it is,
so every field's position follows from the fields before it by array
arithmetic, one "round" per field (and one per header for records that have
that many). Every length is checked against the record's indexed length
before it is used, so a corrupt length cannot send a read outside its record.
Where the compiled scanner is built (``_native/records.c``, at install with the
system compiler), it finds the same positions in one C pass, without the GIL,
and answers only for batches that are wholly valid: any violation sends the
batch through the numpy decoding, which names it (the two are compared on
random and damaged batches in ``tests/unit/test_record_columns.py``).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from spark_kafka_backup.errors import FormatError, InvalidRecordError, TruncatedError
from spark_kafka_backup.format.record import HEAD_DTYPE, TIMESTAMP_BYTES
from spark_kafka_backup.format.segment_index import ENTRY_DTYPE


def _compiled_scanner() -> ModuleType | None:
    """The compiled scanner, built at install where a C compiler is found (else numpy decodes alone)."""
    try:
        return importlib.import_module("spark_kafka_backup.format._native_records")
    except ImportError:
        return None


_native_records = _compiled_scanner()

Int64s = npt.NDArray[np.int64]

#: The fixed head of a record with a timestamp; records without one leave out bytes 12..19.
_HEAD_SIZE = HEAD_DTYPE.itemsize
_INT32_BE = np.dtype(">i4")
_VALID_TYPES = np.array([-2, -1, 0, 1], dtype=np.int32)
#: Header slots decoded as whole-batch array rounds; headers past this many in one record go one by one.
HEADER_ROUNDS = 16
_EMPTY = pa.scalar(b"", pa.large_binary())


@dataclass(frozen=True)
class EncodedRecords:
    """Records of one partition encoded back to back.

    ``data`` holds them all; record ``i`` is ``data[bounds[i]:bounds[i + 1]]``
    (``bounds[0]`` is 0). ``offsets`` are the records' Kafka offsets, in the
    order given.
    """

    offsets: Int64s
    bounds: Int64s
    data: memoryview

    @property
    def lengths(self) -> Int64s:
        return np.diff(self.bounds)

    def __len__(self) -> int:
        return len(self.offsets)

    def slice(self, start: int, stop: int) -> EncodedRecords:
        """Records ``start .. stop - 1``, sharing this one's bytes."""
        first, last = int(self.bounds[start]), int(self.bounds[stop])
        return EncodedRecords(self.offsets[start:stop], self.bounds[start : stop + 1] - first, self.data[first:last])


def encode_columns(
    offsets: Int64s,
    timestamp_types: npt.NDArray[np.int32],
    timestamps: Int64s,
    keys: pa.Array,
    values: pa.Array,
    headers: pa.Array | None = None,
) -> EncodedRecords:
    """Encode records given as columns; the same bytes as :func:`~spark_kafka_backup.format.record.append_record`.

    ``timestamp_types`` are v1 types (-2, -1, 0, 1); ``timestamps`` are
    milliseconds and only read where the type is 0 or 1. ``keys`` and
    ``values`` are (large) binary arrays, null for a null field. ``headers``
    is a list of ``struct<key: string, value: binary>`` (a null list means no
    headers), or ``None`` when no record has headers. An invalid record
    raises :class:`InvalidRecordError` naming its offset.
    """
    n = len(offsets)
    offsets = np.asarray(offsets, dtype=np.int64)
    types = np.asarray(timestamp_types, dtype=np.int32)
    if not (len(types) == len(timestamps) == len(keys) == len(values) == n) or (
        headers is not None and len(headers) != n
    ):
        raise ValueError("every column must have one entry per record")
    _check_fields(offsets, types)
    if n == 0:
        return EncodedRecords(offsets, np.zeros(1, dtype=np.int64), memoryview(b""))

    key_lengths = _lengths(keys)
    head = np.empty(n, dtype=HEAD_DTYPE)
    head["offset"] = offsets
    head["type"] = types
    head["timestamp"] = timestamps
    head["key_length"] = key_lengths
    has_time = (types == 0) | (types == 1)
    head_bytes = head.view(np.uint8).reshape(n, _HEAD_SIZE)
    if has_time.all():
        head_array = _fixed_width(head_bytes.reshape(-1), _HEAD_SIZE, n)
    else:
        keep = np.ones((n, _HEAD_SIZE), dtype=bool)
        keep[~has_time, TIMESTAMP_BYTES] = False
        head_lengths = np.where(has_time, _HEAD_SIZE, _HEAD_SIZE - (TIMESTAMP_BYTES.stop - TIMESTAMP_BYTES.start))
        head_array = _variable_width(head_bytes[keep], head_lengths)

    counts, header_blobs = _encode_headers(offsets, headers)
    pieces = [
        head_array,
        _large(keys),
        _int32_column(_lengths(values)),
        _large(values),
        _int32_column(counts),
    ]
    if header_blobs is not None:
        pieces.append(header_blobs)
    joined = pc.binary_join_element_wise(*pieces, _EMPTY, null_handling="replace", null_replacement=b"")
    bounds = np.frombuffer(joined.buffers()[1], dtype=np.int64, count=n + 1, offset=joined.offset * 8)
    data = joined.buffers()[2]
    start, end = int(bounds[0]), int(bounds[-1])
    # Arrow buffers export signed chars ("b"); bytes compare equal only to an unsigned ("B") view.
    view = memoryview(data).cast("B")[start:end] if data is not None else memoryview(b"")
    return EncodedRecords(offsets, bounds - start, view)


def _check_fields(offsets: Int64s, types: npt.NDArray[np.int32]) -> None:
    bad = np.flatnonzero((offsets < 0) | ~np.isin(types, _VALID_TYPES))
    if len(bad):
        at = int(bad[0])
        if offsets[at] < 0:
            raise InvalidRecordError(f"record at offset {int(offsets[at])}: offset must be an int in [0, 2**63)")
        raise InvalidRecordError(
            f"record at offset {int(offsets[at])}: timestamp type must be one of -2, -1, 0, 1, not {int(types[at])}"
        )


def _encode_headers(offsets: Int64s, headers: pa.Array | None) -> tuple[npt.NDArray[np.int32], pa.Array | None]:
    """Per-record header counts and, when any record has headers, their encoded bytes per record."""
    n = len(offsets)
    if headers is None:
        return np.zeros(n, dtype=np.int32), None
    counts = pc.list_value_length(headers).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int32)
    total = int(counts.sum())
    if total == 0:
        return counts, None
    flat = pc.list_flatten(headers)
    header_keys = pc.struct_field(flat, "key")
    header_values = pc.struct_field(flat, "value")
    if header_keys.null_count or flat.null_count:
        missing = np.flatnonzero(
            header_keys.is_null().to_numpy(zero_copy_only=False) | flat.is_null().to_numpy(zero_copy_only=False)
        )[0]
        owner = int(np.searchsorted(np.cumsum(counts), missing, side="right"))
        raise InvalidRecordError(
            f"record at offset {int(offsets[owner])}: header {int(missing - (counts[:owner].sum()))} "
            "key must be str, not NoneType"
        )
    each = pc.binary_join_element_wise(
        _int32_column(_lengths(header_keys)),
        header_keys.cast(pa.large_binary()),
        _int32_column(_lengths(header_values)),
        _large(header_values),
        _EMPTY,
        null_handling="replace",
        null_replacement=b"",
    )
    bounds = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=bounds[1:])
    per_record = pa.LargeListArray.from_arrays(pa.array(bounds), each)
    return counts, pc.binary_join(per_record, _EMPTY)


def _lengths(column: pa.Array) -> npt.NDArray[np.int32]:
    """Byte lengths of a binary or string column, -1 for null."""
    lengths: npt.NDArray[np.int32] = pc.binary_length(column).fill_null(-1).to_numpy(zero_copy_only=False)
    return lengths.astype(np.int32, copy=False)


def _large(column: pa.Array) -> pa.Array:
    return column if column.type == pa.large_binary() else column.cast(pa.large_binary())


def _int32_column(values: npt.NDArray[np.int32]) -> pa.Array:
    """Each int32 as its 4 big-endian bytes, as a binary column."""
    raw = np.ascontiguousarray(values, dtype=_INT32_BE).view(np.uint8)
    return _fixed_width(raw, 4, len(values))


def _fixed_width(raw: npt.NDArray[np.uint8], width: int, n: int) -> pa.Array:
    bounds = np.arange(0, width * n + 1, width, dtype=np.int64)
    return pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(bounds), pa.py_buffer(raw)])


def _variable_width(raw: npt.NDArray[np.uint8], lengths: npt.NDArray[np.int64]) -> pa.Array:
    bounds = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=bounds[1:])
    return pa.Array.from_buffers(
        pa.large_binary(), len(lengths), [None, pa.py_buffer(bounds), pa.py_buffer(np.ascontiguousarray(raw))]
    )


def index_entries(offsets: Int64s, positions: Int64s, lengths: Int64s) -> bytes:
    """The 24-byte segment index entries (offset, position, length, big-endian) of records."""
    entries = np.empty(len(offsets), dtype=ENTRY_DTYPE)
    entries["offset"] = offsets
    entries["position"] = positions
    entries["length"] = lengths
    return entries.tobytes()


# -- decoding ---------------------------------------------------------------


@dataclass(frozen=True)
class DecodedRecords:
    """Records as columns of positions into the buffer they were decoded from.

    For record ``i``: ``key_starts[i]``/``key_lengths[i]`` (length -1: a null
    key), the same for values, ``timestamps[i]`` (meaningful for types 0 and
    1), and its headers ``header_first[i] .. header_first[i] + header_counts[i]``
    in the ``header_*`` arrays. Positions are into the decoded buffer.
    """

    offsets: Int64s
    timestamp_types: npt.NDArray[np.int32]
    timestamps: Int64s
    key_starts: Int64s
    key_lengths: Int64s
    value_starts: Int64s
    value_lengths: Int64s
    header_counts: Int64s
    header_first: Int64s
    header_key_starts: Int64s
    header_key_lengths: Int64s
    header_value_starts: Int64s
    header_value_lengths: Int64s

    def __len__(self) -> int:
        return len(self.offsets)


def decode_columns(
    data: bytes | bytearray | memoryview,
    offsets: Int64s,
    positions: Int64s,
    lengths: Int64s,
    *,
    file: str | None = None,
    base: int = 0,
    compiled: bool = True,
) -> DecodedRecords:
    """Decode the records an index names: record ``i`` is ``data[positions[i] - base :][: lengths[i]]``.

    ``base`` is the file position of ``data[0]``. Each record must fill its
    indexed length exactly and carry its indexed offset; header keys must be
    UTF-8. The first violation raises a :class:`FormatError` (or
    :class:`TruncatedError`) naming ``file`` and the byte position.
    ``compiled=False`` decodes with numpy alone (the reference of the compiled scanner).
    """
    label = file or "<bytes>"
    buf = np.frombuffer(data, dtype=np.uint8)
    offsets = np.asarray(offsets, dtype=np.int64)
    starts = np.asarray(positions, dtype=np.int64) - base
    lengths = np.asarray(lengths, dtype=np.int64)
    n = len(offsets)
    ends = starts + lengths
    # (ends < starts: a length so large that the end wrapped around)
    if n and (starts.min() < 0 or lengths.min() < 0 or ends.max() > len(buf) or (ends < starts).any()):
        row = int(np.flatnonzero((starts < 0) | (lengths < 0) | (ends > len(buf)) | (ends < starts))[0])
        raise TruncatedError(
            f"record at offset {int(offsets[row])} lies outside the bytes read",
            file=label,
            position=int(positions[row]),
            expected=f"{int(lengths[row])} bytes",
            found=f"{max(0, len(buf) - int(starts[row]))} bytes",
        )
    if compiled and _native_records is not None and n:
        found = _scanned(data, offsets, starts, ends)
        if found is not None:
            return found
    cursor = _Cursor(buf, starts, ends, offsets, label, base)
    stored_offsets = cursor.int64(0, "offset")
    types = cursor.int32(8, "timestamp type").astype(np.int32)
    has_time = (types == 0) | (types == 1)
    bad = np.flatnonzero(~np.isin(types, _VALID_TYPES) | (stored_offsets != offsets))
    if len(bad):
        row = int(bad[0])
        if not np.isin(types[row], _VALID_TYPES):
            raise FormatError(
                "unknown timestamp type",
                file=label,
                position=int(starts[row]) + base + 8,
                expected="-2, -1, 0 or 1",
                found=str(int(types[row])),
            )
        raise FormatError(
            "record offset differs from its index entry",
            file=label,
            position=int(starts[row]) + base,
            expected=str(int(offsets[row])),
            found=str(int(stored_offsets[row])),
        )
    timestamps = np.zeros(n, dtype=np.int64)
    if has_time.any():
        timestamps[has_time] = cursor.int64_at(starts[has_time] + 12, ends[has_time], offsets[has_time], "timestamp")
    at = starts + np.where(has_time, 20, 12)
    key_lengths, key_starts, at = cursor.field(at, "key")
    value_lengths, value_starts, at = cursor.field(at, "value")
    counts = cursor.int64_at(at, ends, offsets, "header count", width=4)
    at = at + 4
    if (counts < 0).any() or (counts * 8 > ends - at).any():
        i = int(np.flatnonzero((counts < 0) | (counts * 8 > ends - at))[0])
        raise FormatError(
            "invalid header count",
            file=label,
            position=int(at[i]) - 4 + base,
            expected=f"a count >= 0 that fits the record's {int(lengths[i])} bytes",
            found=str(int(counts[i])),
        )
    header_first = np.zeros(n, dtype=np.int64)
    np.cumsum(counts[:-1], out=header_first[1:])
    total = int(counts.sum()) if n else 0
    hk_starts = np.zeros(total, dtype=np.int64)
    hk_lengths = np.zeros(total, dtype=np.int64)
    hv_starts = np.zeros(total, dtype=np.int64)
    hv_lengths = np.zeros(total, dtype=np.int64)
    # Header i of every record that has more than i headers, as arrays: one round per header slot, over the
    # records with that many (a prefix of the records sorted by header count). Past HEADER_ROUNDS the few
    # records with that many headers finish one header at a time.
    order = np.argsort(-counts, kind="stable")
    descending = -counts[order]
    rounds = min(int(counts.max()) if total else 0, HEADER_ROUNDS)
    for round_ in range(rounds):
        rows = order[: int(np.searchsorted(descending, -round_, side="left"))]
        slot = header_first[rows] + round_
        klen, kstart, after = cursor.field(at[rows], "header key", nullable=False, rows=rows)
        vlen, vstart, after = cursor.field(after, "header value", rows=rows)
        hk_starts[slot], hk_lengths[slot] = kstart, klen
        hv_starts[slot], hv_lengths[slot] = vstart, vlen
        at[rows] = after
    many = order[: int(np.searchsorted(descending, -rounds, side="left"))].tolist() if total else []
    for row in many:
        slots = range(int(header_first[row]) + rounds, int(header_first[row] + counts[row]))
        position = _headers_one_by_one(buf, int(at[row]), int(ends[row]), slots, hk_starts, hk_lengths, hv_starts,
                                       hv_lengths, cursor, row)  # fmt: skip
        at[row] = position
    if (at != ends).any():
        i = int(np.flatnonzero(at != ends)[0])
        raise FormatError(
            "record does not fill its indexed length",
            file=label,
            position=int(at[i]) + base,
            expected=f"the record to end at byte {int(ends[i]) + base}",
            found=f"it ends at byte {int(at[i]) + base}",
        )
    if total:
        _check_utf8(buf, hk_starts, hk_lengths, label, base)
    return DecodedRecords(
        offsets,
        types,
        timestamps,
        key_starts,
        key_lengths,
        value_starts,
        value_lengths,
        counts,
        header_first,
        hk_starts,
        hk_lengths,
        hv_starts,
        hv_lengths,
    )


def _scanned(
    data: bytes | bytearray | memoryview, offsets: Int64s, starts: Int64s, ends: Int64s
) -> DecodedRecords | None:
    """The records' positions from the compiled scanner; ``None`` when a record is not valid (the caller's numpy
    decoding then names what is wrong)."""
    assert _native_records is not None
    n = len(offsets)
    starts = np.ascontiguousarray(starts, dtype=np.int64)
    ends = np.ascontiguousarray(ends, dtype=np.int64)
    fixed = np.empty(8 * n, dtype=np.int64)
    total = _native_records.scan(data, starts, ends, np.ascontiguousarray(offsets, dtype=np.int64), fixed)
    if total < 0:
        return None
    headers = np.empty(4 * total, dtype=np.int64)
    if total and _native_records.headers(data, starts, ends, fixed, headers) < 0:
        return None
    f = fixed.reshape(8, n)
    h = headers.reshape(4, total)
    return DecodedRecords(offsets, f[0].astype(np.int32), f[1], f[2], f[3], f[4], f[5], f[6], f[7], h[0], h[1], h[2],
                          h[3])  # fmt: skip


class _Cursor:
    """Big-endian integer gathers at per-record positions, bounded by each record's end."""

    def __init__(self, buf: npt.NDArray[np.uint8], starts: Int64s, ends: Int64s, offsets: Int64s, file: str, base: int):
        self.buf, self.starts, self.ends, self.offsets, self.file, self.base = buf, starts, ends, offsets, file, base
        # Every byte position as the start of an int32 and of an int64: one gather reads a field of many records.
        self.views = {width: _unaligned(buf, width) for width in (4, 8)}

    def int64(self, delta: int, what: str) -> Int64s:
        return self.int64_at(self.starts + delta, self.ends, self.offsets, what)

    def int32(self, delta: int, what: str) -> Int64s:
        return self.int64_at(self.starts + delta, self.ends, self.offsets, what, width=4)

    def int64_at(self, at: Int64s, ends: Int64s, offsets: Int64s, what: str, *, width: int = 8) -> Int64s:
        short = at + width > ends
        if short.any():
            i = int(np.flatnonzero(short)[0])
            raise TruncatedError(
                f"record at offset {int(offsets[i])} is cut short",
                file=self.file,
                position=int(at[i]) + self.base,
                expected=f"{width} bytes of {what}",
                found=f"{max(0, int(ends[i] - at[i]))} before the record's indexed end",
            )
        return self.views[width][at].astype(np.int64)

    def field(
        self, at: Int64s, what: str, *, nullable: bool = True, rows: Int64s | None = None
    ) -> tuple[Int64s, Int64s, Int64s]:
        """A length-prefixed field at ``at`` (of the records ``rows``, default all): lengths, starts, what follows."""
        ends = self.ends if rows is None else self.ends[rows]
        offsets = self.offsets if rows is None else self.offsets[rows]
        lengths = self.int64_at(at, ends, offsets, f"{what} length", width=4)
        starts = at + 4
        bad = (lengths < (-1 if nullable else 0)) | (lengths > ends - starts)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            allowed = "-1 or a length >= 0" if nullable else "a length >= 0"
            if lengths[i] >= 0:
                raise TruncatedError(
                    f"{what} length reaches past the end of the record",
                    file=self.file,
                    position=int(at[i]) + self.base,
                    expected=f"at most {int(ends[i] - starts[i])} bytes",
                    found=str(int(lengths[i])),
                )
            raise FormatError(
                f"invalid {what} length",
                file=self.file,
                position=int(at[i]) + self.base,
                expected=allowed,
                found=str(int(lengths[i])),
            )
        return lengths, starts, starts + np.maximum(lengths, 0)


def _headers_one_by_one(
    buf: npt.NDArray[np.uint8],
    position: int,
    end: int,
    slots: range,
    key_starts: Int64s,
    key_lengths: Int64s,
    value_starts: Int64s,
    value_lengths: Int64s,
    cursor: _Cursor,
    row: int,
) -> int:
    """The headers of one record in ``slots`` (those past the array rounds), read with plain integers.

    A length that does not fit goes through the cursor's array check, which raises the error it names.
    """
    data = buf.data
    for slot in slots:
        for name, nullable, starts, lengths in (
            ("header key", False, key_starts, key_lengths),
            ("header value", True, value_starts, value_lengths),
        ):
            length = int.from_bytes(data[position : position + 4], "big", signed=True) if position + 4 <= end else None
            if length is None or length < (-1 if nullable else 0) or length > end - position - 4:
                cursor.field(np.array([position]), name, nullable=nullable, rows=np.array([row]))  # raises
            assert length is not None
            starts[slot], lengths[slot] = position + 4, length
            position += 4 + max(length, 0)
    return position


def _unaligned(buf: npt.NDArray[np.uint8], width: int) -> npt.NDArray[np.int64]:
    """A big-endian integer of ``width`` bytes starting at every byte of ``buf`` (a strided view, no copy)."""
    count = max(0, len(buf) - width + 1)
    if count == 0:
        return np.zeros(0, dtype=f">i{width}")
    return np.ndarray(shape=(count,), dtype=f">i{width}", buffer=buf, strides=(1,))


def _check_utf8(buf: npt.NDArray[np.uint8], starts: Int64s, lengths: Int64s, file: str, base: int) -> None:
    """Header keys must be UTF-8: validated by Arrow over all keys at once."""
    try:
        binary_column(buf, starts, lengths).cast(pa.large_string())
    except pa.ArrowInvalid:
        for i in range(len(lengths)):
            raw = bytes(buf[starts[i] : starts[i] + lengths[i]])
            try:
                raw.decode()
            except UnicodeDecodeError as exc:
                raise FormatError(
                    "header key is not valid UTF-8",
                    file=file,
                    position=int(starts[i]) + base + exc.start,
                    expected="UTF-8 text",
                    found=repr(raw[:40]),
                ) from exc
        raise


def gather(buf: npt.NDArray[np.uint8], starts: Int64s, lengths: Int64s) -> npt.NDArray[np.uint8]:
    """The bytes of every ``(start, length)`` slice of ``buf`` back to back (null slices, -1, give none)."""
    sizes = np.maximum(lengths, 0)
    total = int(sizes.sum())
    if total == 0:
        return np.zeros(0, dtype=np.uint8)
    firsts = np.zeros(len(sizes), dtype=np.int64)
    np.cumsum(sizes[:-1], out=firsts[1:])
    index = np.arange(total, dtype=np.int64)
    index += np.repeat(starts - firsts, sizes)
    return buf[index]


def binary_column(buf: npt.NDArray[np.uint8], starts: Int64s, lengths: Int64s) -> pa.Array:
    """The slices as an Arrow large binary column; length -1 is null.

    Slices that follow each other in ``buf`` without overlapping (a field of
    consecutive records) are cut by Arrow's ``take`` from a column that spans
    ``buf``, slices and the bytes between them alternating; others are gathered
    byte by byte.
    """
    n = len(starts)
    sizes = np.maximum(lengths, 0)
    nulls = lengths < 0
    validity = pa.py_buffer(np.packbits(~nulls, bitorder="little")) if nulls.any() else None
    ends = starts + sizes
    if n and bool((starts[1:] >= ends[:-1]).all()):
        bounds = np.empty(2 * n, dtype=np.int64)
        bounds[0::2] = starts
        bounds[1::2] = ends
        spans = pa.Array.from_buffers(pa.large_binary(), 2 * n - 1, [None, pa.py_buffer(bounds), pa.py_buffer(buf)])
        taken = spans.take(pa.array(np.arange(0, 2 * n, 2, dtype=np.int64)))
        if validity is None:
            return taken
        return pa.Array.from_buffers(
            pa.large_binary(), n, [validity, *taken.buffers()[1:]], null_count=int(nulls.sum()), offset=taken.offset
        )
    bounds = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(sizes, out=bounds[1:])
    return pa.Array.from_buffers(
        pa.large_binary(),
        n,
        [validity, pa.py_buffer(bounds), pa.py_buffer(gather(buf, starts, lengths))],
        null_count=int(nulls.sum()),
    )
