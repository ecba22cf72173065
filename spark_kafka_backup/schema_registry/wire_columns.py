"""Moving schema ids to another registry's on Arrow columns, a batch of records at a time.

What :meth:`~spark_kafka_backup.schema_registry.wire.IdRewrite.record` does to one record (the reference), done to
the key and value columns of a batch with numpy: the rows in the wire format (five bytes or more, the first 0x00)
are found at once, their ids looked up in the id map as sorted arrays, and the four id bytes of the rows whose id
moves are written into a copy of the column's data (an id is always four bytes, so every value keeps its place).
A record the reference would stop at stops this too, with the reference's error, for the first such record in
the stream's order.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from spark_kafka_backup.errors import SchemaIdError
from spark_kafka_backup.format.arrow_binary import BinaryParts, binary_parts, with_data
from spark_kafka_backup.schema_registry.wire import HEADER_SIZE, MAGIC, IdRewrite, moved_id, unknown_id

Int64s = npt.NDArray[np.int64]

#: Where a record's first failing field sorts among the same record's: the reference looks at the key first.
_FIELD_ORDER = {"key": 0, "value": 1}


class ColumnIdRewrite:
    """An :class:`IdRewrite`, applied to columns (built once per task: the id map becomes two sorted arrays)."""

    def __init__(self, rewrite: IdRewrite) -> None:
        self.rewrite = rewrite
        old = sorted(rewrite.ids)
        self._old = np.array(old, dtype=np.int64)
        self._new = np.array([rewrite.ids[i] for i in old], dtype=np.int64)

    def apply(
        self,
        columns: pa.RecordBatch,
        *,
        topic: str,
        partitions: Int64s,
        offsets: Int64s,
        rank: Int64s | None = None,
    ) -> pa.RecordBatch:
        """``columns`` (``key`` and ``value`` binary) with their keys and values naming the target's ids.

        ``partitions`` and ``offsets`` name each row's record for an error; ``rank`` is each row's place in the
        stream when that is not the row order: the error is about the record that comes first.
        """
        rewritten, failure = self.apply_until(columns, topic=topic, partitions=partitions, offsets=offsets, rank=rank)
        if failure is not None:
            raise failure[1]
        return rewritten

    def apply_until(
        self,
        columns: pa.RecordBatch,
        *,
        topic: str,
        partitions: Int64s,
        offsets: Int64s,
        rank: Int64s | None = None,
    ) -> tuple[pa.RecordBatch, tuple[int, SchemaIdError] | None]:
        """:meth:`apply`, and instead of raising, the first record's failure with its place (its rank, or its row):
        the records before it are rewritten."""
        rewrite = self.rewrite
        fields = {"key": (rewrite.key, rewrite.check_key), "value": (rewrite.value, rewrite.check_value)}
        arrays = list(columns.columns)
        first: tuple[int, int, SchemaIdError] | None = None
        for what, (moves, checked) in fields.items():
            if not (moves or checked):
                continue
            at = columns.schema.get_field_index(what)
            arrays[at], failure = self._field(arrays[at], what, moves=moves, topic=topic,
                                              partitions=partitions, offsets=offsets, rank=rank)  # fmt: skip
            if failure is not None and (first is None or failure[:2] < first[:2]):
                first = failure
        rewritten = pa.RecordBatch.from_arrays(arrays, schema=columns.schema)
        return rewritten, (first[0], first[2]) if first is not None else None

    def _field(
        self,
        column: pa.Array,
        what: str,
        *,
        moves: bool,
        topic: str,
        partitions: Int64s,
        offsets: Int64s,
        rank: Int64s | None,
    ) -> tuple[pa.Array, tuple[int, int, SchemaIdError] | None]:
        if pa.types.is_binary(column.type):
            column = column.cast(pa.large_binary())
        parts = binary_parts(column)
        data = parts.data
        rows, ids = _wire_rows(parts)
        if not len(rows):
            return column, None
        place = np.minimum(np.searchsorted(self._old, ids), max(len(self._old) - 1, 0))
        known = (self._old[place] == ids) if len(self._old) else np.zeros(len(ids), dtype=np.bool_)
        new = np.where(known, self._new[place] if len(self._new) else ids, ids)
        if moves:  # an id the map lacks stops the restore (passes, lenient)
            bad = ~known if not self.rewrite.lenient else np.zeros(len(ids), dtype=np.bool_)
        else:  # an id that moves in a field not rewritten stops it
            bad = known & (new != ids)
        failure = None
        if bad.any():
            candidates = np.flatnonzero(bad)
            order = rank[rows[candidates]] if rank is not None else rows[candidates]
            worst = int(candidates[int(np.argmin(order))])
            row = int(rows[worst])
            partition, offset = int(partitions[row]), int(offsets[row])
            error = (
                unknown_id(int(ids[worst]), what, topic=topic, partition=partition, offset=offset)
                if moves
                else moved_id(int(ids[worst]), int(new[worst]), what, topic=topic, partition=partition, offset=offset)
            )
            failure = (int(rank[row]) if rank is not None else row, _FIELD_ORDER[what], error)
        if not moves:
            return column, failure
        moved = np.flatnonzero(known & (new != ids))
        if not len(moved):
            return column, failure
        written = data.copy()
        target = parts.starts[rows][moved]
        for byte, shift in enumerate((24, 16, 8, 0), start=1):
            written[target + byte] = ((new[moved] >> shift) & 0xFF).astype(np.uint8)
        return with_data(column, written), failure


def _wire_rows(parts: BinaryParts) -> tuple[Int64s, Int64s]:
    """The rows of a binary column in the wire format (five bytes or more, the first 0x00) and their ids."""
    data = parts.data
    framed = np.flatnonzero(parts.lengths >= HEADER_SIZE)
    rows = framed[data[parts.starts[framed]] == MAGIC]
    at = parts.starts[rows]
    ids = (
        (data[at + 1].astype(np.int64) << 24)
        | (data[at + 2].astype(np.int64) << 16)
        | (data[at + 3].astype(np.int64) << 8)
        | data[at + 4].astype(np.int64)
    )
    return rows, ids


def wire_schema_ids(column: pa.Array) -> Int64s:
    """The distinct schema ids that the values of a binary column in the wire format name, ascending (what the
    backup's tasks report, :mod:`spark_kafka_backup.schema_registry.seen_ids`)."""
    if not len(column):
        return np.zeros(0, dtype=np.int64)
    if pa.types.is_binary(column.type):
        column = column.cast(pa.large_binary())
    _, ids = _wire_rows(binary_parts(column))
    return np.unique(ids)
