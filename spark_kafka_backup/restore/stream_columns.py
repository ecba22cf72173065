"""A restore task's records as columnar chunks: one backed-up partition as stored, or a repartitioned topic's
merged stream routed to one target partition.

The restore's transactions (:mod:`spark_kafka_backup.restore.transaction_run`) take these chunks, whichever producer
sends them; the plan counts what each target partition of a repartitioned topic receives from the same rounds. The
reference is the stream of :class:`~spark_kafka_backup.format.record.Record` objects
(:func:`~spark_kafka_backup.partition.selection.selected_records`,
:func:`~spark_kafka_backup.restore.repartition.routed_records`): the same records, positions and target partitions,
in the same order (tests/unit/test_repartition_stream.py compares them).

**The merged stream on columns.** The reference interleaves the backed-up partitions with ``heapq.merge`` keyed by
``(timestamp, partition)``: it emits, again and again, the least of the partitions' next records. A partition's
timestamps need not increase, so that is not a sort by timestamp; it is a sort by each record's **running maximum**
(the greatest timestamp of its partition up to and including it), then partition, then offset. (When the merge
emits record ``a`` of partition A while B's next record is ``b``, every record of A before ``a`` was emitted while
B's next record was ``b`` or one before it, each at most ``b``'s running maximum; so ``a``'s running maximum is at
most ``b``'s, the partitions breaking ties.) Running maxima increase along each partition, so the partitions'
batches merge like sorted runs: a **round** takes, from every partition's current batch, the records at or below
the least of the batches' last keys, and sorts them by key; the batch that set the bound is used up, so every round
moves on. Memory: one reader batch per backed-up partition, as the reference holds.

**Routing** (:class:`ColumnRouter`): ``murmur2`` hashes a round's keys at once
(:func:`~spark_kafka_backup.restore.repartition.murmur2_columns`; with schema ids rewritten, the keys as they are
produced), records without a key taking turns; ``round-robin`` gives every record the next turn.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from spark_kafka_backup.errors import SchemaIdError
from spark_kafka_backup.format.arrow_binary import BinaryParts, binary_parts
from spark_kafka_backup.format.record import Record
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.segment_batches import RecordBatch, produce_columns
from spark_kafka_backup.partition.selection import Window, count_selected, selected_rows
from spark_kafka_backup.restore.partition_task import PartitionTask
from spark_kafka_backup.restore.repartition import MURMUR2, ROUND_ROBIN, Repartition, murmur2_columns
from spark_kafka_backup.schema_registry.wire_columns import ColumnIdRewrite

Int64s = npt.NDArray[np.int64]

_LEAST = np.iinfo(np.int64).min


@dataclass(frozen=True)
class _Piece:
    """Selected records of one batch read: where rows of a chunk come from, to rebuild one as stored."""

    stored: RecordBatch
    #: The batch's rows the piece holds, in order (``None``: ``start`` to ``stop - 1``).
    rows: npt.NDArray[np.int64] | None
    start: int
    stop: int

    def record(self, at: int) -> Record:
        """The piece's record ``at`` (0-based), as stored."""
        if self.rows is not None:
            return self.stored.record(int(self.rows[self.start + at]))
        return self.stored.record(self.start + at)


@dataclass(frozen=True)
class Chunk:
    """Consecutive records of a task's stream, as the producer takes them (keys and values as stored)."""

    #: Keys, values, timestamps and headers (:data:`~spark_kafka_backup.partition.segment_batches.PRODUCE_SCHEMA`).
    columns: pa.RecordBatch
    #: Each record's backed-up partition and source offset.
    partitions: Int64s
    offsets: Int64s
    #: What the progress marker counts: the source offset, or the position in the merged stream.
    positions: Int64s
    #: The pieces the rows come from: row ``i`` is record ``piece_rows[i]`` of piece ``piece_of[i]``.
    pieces: tuple[_Piece, ...]
    piece_of: Int64s
    piece_rows: Int64s

    def __len__(self) -> int:
        return len(self.offsets)

    def record(self, row: int) -> Record:
        """Row ``row`` as stored (one object: for the few records a task compares with the target)."""
        return self.pieces[int(self.piece_of[row])].record(int(self.piece_rows[row]))


