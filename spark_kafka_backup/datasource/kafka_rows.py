"""Backed-up records as the rows of Spark's own Kafka source: the columns, their types, and the conversion from a
segment's decoded batch, column by column.

=============  ==================================  ===========================================================
column         Spark type (Arrow type)             value
=============  ==================================  ===========================================================
key            binary (binary)                     the key as stored; null for a null key
value          binary (binary)                     the value as stored; null for a null value (a tombstone)
topic          string (string)                     the backed-up topic (the directory name)
partition      int (int32)                         the backed-up partition
offset         long (int64)                        the record's offset at the source
timestamp      timestamp (timestamp[us, UTC])      the record's timestamp; null when it has none
timestampType  int (int32)                         0 CreateTime, 1 LogAppendTime, -1 none (Kafka's ids)
headers        array<struct<key:string,            the headers in order; null for a record without headers
               value:binary>>                      (as Spark's source gives them); a header value may be null
=============  ==================================  ===========================================================

A record stored as "CreateTime with a null timestamp" (type -2 on disk, written by Kafka Connect) reads as
``timestampType`` 0 with a null ``timestamp``. Spark's Kafka source turns Kafka's "no timestamp" (-1) into the
instant 1969-12-31T23:59:59.999Z; here it is null, which is what it means.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from spark_kafka_backup.errors import InvalidRecordError
from spark_kafka_backup.format.record_columns import binary_column
from spark_kafka_backup.partition.segment_batches import RecordBatch

#: The rows' schema, as Spark declares it (``DataSource.schema``). ``timestamp_ltz``: an instant, whatever the
#: session's ``spark.sql.timestampType`` makes of a bare ``timestamp``.
KAFKA_ROWS_DDL = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp_ltz, timestampType int, "
    "headers array<struct<key:string,value:binary>>"
)
#: The same, as Spark prints a schema (``StructType.simpleString``): a reader given another schema refuses it.
KAFKA_ROWS_SIMPLE = (
    "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,timestampType:int,"
    "headers:array<struct<key:string,value:binary>>>"
)

#: Spark keeps timestamps as int64 microseconds: milliseconds beyond this do not fit.
_MAX_MILLIS = (2**63 - 1) // 1000

HEADER_TYPE = pa.struct([("key", pa.string()), ("value", pa.binary())])

#: The same schema in Arrow: the first batch a reader yields must match it exactly.
KAFKA_ROWS_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
        ("headers", pa.list_(HEADER_TYPE)),
    ]
)


def kafka_rows(
    batch: RecordBatch,
    topic: str,
    partition: int,
    rows: npt.NDArray[np.int64] | None = None,
    columns: frozenset[str] | None = None,
) -> pa.RecordBatch:
    """``batch``'s records (only ``rows`` of them, in that order, when given) as :data:`KAFKA_ROWS_SCHEMA` rows; of
    ``key``, ``value``, ``headers``, ``timestamp`` and ``timestampType`` only those in ``columns`` (``None``: all;
    the two times go together), the others null (what a query that
    reads no key, value or header needs, without building them)."""
    c = batch.columns
    buf = np.frombuffer(batch.data, dtype=np.uint8)

    def pick(column: npt.NDArray[Any]) -> npt.NDArray[Any]:
        return column if rows is None else column[rows]

    def wanted(name: str) -> bool:
        return columns is None or name in columns

    n = len(c) if rows is None else len(rows)
    keys = (
        binary_column(buf, pick(c.key_starts), pick(c.key_lengths)).cast(pa.binary())
        if wanted("key")
        else pa.nulls(n, pa.binary())
    )
    values = (
        binary_column(buf, pick(c.value_starts), pick(c.value_lengths)).cast(pa.binary())
        if wanted("value")
        else pa.nulls(n, pa.binary())
    )
    if not wanted("timestamp") and not wanted("timestampType"):
        headers = _headers(batch, buf, pick(c.header_first), pick(c.header_counts)) if wanted("headers") else None
        return offset_rows(pick(c.offsets), topic, partition, keys=keys, values=values, headers=headers)
    kinds = pick(c.timestamp_types)
    has_time = (kinds == 0) | (kinds == 1)
    millis = np.where(has_time, pick(c.timestamps), 0).astype(np.int64)
    beyond = (millis > _MAX_MILLIS) | (millis < -_MAX_MILLIS)  # not abs: -2**63 has no positive int64
    if beyond.any():
        row = int(np.flatnonzero(beyond)[0])
        raise InvalidRecordError(
            f"topic {topic!r} partition {partition} offset {int(pick(c.offsets)[row])}: timestamp {int(millis[row])} "
            f"ms is beyond what Spark's timestamp type holds (+-{_MAX_MILLIS} ms); Spark's own Kafka source fails on "
            "it too (read it with cat)"
        )
    micros = millis * 1000
    stamps = pa.Array.from_buffers(
        KAFKA_ROWS_SCHEMA.field("timestamp").type, n, [_validity(has_time), pa.py_buffer(micros)]
    )
    kafka_kinds = np.where(kinds == -2, 0, kinds).astype(np.int32)
    return pa.RecordBatch.from_arrays(
        [
            keys,
            values,
            _repeated_text(topic, n),
            pa.array(np.full(n, partition, dtype=np.int32)),
            pa.array(np.asarray(pick(c.offsets), dtype=np.int64)),
            stamps,
            pa.array(kafka_kinds),
            _headers(batch, buf, pick(c.header_first), pick(c.header_counts))
            if wanted("headers")
            else pa.nulls(n, KAFKA_ROWS_SCHEMA.field("headers").type),
        ],
        schema=KAFKA_ROWS_SCHEMA,
    )


def offset_rows(
    offsets: npt.NDArray[np.int64],
    topic: str,
    partition: int,
    *,
    keys: pa.Array | None = None,
    values: pa.Array | None = None,
    headers: pa.Array | None = None,
) -> pa.RecordBatch:
    """Rows of records known by their offsets (a segment's index): ``key``, ``value``, ``headers`` as given (null
    when not), ``timestamp`` and ``timestampType`` null."""
    n = len(offsets)
    return pa.RecordBatch.from_arrays(
        [
            keys if keys is not None else pa.nulls(n, pa.binary()),
            values if values is not None else pa.nulls(n, pa.binary()),
            _repeated_text(topic, n),
            pa.array(np.full(n, partition, dtype=np.int32)),
            pa.array(np.asarray(offsets, dtype=np.int64)),
            pa.nulls(n, KAFKA_ROWS_SCHEMA.field("timestamp").type),
            pa.nulls(n, pa.int32()),
            headers if headers is not None else pa.nulls(n, KAFKA_ROWS_SCHEMA.field("headers").type),
        ],
        schema=KAFKA_ROWS_SCHEMA,
    )


def _headers(
    batch: RecordBatch, buf: npt.NDArray[np.uint8], firsts: npt.NDArray[np.int64], counts: npt.NDArray[np.int64]
) -> pa.Array:
    """Each record's headers as a list (null where it has none)."""
    c = batch.columns
    n = len(counts)
    counts = np.asarray(counts, dtype=np.int64)
    list_offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts, out=list_offsets[1:])
    total = int(list_offsets[-1])
    # Record i's headers are header_first[i] .. header_first[i] + counts[i] - 1 of the batch's header arrays.
    where = np.repeat(np.asarray(firsts, dtype=np.int64) - list_offsets[:-1], counts) + np.arange(total)
    names = binary_column(buf, c.header_key_starts[where], c.header_key_lengths[where]).cast(pa.string())
    header_values = binary_column(buf, c.header_value_starts[where], c.header_value_lengths[where]).cast(pa.binary())
    pairs = pa.StructArray.from_arrays([names, header_values], fields=list(HEADER_TYPE))
    return pa.ListArray.from_buffers(
        KAFKA_ROWS_SCHEMA.field("headers").type, n, [_validity(counts > 0), pa.py_buffer(list_offsets)],
        children=[pairs],
    )  # fmt: skip


def _validity(present: npt.NDArray[np.bool_]) -> pa.Buffer | None:
    return None if present.all() else pa.py_buffer(np.packbits(present, bitorder="little"))


def _repeated_text(text: str, n: int) -> pa.Array:
    """``n`` copies of ``text`` as one string column, without a Python object per row."""
    encoded = text.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * len(encoded)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(encoded * n)])
