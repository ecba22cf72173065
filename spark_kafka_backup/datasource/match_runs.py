"""Which stored records a predicate holds for, as runs: the executor side of ``restore --where``.

Spark evaluates the predicate on the ``kbackup`` data source's rows (``topic, partition, offset, matched``), each
task one stretch of whole segments of one partition, in offset order; :func:`matched_runs` (run by ``mapInArrow``
in that task) turns the flags into runs of consecutive matching records: ``(topic, partition, first, last,
records)``. A run claims every stored record from ``first`` to ``last``: they were all read, in order, and all
matched. A null (the predicate unknown for a record) does not match, as in a ``WHERE``.

:func:`runs_of_scan` does the same for a predicate Spark translated
(:mod:`spark_kafka_backup.datasource.row_predicate`): the task reads its segments and evaluates the predicate on
their Arrow rows itself, none of them handed to Spark.

Memory: one input batch and the runs it closes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from spark_kafka_backup.datasource.row_predicate import LeftToSparkError, Node, holds
from spark_kafka_backup.datasource.segment_scan import SegmentScan, read_scan
from spark_kafka_backup.errors import SparkKafkaBackupError

#: What :func:`matched_runs` yields (Spark's DDL for ``mapInArrow``).
RUNS_DDL = "topic string, partition int, first long, last long, records long"
RUNS_SCHEMA = pa.schema(
    [("topic", pa.string()), ("partition", pa.int32()), ("first", pa.int64()), ("last", pa.int64()),
     ("records", pa.int64())]
)  # fmt: skip


@dataclass
class _Open:
    """The run the previous batch ended in."""

    topic: str
    partition: int
    first: int
    last: int
    records: int


def matched_runs(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Runs of matching records from batches of ``topic, partition, offset, matched`` in offset order."""
    open_run: _Open | None = None
    #: The last offset seen of each partition (a partition's rows come together, offsets increasing).
    last_seen: dict[tuple[str, int], int] = {}
    current: tuple[str, int] | None = None
    for batch in batches:
        if batch.num_rows == 0:
            continue
        topics = batch.column("topic").to_pylist() if _varies(batch.column("topic")) else None
        for topic, partition, offsets, flags in _pieces(batch, topics):
            key = (topic, partition)
            previous = last_seen.get(key)
            if (
                (previous is not None and key != current)
                or bool(np.any(offsets[1:] <= offsets[:-1]))
                or (previous is not None and offsets[0] <= previous)
            ):
                raise SparkKafkaBackupError(
                    f"--where: the records of topic {topic!r} partition {partition} reached the matching out of "
                    "offset order (the predicate needs other rows than its own); nothing was produced"
                )
            last_seen[key], current = int(offsets[-1]), key
            runs, open_run = _runs(topic, partition, offsets, flags, open_run)
            yield from runs
    if open_run is not None:
        yield _batch(*_arrays([open_run]))


@dataclass(frozen=True)
class ScanMatch:
    """One task of a translated predicate (pickled to it): a scan of the data source and the predicate."""

    scan: SegmentScan
    predicate: Node


def runs_of_scan(task: ScanMatch) -> list[pa.RecordBatch] | str:
    """The runs of the scan's records ``task.predicate`` holds for, or why Spark must evaluate it
    (:class:`LeftToSparkError`: nothing of this task is kept)."""
    try:
        return list(matched_runs(_flagged_rows(task)))
    except LeftToSparkError as exc:
        return str(exc) or "an evaluation Spark answers by its mode"


def _flagged_rows(task: ScanMatch) -> Iterator[pa.RecordBatch]:
    for rows in read_scan(task.scan):
        yield pa.RecordBatch.from_arrays(
            [rows.column("topic"), rows.column("partition"), rows.column("offset"),
             pa.array(holds(task.predicate, rows))],
            names=["topic", "partition", "offset", "matched"],
        )  # fmt: skip


def _varies(column: pa.Array) -> bool:
    return len(column.unique()) > 1


def _pieces(batch: pa.RecordBatch, topics: list[str] | None) -> Iterator[tuple[str, int, np.ndarray, np.ndarray]]:
    """The batch cut where topic or partition changes (one piece in a task of the data source)."""
    partitions = batch.column("partition").to_numpy(zero_copy_only=False).astype(np.int64)
    offsets = batch.column("offset").to_numpy(zero_copy_only=False).astype(np.int64)
    flags = batch.column("matched").fill_null(False).to_numpy(zero_copy_only=False).astype(bool)
    changes = np.flatnonzero(partitions[1:] != partitions[:-1]) + 1
    if topics is not None:
        names = np.array(topics, dtype=object)
        changes = np.union1d(changes, np.flatnonzero(names[1:] != names[:-1]) + 1)
    first_topic = batch.column("topic")[0].as_py()
    for start, stop in zip(np.concatenate(([0], changes)), np.concatenate((changes, [len(offsets)])), strict=True):
        topic = first_topic if topics is None else topics[start]
        yield topic, int(partitions[start]), offsets[start:stop], flags[start:stop]


def _runs(
    topic: str, partition: int, offsets: np.ndarray, flags: np.ndarray, open_run: _Open | None
) -> tuple[list[pa.RecordBatch], _Open | None]:
    """The runs ``flags`` closes (with the one left open before, if it goes on here), and the one left open."""
    closed: list[pa.RecordBatch] = []
    if open_run is not None and (open_run.topic, open_run.partition) != (topic, partition):
        closed.append(_batch(*_arrays([open_run])))
        open_run = None
    padded = np.concatenate(([False], flags, [False]))
    starts = np.flatnonzero(padded[1:-1] & ~padded[:-2])
    ends = np.flatnonzero(padded[1:-1] & ~padded[2:])  # the last row of each run
    if open_run is not None:
        if flags[0]:
            # The open run goes on into this piece: it takes the piece's first run.
            open_run.last = int(offsets[ends[0]])
            open_run.records += int(ends[0]) + 1
            reaches_end = int(ends[0]) == len(flags) - 1
            starts, ends = starts[1:], ends[1:]
            if not reaches_end:
                closed.append(_batch(*_arrays([open_run])))
                open_run = None
        else:
            closed.append(_batch(*_arrays([open_run])))
            open_run = None
    if len(ends) and ends[-1] == len(flags) - 1:
        # The last run reaches the piece's end: it may go on in the next batch.
        open_run = _Open(topic, partition, int(offsets[starts[-1]]), int(offsets[ends[-1]]),
                         int(ends[-1] - starts[-1]) + 1)  # fmt: skip
        starts, ends = starts[:-1], ends[:-1]
    if len(starts):
        n = len(starts)
        closed.append(_batch([topic] * n, np.full(n, partition), offsets[starts], offsets[ends], ends - starts + 1))
    return closed, open_run


def _arrays(runs: list[_Open]) -> tuple[list[str], list[int], list[int], list[int], list[int]]:
    return ([r.topic for r in runs], [r.partition for r in runs], [r.first for r in runs], [r.last for r in runs],
            [r.records for r in runs])  # fmt: skip


def _batch(topics: list[str], partitions: object, firsts: object, lasts: object, records: object) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [
            pa.array(topics, pa.string()),
            pa.array(partitions, pa.int32()),
            pa.array(firsts, pa.int64()),
            pa.array(lasts, pa.int64()),
            pa.array(records, pa.int64()),
        ],
        schema=RUNS_SCHEMA,
    )