def partition_chunks(reader: PartitionReader, partition: int, window: Window) -> Iterator[Chunk]:
    """The selected records of one backed-up partition, a reader's batch at a time (positions: offsets)."""
    for stored, rows, columns, offsets in _selected_batches(reader, window):
        n = len(offsets)
        yield Chunk(
            columns, np.full(n, partition, dtype=np.int64), offsets, offsets,
            (_Piece(stored, rows, 0, n),), np.zeros(n, dtype=np.int64), np.arange(n, dtype=np.int64),
        )  # fmt: skip


def _selected_batches(
    reader: PartitionReader, window: Window
) -> Iterator[tuple[RecordBatch, npt.NDArray[np.int64] | None, pa.RecordBatch, Int64s]]:
    """(batch read, rows selected or ``None`` for all, their produce columns, their offsets), skipping empty ones."""
    # Records --where did not match are never decoded (with 1 % matching, most of the records read).
    keep = window.matched.holds if window.matched is not None else None
    batches = reader.record_batches(window.from_offset, window.to_offset, skip_segments=window.skip_segments,
                                    keep=keep)  # fmt: skip
    for stored in batches:
        rows = selected_rows(stored, window)
        columns = produce_columns(stored)
        offsets = np.asarray(stored.columns.offsets, dtype=np.int64)
        if rows is not None:
            columns, offsets = columns.take(pa.array(rows)), offsets[rows]
        if len(offsets):
            yield stored, rows, columns, offsets


@dataclass(frozen=True)
class MergedRound:
    """Consecutive records of a repartitioned topic's merged stream, from position ``first`` on.

    The rows are held as the partitions' batches gave them (``columns``, ``partitions``, ``offsets``);
    ``order`` lists them in the stream's order.
    """

    first: int
    columns: pa.RecordBatch
    partitions: Int64s
    offsets: Int64s
    order: Int64s
    pieces: tuple[_Piece, ...]
    #: Where each piece's rows start among the rows.
    piece_starts: Int64s

    def __len__(self) -> int:
        return len(self.order)

    def rank(self) -> Int64s:
        """Each row's place in the stream's order."""
        rank = np.empty(len(self.order), dtype=np.int64)
        rank[self.order] = np.arange(len(self.order), dtype=np.int64)
        return rank

    def chunk(self, chosen: Int64s) -> Chunk:
        """The records at the round's stream places ``chosen`` (ascending), as a chunk."""
        rows = self.order[chosen]
        piece_of = np.searchsorted(self.piece_starts, rows, side="right") - 1
        return Chunk(
            self.columns.take(pa.array(rows)), self.partitions[rows], self.offsets[rows], self.first + chosen,
            self.pieces, piece_of, rows - self.piece_starts[piece_of],
        )  # fmt: skip


class _Run:
    """One backed-up partition's selected records feeding the merge, with their running maxima."""

    def __init__(self, partition: int, reader: PartitionReader, window: Window) -> None:
        self.partition = partition
        self._batches = _selected_batches(reader, window)
        self._carry = _LEAST
        self.cursor = 0
        self.stored: RecordBatch | None = None
        self.rows: npt.NDArray[np.int64] | None = None
        self.columns: pa.RecordBatch | None = None
        self.offsets = np.zeros(0, dtype=np.int64)
        self.keys = np.zeros(0, dtype=np.int64)

    def pending(self) -> bool:
        """Whether records are left (reading the next batch when this one is used up)."""
        while self.cursor >= len(self.keys):
            found = next(self._batches, None)
            if found is None:
                return False
            self.stored, self.rows, self.columns, self.offsets = found
            stamps = self.columns.column("timestamp").to_numpy()
            self.keys = np.maximum(np.maximum.accumulate(stamps), self._carry)
            self._carry = int(self.keys[-1])
            self.cursor = 0
        return True


