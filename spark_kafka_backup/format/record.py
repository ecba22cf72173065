"""Codec for one record of a v1 segment records file.

Byte layout, all integers big-endian, no padding, no delimiter between
records::

    offset             int64    offset of the record in its source partition (>= 0)
    timestampType      int32    -1 no timestamp, 0 CreateTime, 1 LogAppendTime,
                                -2 CreateTime whose timestamp is null
    timestamp          int64    present only when timestampType is 0 or 1
    keyLength          int32    -1 for a null key, else the byte count
    key                keyLength bytes
    valueLength        int32    -1 for a null value, else the byte count
    value              valueLength bytes
    headerCount        int32    >= 0
    headerCount times:
      headerKeyLength    int32  >= 0 (a header key is never null, may be empty)
      headerKey          headerKeyLength bytes of UTF-8
      headerValueLength  int32  -1 for a null header value
      headerValue        headerValueLength bytes

The smallest record is 24 bytes (type -1, null key and value, no headers).
A records file is the magic byte ``0x01`` followed by records; this module
knows nothing of files: it encodes into a ``bytearray`` and decodes from any
bytes-like buffer, and takes an optional ``file`` label and ``base`` position
only to say where a problem is.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from enum import IntEnum
from typing import NamedTuple

import numpy as np

from spark_kafka_backup.errors import FormatError, InvalidRecordError, TruncatedError


class TimestampType(IntEnum):
    """The ``timestampType`` field. Values are the original's, on disk."""

    NO_TIMESTAMP = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1
    #: CreateTime whose timestamp was null in Kafka Connect; no timestamp field follows.
    CREATE_TIME_NULL = -2


#: A header is ``(key, value)``: the key is text, the value bytes or ``None``.
Header = tuple[str, bytes | None]


class Record(NamedTuple):
    """One Kafka record as stored in a v1 segment.

    ``timestamp`` is an ``int`` (milliseconds) for types 0 and 1 and ``None``
    for types -1 and -2. ``headers`` keeps stored order and duplicate keys.
    """

    offset: int
    timestamp_type: int
    timestamp: int | None
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


MIN_RECORD_SIZE = 24

_OFFSET_TYPE = struct.Struct(">qi")
_OFFSET_TYPE_TIME = struct.Struct(">qiq")
_HEAD_TIME_KEYLEN = struct.Struct(">qiqi")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_pack_i32 = _INT32.pack
_NULL_LENGTH = _pack_i32(-1)
_ZERO_COUNT = _pack_i32(0)
_TIMESTAMP_TYPES = frozenset(int(t) for t in TimestampType)

#: The fixed head of a record that has a timestamp, for the column codecs (numpy): the same fields as
#: ``_HEAD_TIME_KEYLEN``. A record without a timestamp leaves out :data:`TIMESTAMP_BYTES`.
HEAD_DTYPE = np.dtype([("offset", ">i8"), ("type", ">i4"), ("timestamp", ">i8"), ("key_length", ">i4")])
#: Bytes 8 to 20 from a record's start: its timestampType, then its timestamp (when it has one).
TYPE_AND_TIMESTAMP_BYTES = slice(_INT64.size, _OFFSET_TYPE_TIME.size)
#: Bytes 12 to 20: the timestamp of a record that has one.
TIMESTAMP_BYTES = slice(_OFFSET_TYPE.size, _OFFSET_TYPE_TIME.size)
if HEAD_DTYPE.itemsize != _HEAD_TIME_KEYLEN.size:
    raise ImportError("the record head's numpy layout differs from its struct layout")


#: Offsets of a record's type and timestamp bytes from its start (:data:`TYPE_AND_TIMESTAMP_BYTES`), for gathering.
TYPE_AND_TIMESTAMP_AT = np.arange(TYPE_AND_TIMESTAMP_BYTES.start, TYPE_AND_TIMESTAMP_BYTES.stop)


