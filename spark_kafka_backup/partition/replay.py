"""Replayed records: a record at or below the last stored offset must be stored with the same bytes.

A replay after a crash re-appends records the backup already holds; each is compared with what is stored (a no-op
when identical, :class:`~spark_kafka_backup.errors.OffsetConflictError` when different,
:class:`~spark_kafka_backup.errors.PlacementError` when not stored at all). Runs are compared in columns: one read of
the stored span, one comparison of bytes, and record by record only where they differ.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import numpy.typing as npt

from spark_kafka_backup.errors import OffsetConflictError, PlacementError
from spark_kafka_backup.format.record_columns import EncodedRecords, gather
from spark_kafka_backup.format.segment_index import ENTRY_DTYPE
from spark_kafka_backup.partition.segment_reader import SegmentIndexFile
from spark_kafka_backup.storage import ReadHandle


def check_replayed(
    topic: str, partition: int, offset: int, encoded: bytes, stored: bytes | None, last: int | None
) -> None:
    """Raise unless a replayed record (``offset`` at or below ``last``, ``encoded``) is stored as ``stored`` bytes."""
    if stored is None:
        raise PlacementError(
            f"offset is below the last stored offset {last} and is not in the backup (offsets must increase)",
            topic=topic,
            partition=partition,
            offset=offset,
        )
    if stored != encoded:
        raise OffsetConflictError(
            "offset is already stored with different content", topic=topic, partition=partition, offset=offset
        )


def increasing_runs(batch: EncodedRecords) -> Iterator[EncodedRecords]:
    """``batch`` cut where an offset does not exceed the one before it (each piece is placed on its own)."""
    cuts = np.flatnonzero(np.diff(batch.offsets) <= 0) + 1
    start = 0
    for cut in (*cuts.tolist(), len(batch)):
        if cut > start:
            yield batch.slice(start, cut)
        start = cut


def first_mismatch(
    run: EncodedRecords, index: SegmentIndexFile, records: ReadHandle
) -> tuple[int, bytes | None] | None:
    """The first record of ``run`` that one segment (``index``, ``records``) does not store identically: its row and
    ``None`` when the offset is not stored, ``b""`` when it is stored otherwise; ``None`` when every record matches.

    Problems are found in offset order, as one-by-one appends find them: a record not stored, stored with another
    length, or stored with other bytes.
    """
    offsets = run.offsets
    first = index.bisect(int(offsets[0]))
    stop = index.bisect(int(offsets[-1]) + 1)
    stored = np.frombuffer(index.read_entries(first, stop - first), dtype=ENTRY_DTYPE)
    stored_offsets = stored["offset"].astype(np.int64)
    at = np.searchsorted(stored_offsets, offsets)
    found = at < len(stored_offsets)
    found[found] = stored_offsets[at[found]] == offsets[found]
    limit = len(run) if found.all() else int(np.flatnonzero(~found)[0])  # rows before the first missing one
    at = at[:limit]
    positions = stored["position"].astype(np.int64)[at]
    lengths = stored["length"].astype(np.int64)[at]
    # An entry pointing outside the records file (a damaged index) matches nothing: checked before any read.
    size = records.refresh_size()
    inside = (positions >= 0) & (lengths > 0) & (lengths <= size) & (positions <= size - lengths)
    same_length = (lengths == run.lengths[:limit]) & inside
    comparable = limit if same_length.all() else int(np.flatnonzero(~same_length)[0])
    differs = first_different(run, records, positions[:comparable], lengths[:comparable])
    if differs is not None:
        return differs, b""
    if comparable < limit:
        return comparable, b""
    if limit < len(run):
        return limit, None
    return None


def first_different(
    run: EncodedRecords,
    records: ReadHandle,
    positions: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int64],
) -> int | None:
    """The first of the run's records (as many as ``positions``) whose stored bytes differ, or ``None``."""
    count = len(positions)
    if count == 0:
        return None
    ours = run.data[: int(run.bounds[count])]
    low, high = int(positions[0]), int(positions[-1] + lengths[-1])
    ordered = bool((positions[1:] >= positions[:-1] + lengths[:-1]).all())
    stored_bytes = b""
    if ordered and low >= 0 and high - low <= 4 * len(ours) + (1 << 20):
        span = records.pread(high - low, low)
        if len(span) == high - low:
            contiguous = bool((positions[1:] == positions[:-1] + lengths[:-1]).all())
            view = np.frombuffer(span, dtype=np.uint8)
            stored_bytes = span if contiguous else gather(view, positions - low, lengths).tobytes()
            if stored_bytes == ours:
                return None
    if len(stored_bytes) == len(ours):
        # Same size, other bytes: the record holding the first differing byte.
        theirs = np.frombuffer(stored_bytes, dtype=np.uint8)
        byte = int(np.flatnonzero(theirs != np.frombuffer(ours, dtype=np.uint8))[0])
        return int(np.searchsorted(run.bounds, byte, side="right")) - 1
    # A stored segment that is damaged or far apart: record by record.
    for row in range(count):
        length = int(lengths[row])
        stored = records.pread(length, int(positions[row])) if positions[row] >= 0 else b""
        if stored != run.data[int(run.bounds[row]) : int(run.bounds[row + 1])]:
            return row
    return None