def merged_rounds(repartition: Repartition, readers: dict[int, PartitionReader]) -> Generator[MergedRound]:
    """The topic's merged stream, a round at a time (see the module docstring)."""
    runs = [_Run(s.partition, readers[s.partition], s.window) for s in repartition.sources]
    position = 0
    while True:
        live = [run for run in runs if run.pending()]
        if not live:
            return
        bound, bound_partition = min((int(run.keys[-1]), run.partition) for run in live)
        taken: list[tuple[_Run, int, int]] = []
        for run in live:
            side: Literal["left", "right"] = "right" if run.partition <= bound_partition else "left"
            cut = run.cursor + int(np.searchsorted(run.keys[run.cursor :], bound, side=side))
            if cut > run.cursor:
                taken.append((run, run.cursor, cut))
                run.cursor = cut
        yield _round(position, taken)
        position += sum(stop - start for _, start, stop in taken)


def _round(first: int, taken: Sequence[tuple[_Run, int, int]]) -> MergedRound:
    sizes = [stop - start for _, start, stop in taken]
    starts = np.zeros(len(taken), dtype=np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    slices = [run.columns.slice(start, stop - start) for run, start, stop in taken if run.columns is not None]
    # (pa.concat_batches is pyarrow 19's; 18 is enough here)
    columns = slices[0] if len(slices) == 1 else pa.Table.from_batches(slices).combine_chunks().to_batches()[0]
    keys = np.concatenate([run.keys[start:stop] for run, start, stop in taken])
    partitions = np.concatenate([np.full(stop - start, run.partition, dtype=np.int64) for run, start, stop in taken])
    offsets = np.concatenate([run.offsets[start:stop] for run, start, stop in taken])
    assert all(run.stored is not None for run, _, _ in taken)
    pieces = tuple(_Piece(run.stored, run.rows, start, stop) for run, start, stop in taken)  # type: ignore[arg-type]
    order = np.lexsort((partitions, keys)).astype(np.int64)  # stable: each partition keeps its order
    return MergedRound(first, columns, partitions, offsets, order, pieces, starts)


class ColumnRouter:
    """Gives each record of the merged stream its target partition, a round at a time (:class:`Router`'s rules)."""

    def __init__(self, repartition: Repartition, rewrite: ColumnIdRewrite | None, topic: str) -> None:
        if repartition.mode not in (MURMUR2, ROUND_ROBIN):
            raise ValueError(f"not a repartitioning mode: {repartition.mode!r}")
        self.mode = repartition.mode
        self.partitions = repartition.partitions
        # Only murmur2 reads the keys: it hashes them as they are produced, and (as the reference) stops at a
        # record that cannot be.
        self.rewrite = rewrite if self.mode == MURMUR2 else None
        self.topic = topic
        self._turn = 0

    def targets(self, merged: MergedRound) -> tuple[Int64s, SchemaIdError | None]:
        """The target partition of each record of ``merged``, in the stream's order; with ids rewritten, up to the
        first record that cannot be (and why: the records after it are not routed)."""
        n = len(merged)
        if self.mode == ROUND_ROBIN:
            return self._turns(n), None
        columns = merged.columns
        order = merged.order
        stop = None
        if self.rewrite is not None:
            columns, failure = self.rewrite.apply_until(
                columns, topic=self.topic, partitions=merged.partitions, offsets=merged.offsets, rank=merged.rank()
            )
            if failure is not None:
                order = order[: failure[0]]
                stop = failure[1]
        keys = binary_parts(columns.column("key").take(pa.array(order)))
        targets = ((murmur2_columns(keys) & np.uint32(0x7FFFFFFF)) % np.uint32(self.partitions)).astype(np.int64)
        keyless = np.flatnonzero(~keys.valid)
        targets[keyless] = self._turns(len(keyless))
        return targets, stop

    def _turns(self, n: int) -> Int64s:
        turns = (self._turn + np.arange(n, dtype=np.int64)) % self.partitions
        self._turn += n
        return turns


def routed_rounds(
    repartition: Repartition,
    readers: dict[int, PartitionReader],
    *,
    rewrite: ColumnIdRewrite | None = None,
    topic: str = "",
) -> Generator[tuple[MergedRound, Int64s, SchemaIdError | None]]:
    """The merged stream a round at a time, each with its records' target partitions (:meth:`ColumnRouter.targets`:
    up to a record that cannot be routed, and why); closing it closes the readers' batches."""
    router = ColumnRouter(repartition, rewrite, topic)
    with contextlib.closing(merged_rounds(repartition, readers)) as rounds:
        for merged in rounds:
            targets, stop = router.targets(merged)
            yield merged, targets, stop


def routed_chunks(
    repartition: Repartition,
    readers: dict[int, PartitionReader],
    target: int,
    *,
    rewrite: ColumnIdRewrite | None = None,
    topic: str = "",
) -> Iterator[Chunk]:
    """The records target partition ``target`` receives, in the merged stream's order (positions: the stream's)."""
    for merged, targets, stop in routed_rounds(repartition, readers, rewrite=rewrite, topic=topic):
        chosen = np.flatnonzero(targets == target)
        if len(chosen):
            yield merged.chunk(chosen)  # produced before a record after them stops the restore, as in the stream
        if stop is not None:
            raise stop


def count_routed_columns(
    repartition: Repartition,
    readers: dict[int, PartitionReader],
    *,
    below: dict[int, int] | None = None,
    rewrite: ColumnIdRewrite | None = None,
    topic: str = "",
) -> tuple[list[int], list[int]]:
    """Records each target partition receives, and how many of them lie below a position (``below``: per target
    partition), in one pass over the topic (as :func:`~spark_kafka_backup.restore.repartition.count_routed`)."""
    n = repartition.partitions
    counts = np.zeros(n, dtype=np.int64)
    under = np.zeros(n, dtype=np.int64)
    limits = np.zeros(n, dtype=np.int64)
    for partition, limit in (below or {}).items():
        limits[partition] = limit
    for merged, targets, stop in routed_rounds(repartition, readers, rewrite=rewrite, topic=topic):
        if stop is not None:
            raise stop
        counts += np.bincount(targets, minlength=n)
        positions = merged.first + np.arange(len(merged), dtype=np.int64)
        under += np.bincount(targets[positions < limits[targets]], minlength=n)
    return counts.tolist(), under.tolist()


def count_targets(repartition: Repartition, readers: dict[int, PartitionReader]) -> list[int]:
    """Records each target partition receives, as :func:`count_routed_columns` counts them, without the merged
    stream: a keyed record's partition follows from its key alone, and the records routed in turn (every record
    under ``round-robin``, the keyless ones under ``murmur2``) spread from partition 0 on whatever their order. Only
    the keys are read (``murmur2``; ``round-robin`` counts from the indexes). Not for ``murmur2`` with schema ids
    rewritten, which hashes the keys as produced and stops at a record that cannot be."""
    n = repartition.partitions
    counts = np.zeros(n, dtype=np.int64)
    in_turn = 0
    for source in repartition.sources:
        reader = readers[source.partition]
        if repartition.mode == ROUND_ROBIN:
            in_turn += count_selected(reader, source.window)
            continue
        if repartition.mode != MURMUR2:
            raise ValueError(f"not a repartitioning mode: {repartition.mode!r}")
        keep = source.window.matched.holds if source.window.matched is not None else None
        for stored in reader.record_batches(source.window.from_offset, source.window.to_offset,
                                            skip_segments=source.window.skip_segments, keep=keep):  # fmt: skip
            c = stored.columns
            lengths = np.asarray(c.key_lengths, dtype=np.int64)
            starts = np.asarray(c.key_starts, dtype=np.int64)
            rows = selected_rows(stored, source.window)
            if rows is not None:
                lengths, starts = lengths[rows], starts[rows]
            keyed = lengths >= 0
            in_turn += int((~keyed).sum())
            keys = BinaryParts(keyed, starts[keyed], lengths[keyed], np.frombuffer(stored.data, dtype=np.uint8))
            targets = (murmur2_columns(keys) & np.uint32(0x7FFFFFFF)) % np.uint32(n)
            counts += np.bincount(targets.astype(np.int64), minlength=n)
    counts += in_turn // n
    counts[: in_turn % n] += 1
    return [int(c) for c in counts]


def task_chunks(
    task: PartitionTask, readers: dict[int, PartitionReader], rewrite: ColumnIdRewrite | None
) -> Iterator[Chunk]:
    """What ``task`` produces, as chunks (the columnar :meth:`PartitionTask.stream`; keys and values as stored)."""
    if task.repartition is None:
        return partition_chunks(readers[task.source_partition], task.source_partition, task.window)
    return routed_chunks(task.repartition, readers, task.target_partition, rewrite=rewrite, topic=task.source_topic)


class GroupPlacement:
    """Where each consumer group lands in a task's stream, found a chunk at a time (the reference's rule, in
    :mod:`spark_kafka_backup.restore.task` and :mod:`spark_kafka_backup.restore.repartition`).

    A group is placed at the first record of the stream that is at or past its committed offset on that record's
    backed-up partition (every record of a partition where a repartitioned group stored none). Repartitioned,
    the records after that place that it had read on the source are counted (``read_again``).
    """

    def __init__(self, task: PartitionTask) -> None:
        self.partitions = np.array(sorted(p for p, _ in task.sources()), dtype=np.int64)
        if task.repartition is None:
            committed = {group: {task.source_partition: offset} for group, offset in task.groups.items()}
            read: dict[str, dict[int, int]] = {}
        else:
            committed = read = task.repartition.groups
        self._waiting = sorted(committed)
        self._thresholds = self._matrix(committed, self._waiting)
        self._read_groups = sorted(read)
        self._read = self._matrix(read, self._read_groups)
        self.placed: set[str] = set()
        self.read_again: dict[str, int] = {}

    def _matrix(self, offsets: dict[str, dict[int, int]], groups: list[str]) -> Int64s:
        """Per group (rows) and backed-up partition (columns), its committed offset there (-1: none)."""
        matrix = np.full((len(groups), len(self.partitions)), -1, dtype=np.int64)
        for row, group in enumerate(groups):
            for column, partition in enumerate(self.partitions.tolist()):
                matrix[row, column] = offsets[group].get(partition, -1)
        return matrix

    def place(self, chunk: Chunk) -> dict[str, int]:
        """The groups placed at a record of ``chunk``, and its row; counts the records read again."""
        n = len(chunk)
        found: dict[str, int] = {}
        columns = np.searchsorted(self.partitions, chunk.partitions)
        if self._waiting:
            first = np.full(len(self._waiting), n, dtype=np.int64)
            for column in range(len(self.partitions)):
                rows = np.flatnonzero(columns == column)
                if not len(rows):
                    continue
                at = np.searchsorted(chunk.offsets[rows], self._thresholds[:, column], side="left")
                inside = at < len(rows)
                first[inside] = np.minimum(first[inside], rows[at[inside]])
            placed = first < n
            found = {group: int(row) for group, row, on in zip(self._waiting, first, placed, strict=True) if on}
            self._waiting = [group for group, on in zip(self._waiting, placed, strict=True) if not on]
            self._thresholds = self._thresholds[~placed]
            self.placed.update(found)
        for index, group in enumerate(self._read_groups):
            if group not in self.placed:
                continue
            after = found.get(group, -1) + 1  # the record a group is placed at it had not read
            read = int((chunk.offsets[after:] < self._read[index][columns[after:]]).sum())
            if read:
                self.read_again[group] = self.read_again.get(group, 0) + read
        return found
