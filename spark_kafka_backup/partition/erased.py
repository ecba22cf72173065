"""Offsets erased from a partition on purpose (``spark-kafka-backup erase``), as ranges.

The catalog keeps them (:mod:`spark_kafka_backup.catalog.erasures`); the partition writers are handed them through
their ledger, because the source still holds those records: a batch replayed after a crash, or read again, brings
them back, and a writer must neither store them again (above the last stored offset) nor refuse them as not stored
(below it). A record at an erased offset is passed over, counted as already stored.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from spark_kafka_backup.format.record_columns import EncodedRecords

Int64s = npt.NDArray[np.int64]


def _empty() -> Int64s:
    return np.zeros(0, dtype=np.int64)


@dataclass(frozen=True)
class ErasedOffsets:
    """Offsets ``firsts[i]..lasts[i]`` (inclusive), sorted, neither overlapping nor adjacent."""

    firsts: Int64s = field(default_factory=_empty)
    lasts: Int64s = field(default_factory=_empty)

    @classmethod
    def of(cls, ranges: Iterable[tuple[int, int]]) -> ErasedOffsets:
        """The union of ``ranges`` (any order, overlapping or not)."""
        pairs = sorted((int(first), int(last)) for first, last in ranges)
        firsts: list[int] = []
        lasts: list[int] = []
        for first, last in pairs:
            if last < first:
                raise ValueError(f"an erased range {first}..{last} ends before it starts")
            if lasts and first <= lasts[-1] + 1:
                lasts[-1] = max(lasts[-1], last)
            else:
                firsts.append(first)
                lasts.append(last)
        return cls(np.array(firsts, dtype=np.int64), np.array(lasts, dtype=np.int64))

    @classmethod
    def of_offsets(cls, offsets: Int64s) -> ErasedOffsets:
        """Increasing offsets as ranges of consecutive ones."""
        offsets = np.asarray(offsets, dtype=np.int64)
        if len(offsets) == 0:
            return cls()
        if np.any(np.diff(offsets) <= 0):
            raise ValueError("erased offsets must increase")
        breaks = np.flatnonzero(np.diff(offsets) != 1)
        firsts = np.concatenate([offsets[:1], offsets[breaks + 1]])
        lasts = np.concatenate([offsets[breaks], offsets[-1:]])
        return cls(firsts, lasts)

    def __bool__(self) -> bool:
        return len(self.firsts) > 0

    def __len__(self) -> int:
        """How many ranges."""
        return len(self.firsts)

    @property
    def count(self) -> int:
        """How many offsets the ranges cover."""
        return int((self.lasts - self.firsts + 1).sum())

    def ranges(self) -> list[tuple[int, int]]:
        return list(zip(self.firsts.tolist(), self.lasts.tolist(), strict=True))

    def union(self, other: ErasedOffsets) -> ErasedOffsets:
        return ErasedOffsets.of([*self.ranges(), *other.ranges()])

    def holds(self, offsets: Int64s) -> npt.NDArray[np.bool_]:
        """For each offset, whether a range covers it."""
        offsets = np.asarray(offsets, dtype=np.int64)
        at = np.searchsorted(self.firsts, offsets, side="right") - 1
        inside = at >= 0
        covered = np.zeros(len(offsets), dtype=bool)
        covered[inside] = offsets[inside] <= self.lasts[at[inside]]
        return covered

    def meets(self, first: int, last: int) -> bool:
        """Whether a range covers any offset of ``first..last``."""
        at = int(np.searchsorted(self.firsts, last, side="right")) - 1
        return at >= 0 and int(self.lasts[at]) >= first

    def kept_pieces(self, run: EncodedRecords) -> Iterator[EncodedRecords]:
        """``run`` without its records at erased offsets, as the pieces between them."""
        if not self or not len(run):
            yield run
            return
        erased = self.holds(run.offsets)
        if not erased.any():
            yield run
            return
        kept = np.flatnonzero(~erased)
        if not len(kept):
            return
        breaks = np.flatnonzero(np.diff(kept) != 1)
        starts = np.concatenate([kept[:1], kept[breaks + 1]])
        stops = np.concatenate([kept[breaks], kept[-1:]]) + 1
        for start, stop in zip(starts.tolist(), stops.tolist(), strict=True):
            yield run.slice(start, stop)