def widen_time_range(fields: np.ndarray, low: int | None, high: int | None) -> tuple[int | None, int | None]:
    """``low``/``high`` (the oldest and newest timestamp so far, ``None``: none yet) widened by the records whose
    :data:`TYPE_AND_TIMESTAMP_BYTES` are the rows of ``fields`` (``uint8``, 12 a row); only CreateTime and
    LogAppendTime records have a timestamp (the bytes of another are not one)."""
    kinds = fields[:, :4].copy().view(">i4").ravel()
    stamps = fields[:, 4:].copy().view(">i8").ravel()
    stamped = stamps[(kinds == 0) | (kinds == 1)]
    if len(stamped):
        chunk_low, chunk_high = int(stamped.min()), int(stamped.max())
        low = chunk_low if low is None else min(low, chunk_low)
        high = chunk_high if high is None else max(high, chunk_high)
    return low, high


def encode_record(record: Record) -> bytes:
    """Return the v1 bytes of ``record``."""
    out = bytearray()
    append_record(out, record)
    return bytes(out)


def append_record(out: bytearray, record: Record) -> int:
    """Append the v1 bytes of ``record`` to ``out``; return how many were added.

    On an invalid record ``out`` is left as it was and
    :class:`InvalidRecordError` says which field is wrong.
    """
    start = len(out)
    offset, ts_type, timestamp, key, value, headers = record
    try:
        if ts_type == 0 or ts_type == 1:
            if timestamp is None:
                raise InvalidRecordError(_explain(record))
            out += _OFFSET_TYPE_TIME.pack(offset, ts_type, timestamp)
        elif (ts_type == -1 or ts_type == -2) and timestamp is None:
            out += _OFFSET_TYPE.pack(offset, ts_type)
        else:
            raise InvalidRecordError(_explain(record))
        if offset < 0:
            raise InvalidRecordError(_explain(record))
        if key is None:
            out += _NULL_LENGTH
        else:
            out += _pack_i32(len(key))
            out += key
        if value is None:
            out += _NULL_LENGTH
        else:
            out += _pack_i32(len(value))
            out += value
        if headers:
            out += _pack_i32(len(headers))
            for hkey, hvalue in headers:
                hkey_bytes = hkey.encode()
                out += _pack_i32(len(hkey_bytes))
                out += hkey_bytes
                if hvalue is None:
                    out += _NULL_LENGTH
                else:
                    out += _pack_i32(len(hvalue))
                    out += hvalue
        else:
            out += _ZERO_COUNT
    except InvalidRecordError:
        del out[start:]
        raise
    except (struct.error, TypeError, ValueError, AttributeError, OverflowError) as exc:
        del out[start:]
        raise InvalidRecordError(_explain(record)) from exc
    return len(out) - start


def _explain(record: Record) -> str:
    """Say which field of ``record`` cannot be encoded (the slow path)."""
    offset, ts_type, timestamp, key, value, headers = record
    prefix = f"record at offset {offset!r}: "
    if not isinstance(offset, int) or not 0 <= offset < 2**63:
        return prefix + "offset must be an int in [0, 2**63)"
    if ts_type not in _TIMESTAMP_TYPES:
        return prefix + f"timestamp type must be one of -2, -1, 0, 1, not {ts_type!r}"
    if ts_type in (0, 1):
        if not isinstance(timestamp, int) or not -(2**63) <= timestamp < 2**63:
            return prefix + f"timestamp type {ts_type} needs an int64 timestamp, not {timestamp!r}"
    elif timestamp is not None:
        return prefix + f"timestamp type {ts_type} stores no timestamp, got {timestamp!r}"
    for name, field in (("key", key), ("value", value)):
        if field is not None and not isinstance(field, (bytes, bytearray, memoryview)):
            return prefix + f"{name} must be bytes or None, not {type(field).__name__}"
        if field is not None and len(field) >= 2**31:
            return prefix + f"{name} of {len(field)} bytes exceeds int32"
    if not isinstance(headers, (tuple, list)):
        return prefix + "headers must be a sequence of (str, bytes | None) pairs"
    for index, header in enumerate(headers):
        if not isinstance(header, (tuple, list)) or len(header) != 2:
            return prefix + f"header {index} must be a (key, value) pair"
        hkey, hvalue = header
        if not isinstance(hkey, str):
            return prefix + f"header {index} key must be str, not {type(hkey).__name__}"
        try:
            hkey.encode()
        except UnicodeEncodeError:
            return prefix + f"header {index} key {hkey!r} is not encodable as UTF-8"
        if hvalue is not None and not isinstance(hvalue, (bytes, bytearray, memoryview)):
            return prefix + f"header {index} value must be bytes or None"
    return prefix + "cannot be encoded"


