"""Restoring a topic into another number of partitions (``--repartition murmur2|round-robin``).

With ``keep`` (the default) backed-up partition P goes to target partition P.
Otherwise every target partition of the topic is filled by one task that
reads all of the topic's backed-up partitions as one **merged stream** and
produces the records the partitioner gives it:

- the merged stream interleaves the backed-up partitions by timestamp
  (records without one count as -1), ties going to the lower partition; each
  partition keeps its offset order. It is the same on every run, so a
  record's **position** in it (0, 1, 2, ... over the selected records of all
  partitions) names the record: the restore's progress marker holds the
  position to go on from, where a one-to-one restore holds a source offset;
- ``murmur2``: a keyed record goes to ``(murmur2(key) & 0x7fffffff) % N``,
  the partition Kafka's default partitioner (Java's, and librdkafka's
  ``murmur2_random``) picks for that key among N partitions, so every record
  of a key lands in one target partition, in the order of the merged stream
  (its order in the backed-up partition when a key lived in one). Records
  without a key go round-robin, in the order of the merged stream;
- ``round-robin``: every record goes to the next partition in turn.

Every target partition's share comes from the whole topic: one task reads it
for up to 16 target partitions (:mod:`spark_kafka_backup.restore.fanout`), from
the local files or the staged copy of an object-storage backup.

Consumer groups: a group stored with committed offsets C_P on the backed-up
partitions resumes, on each target partition, at the first record there that
it had not read (``offset >= C_P`` for the record's partition P; on a
partition where the group stored no offset every record counts as not read).
Records it had read may follow that record (they came from another backed-up
partition, interleaved by time), and are read again: the placement is
approximate, never skipping a record the group had not read, and the restore
reports for each group how many records it will read again.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from spark_kafka_backup.format.arrow_binary import BinaryParts
from spark_kafka_backup.format.record import Record
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.selection import Window, selected_records
from spark_kafka_backup.text import count

KEEP = "keep"
MURMUR2 = "murmur2"
ROUND_ROBIN = "round-robin"
MODES = (KEEP, MURMUR2, ROUND_ROBIN)

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's 32-bit murmur2 of ``data`` (``org.apache.kafka.common.utils.Utils.murmur2``), as a signed int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length & ~3
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[whole + 2] << 16
    if rest >= 2:
        h ^= data[whole + 1] << 8
    if rest >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


#: Keys longer than this are hashed one by one (:func:`murmur2`): each step over the column costs the same however few
#: keys it holds, so one long key would cost a step per four of its bytes.
COLUMN_KEY_BYTES = 1024


def murmur2_columns(keys: BinaryParts) -> npt.NDArray[np.uint32]:
    """:func:`murmur2` of every value of a binary column at once, unsigned (a null value hashes as empty bytes).

    The keys are walked four bytes at a time, all keys still that long together: as many steps as the longest
    key has words, each over the keys with one more word (keys over :data:`COLUMN_KEY_BYTES`: one by one).
    """
    long_keys = np.flatnonzero(keys.lengths > COLUMN_KEY_BYTES)
    if len(long_keys):
        short = BinaryParts(keys.valid, keys.starts, np.where(keys.lengths > COLUMN_KEY_BYTES, 0, keys.lengths),
                            keys.data)  # fmt: skip
        hashes = murmur2_columns(short)
        for row in long_keys.tolist():
            start = int(keys.starts[row])
            hashes[row] = murmur2(keys.data[start : start + int(keys.lengths[row])].tobytes()) & _MASK
        return hashes
    lengths = np.maximum(keys.lengths, 0)
    m = np.uint32(_M)
    h = np.uint32(_SEED) ^ lengths.astype(np.uint32)
    words = lengths // 4
    by_words = np.argsort(-words, kind="stable")  # the keys with the most words first
    ascending = np.sort(words)
    data, starts = keys.data, keys.starts
    for step in range(int(ascending[-1]) if len(words) else 0):
        rows = by_words[: len(words) - int(np.searchsorted(ascending, step, side="right"))]  # words > step
        at = starts[rows] + 4 * step
        k = (
            data[at].astype(np.uint32)
            | (data[at + 1].astype(np.uint32) << np.uint32(8))
            | (data[at + 2].astype(np.uint32) << np.uint32(16))
            | (data[at + 3].astype(np.uint32) << np.uint32(24))
        )
        k *= m
        k ^= k >> np.uint32(24)
        k *= m
        h[rows] = (h[rows] * m) ^ k
    rest = lengths & 3
    tail = starts + (lengths & ~3)
    for size, shift in ((3, 16), (2, 8)):
        rows = np.flatnonzero(rest >= size)
        h[rows] ^= data[tail[rows] + size - 1].astype(np.uint32) << np.uint32(shift)
    rows = np.flatnonzero(rest >= 1)
    h[rows] ^= data[tail[rows]].astype(np.uint32)
    h[rows] *= m
    h ^= h >> np.uint32(13)
    h *= m
    h ^= h >> np.uint32(15)
    return h


def key_partition(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner gives a keyed record among ``partitions``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


@dataclass(frozen=True)
class Source:
    """One backed-up partition feeding a repartitioned topic, and its selection."""

    partition: int
    window: Window


@dataclass(frozen=True)
class Repartition:
    """How one topic's records are spread over the target's partitions (picklable: it travels to the tasks)."""

    mode: str
    partitions: int
    sources: tuple[Source, ...]
    #: Committed offsets per group and backed-up partition.
    groups: dict[str, dict[int, int]] = field(default_factory=dict)

    def describe(self) -> str:
        return f"{self.mode} over {count(self.partitions, 'partition')}"

    def identity_part(self) -> str:
        """What the restore identity adds for a repartitioned target partition (see
        :mod:`spark_kafka_backup.restore.marker`)."""
        windows = [
            [s.partition, s.window.from_offset, s.window.to_offset, s.window.from_time, s.window.to_time,
             sorted(s.window.skip_segments), *([["where", s.window.matched.where]] if s.window.matched else [])]
            for s in self.sources
        ]  # fmt: skip
        return json.dumps([self.mode, self.partitions, windows])


class Router:
    """Gives each record of the merged stream its target partition (stateful: round-robin counts records)."""

    def __init__(self, mode: str, partitions: int) -> None:
        if mode not in (MURMUR2, ROUND_ROBIN):
            raise ValueError(f"not a repartitioning mode: {mode!r}")
        self.mode = mode
        self.partitions = partitions
        self._turn = 0

    def route(self, record: Record) -> int:
        if self.mode == MURMUR2 and record.key is not None:
            return key_partition(record.key, self.partitions)
        target = self._turn % self.partitions
        self._turn += 1
        return target


def merged_records(sources: Sequence[tuple[int, Iterable[Record]]]) -> Iterator[tuple[int, Record]]:
    """``(backed-up partition, record)`` of every source, interleaved by timestamp (see the module docstring)."""

    def tagged(partition: int, records: Iterable[Record]) -> Iterator[tuple[int, int, Record]]:
        for record in records:
            yield (record.timestamp if record.timestamp is not None else -1), partition, record

    for _, partition, record in heapq.merge(*(tagged(p, records) for p, records in sources), key=_order):
        yield partition, record


def _order(item: tuple[int, int, Record]) -> tuple[int, int]:
    return item[0], item[1]


def routed_records(
    repartition: Repartition,
    readers: dict[int, PartitionReader],
    target: int,
    produced: Callable[[Record, int], Record] | None = None,
) -> Iterator[tuple[int, int, Record]]:
    """``(position, backed-up partition, record)`` of the records target partition ``target`` receives.

    ``produced``: a record (of a backed-up partition) as it will be produced, when that differs from the stored
    one (schema ids of the target registry): murmur2 hashes the key the target's consumers will see.
    """
    router = Router(repartition.mode, repartition.partitions)
    produced = produced if repartition.mode == MURMUR2 else None  # only murmur2 reads the key
    streams = [(s.partition, selected_records(readers[s.partition], s.window)) for s in repartition.sources]
    for position, (partition, record) in enumerate(merged_records(streams)):
        if router.route(record if produced is None else produced(record, partition)) == target:
            yield position, partition, record


def count_routed(
    repartition: Repartition,
    readers: dict[int, PartitionReader],
    *,
    below: dict[int, int] | None = None,
    produced: Callable[[Record, int], Record] | None = None,
) -> tuple[list[int], list[int]]:
    """Records each target partition receives, and how many of them lie below a position (``below``: per target
    partition), in one pass over the topic (``produced`` as in :func:`routed_records`)."""
    router = Router(repartition.mode, repartition.partitions)
    counts = [0] * repartition.partitions
    under = [0] * repartition.partitions
    limits = below or {}
    produced = produced if repartition.mode == MURMUR2 else None
    streams = [(s.partition, selected_records(readers[s.partition], s.window)) for s in repartition.sources]
    for position, (partition, record) in enumerate(merged_records(streams)):
        target = router.route(record if produced is None else produced(record, partition))
        counts[target] += 1
        if position < limits.get(target, 0):
            under[target] += 1
    return counts, under
