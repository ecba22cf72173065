"""What a ``kbackup_kafka`` task is given (picklable, the only state that crosses from the driver): the ranges of
offsets it reads, and how the driver packs small ranges into tasks.

See :mod:`spark_kafka_backup.spark.kafka_source` for the options and how work is planned; the readers are
:mod:`spark_kafka_backup.spark.columnar_reader` (the native edge) and :mod:`spark_kafka_backup.spark.kafka_reader`
(confluent-kafka).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa
from pyspark.sql.datasource import InputPartition


@dataclass(frozen=True)
class KafkaRange(InputPartition):
    """One Kafka partition's offsets ``[start, end)`` to read: all a task needs."""

    topic: str
    partition: int
    start: int
    end: int
    client: dict[str, str]
    include_headers: bool
    read_timeout: float
    #: What a task does when the source deleted offsets of the range before it read them (see the options).
    fail_on_data_loss: bool = False
    gaps_root: str | None = None
    #: The topic id the range's offsets belong to (one incarnation of the topic); ``None``: not checked.
    topic_id: str | None = None


#: A partition with at least this many offsets to read is a task of its own; smaller ones are packed up to it.
PACK_RECORDS = 200_000
#: At most this many partitions in one task.
PACK_RANGES = 500


@dataclass(frozen=True)
class KafkaTask(InputPartition):
    """The ranges one task reads with one consumer (see "Tasks" in the module docstring)."""

    ranges: tuple[KafkaRange, ...]


def pack_ranges(ranges: list[KafkaRange], min_tasks: int = 1) -> list[KafkaTask]:
    """Group ranges into tasks: large ranges alone, small ones packed (see "Tasks" in the module docstring)."""
    large = [r for r in ranges if r.end - r.start >= PACK_RECORDS]
    small = sorted((r for r in ranges if r.end - r.start < PACK_RECORDS), key=lambda r: r.start - r.end)
    tasks = [KafkaTask((r,)) for r in large]
    if small:
        total = sum(r.end - r.start for r in small)
        count = max(min_tasks - len(large), -(-total // PACK_RECORDS), -(-len(small) // PACK_RANGES), 1)
        bins: list[list[KafkaRange]] = [[] for _ in range(min(count, len(small)))]
        loads = [0] * len(bins)
        # Largest first, each to the least loaded task (the top of a heap of (load, ranges, task)) when it has
        # room; else to the least loaded task that has, else to a new one (rare: ranges come largest first).
        heap = [(0, 0, b) for b in range(len(bins))]
        for r in small:
            size = r.end - r.start
            load, members, target = heap[0]
            fits = members < PACK_RANGES and load + size <= PACK_RECORDS
            if not fits:
                room = [b for b in range(len(bins)) if len(bins[b]) < PACK_RANGES and loads[b] + size <= PACK_RECORDS]
                if room:
                    target = min(room, key=lambda b: (loads[b], len(bins[b])))
                else:
                    bins.append([])
                    loads.append(0)
                    target = len(bins) - 1
            loads[target] += size
            bins[target].append(r)
            if fits:
                heapq.heapreplace(heap, (loads[target], len(bins[target]), target))
            else:
                heap = [(loads[b], len(bins[b]), b) for b in range(len(bins))]
                heapq.heapify(heap)
        tasks += [KafkaTask(tuple(sorted(group, key=lambda r: (r.topic, r.partition)))) for group in bins if group]
    return tasks


class RangeReader(Protocol):
    """How a task reads its ranges: Arrow batches of one partition each, in the source's schema, every range from its
    start to its end, with the checks of :mod:`spark_kafka_backup.spark.read_checks`. Two implementations: the
    native edge's (:func:`~spark_kafka_backup.spark.columnar_reader.read_ranges_native`) and confluent-kafka's
    (:func:`~spark_kafka_backup.spark.kafka_reader.read_ranges_reference`), tested against each other."""

    def __call__(
        self, ranges: tuple[KafkaRange, ...], settings: dict[str, str], *, batch_rows: int
    ) -> Iterator[pa.RecordBatch]: ...