def decode_record(
    data: bytes | bytearray | memoryview,
    position: int = 0,
    *,
    file: str | None = None,
    base: int = 0,
) -> tuple[Record, int]:
    """Decode the record starting at ``position``; return it and where it ends.

    ``base`` is added to positions in error messages (the buffer's offset in
    ``file``).
    """
    for record, start, length in decode_records(data, position, len(data), file=file, base=base):
        return record, start + length
    raise TruncatedError(
        "record expected",
        file=file or "<bytes>",
        position=base + position,
        expected=f"at least {MIN_RECORD_SIZE} bytes",
        found="end of data",
    )


def decode_records(
    data: bytes | bytearray | memoryview,
    start: int,
    end: int,
    *,
    file: str | None = None,
    base: int = 0,
    more: int = 0,
) -> Iterator[tuple[Record, int, int]]:
    """Yield ``(record, position, length)`` for each record in ``data[start:end]``.

    ``more`` is how many bytes the source holds beyond ``end`` that are not in
    ``data`` (a chunked reader's unread rest). With ``more == 0`` records must
    fill the range exactly. With ``more > 0`` a trailing incomplete record
    ends the iteration silently so the caller can read on and call again,
    unless one of its lengths exceeds even the unread rest: that is corruption
    and raises at once. Every length is checked before any slice is taken,
    so a corrupt length never allocates more than the source holds.
    """
    label = file or "<bytes>"
    buf = data if isinstance(data, bytes) else bytes(data)
    unpack_head = _OFFSET_TYPE.unpack_from
    unpack_head_time = _HEAD_TIME_KEYLEN.unpack_from
    unpack_i64 = _INT64.unpack_from
    unpack_i32 = _INT32.unpack_from
    new_record = tuple.__new__
    p = start
    while p < end:
        record_start = p
        try:
            if end - p >= 24:
                # Common case: offset, type, timestamp and key length in one call.
                offset, ts_type, timestamp, n = unpack_head_time(buf, p)
                if ts_type == 0 or ts_type == 1:
                    p += 24
                    fused = True
                else:
                    timestamp = None
                    p += 12
                    fused = False
            else:
                if end - p < 12:
                    raise _ShortFieldError(p, 12)
                offset, ts_type = unpack_head(buf, p)
                p += 12
                fused = False
                if ts_type == 0 or ts_type == 1:
                    if end - p < 8:
                        raise _ShortFieldError(p, 8)
                    timestamp = unpack_i64(buf, p)[0]
                    p += 8
                else:
                    timestamp = None
            if ts_type != 0 and ts_type != 1 and ts_type != -1 and ts_type != -2:
                raise FormatError(
                    "unknown timestamp type",
                    file=label,
                    position=base + record_start + 8,
                    expected="-2, -1, 0 or 1",
                    found=str(ts_type),
                )
            if offset < 0:
                raise FormatError(
                    "negative record offset",
                    file=label,
                    position=base + record_start,
                    expected="an offset >= 0",
                    found=str(offset),
                )
            # Key and value are decoded by the same lines written out twice (and
            # headers once more): a helper call per field costs ~15% of decode
            # throughput on this hot path.
            if not fused:
                if end - p < 4:
                    raise _ShortFieldError(p, 4)
                n = unpack_i32(buf, p)[0]
                p += 4
            if n == -1:  # type: ignore[possibly-undefined]  # set by the fused read or the lines above
                key = None
            else:
                if n < 0 or n > end - p:
                    raise _BadLengthError(p - 4, n, end - p, "key")
                key = buf[p : p + n]
                p += n
            if end - p < 4:
                raise _ShortFieldError(p, 4)
            n = unpack_i32(buf, p)[0]
            p += 4
            if n == -1:
                value = None
            else:
                if n < 0 or n > end - p:
                    raise _BadLengthError(p - 4, n, end - p, "value")
                value = buf[p : p + n]
                p += n
            if end - p < 4:
                raise _ShortFieldError(p, 4)
            count = unpack_i32(buf, p)[0]
            p += 4
            if count == 0:
                headers: tuple[Header, ...] = ()
            else:
                # Each header takes at least 8 bytes: refuse a count the
                # remaining bytes cannot hold before looping over it.
                if count < 0 or count * 8 > end - p:
                    raise _BadLengthError(p - 4, count, end - p, "header count", unit=8)
                items: list[Header] = []
                for _ in range(count):
                    if end - p < 4:
                        raise _ShortFieldError(p, 4)
                    n = unpack_i32(buf, p)[0]
                    p += 4
                    if n < 0 or n > end - p:
                        raise _BadLengthError(p - 4, n, end - p, "header key", nullable=False)
                    try:
                        hkey = buf[p : p + n].decode()
                    except UnicodeDecodeError as exc:
                        raise FormatError(
                            "header key is not valid UTF-8",
                            file=label,
                            position=base + p + exc.start,
                            expected="UTF-8 text",
                            found=repr(buf[p : p + n][:40]),
                        ) from exc
                    p += n
                    if end - p < 4:
                        raise _ShortFieldError(p, 4)
                    n = unpack_i32(buf, p)[0]
                    p += 4
                    if n == -1:
                        items.append((hkey, None))
                    else:
                        if n < 0 or n > end - p:
                            raise _BadLengthError(p - 4, n, end - p, "header value")
                        items.append((hkey, buf[p : p + n]))
                        p += n
                headers = tuple(items)
        except _ShortFieldError as short:
            if more > 0:
                return
            raise TruncatedError(
                f"record at byte {base + record_start} is cut short",
                file=label,
                position=base + short.position,
                expected=f"{short.needed} more bytes",
                found=f"{end - short.position} before the end",
            ) from short
        except _BadLengthError as bad:
            if bad.length >= 0 and more > 0 and bad.length * bad.unit <= bad.left + more:
                return
            bad.left += more
            raise bad.to_error(label, base) from bad
        yield (
            new_record(Record, (offset, ts_type, timestamp, key, value, headers)),
            record_start,
            p - record_start,
        )


class _ShortFieldError(Exception):
    """Internal: a fixed-size field does not fit in the bytes left."""

    def __init__(self, position: int, needed: int) -> None:
        self.position = position
        self.needed = needed


class _BadLengthError(Exception):
    """Internal: a length field is negative or reaches past the end."""

    def __init__(
        self,
        position: int,
        length: int,
        left: int,
        field: str,
        *,
        nullable: bool = True,
        unit: int = 1,
    ) -> None:
        self.position = position
        self.length = length
        self.left = left
        self.field = field
        self.nullable = nullable
        self.unit = unit

    def to_error(self, file: str, base: int) -> FormatError:
        allowed = "-1 or a length >= 0" if self.nullable else "a length >= 0"
        if self.field == "header count":
            allowed = "a count >= 0"
        if self.length < 0:
            return FormatError(
                f"invalid {self.field} length",
                file=file,
                position=base + self.position,
                expected=allowed,
                found=str(self.length),
            )
        need = self.length * self.unit
        return TruncatedError(
            f"{self.field} length reaches past the end of the data",
            file=file,
            position=base + self.position,
            expected=f"at most {self.left // self.unit} ({self.left} bytes left)"
            if self.unit > 1
            else f"at most {self.left} bytes",
            found=f"{self.length}" + (f" (>= {need} bytes)" if self.unit > 1 else ""),
        )
