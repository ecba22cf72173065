"""How far a standby is behind: the backup's committed ends, and the standby's lag as log line and metrics.

Per backed-up partition, a follower's pass (:mod:`spark_kafka_backup.restore.follow`) knows

- the backup's **committed end** when the pass began (:func:`cataloged_end`): the offset after the last record the
  catalog vouches for (finished segments, and the newest one's committed prefix), with the newest record time of
  each cataloged piece;
- the **backlog** it found: records of the backup not yet on the standby when it began (the plan's count);
- after the pass, the standby's position (its progress marker: the next source offset to restore).

From these, the exported gauges (prefix ``kbackup_standby_``, labels ``topic`` and ``partition`` of the backup):

``backlog_records``
    Records the last pass found to restore (how far behind the backup the standby was when it began).
``records_behind_backup``
    Records the backup had committed when the last pass began that the standby does not hold (0 once a pass caught
    up, or froze at ``--until``'s cut).
``seconds_behind_source``
    Now minus the newest record time among the backed-up pieces the standby holds entirely: what a failover now
    would lose at most, when the source writes continuously (it grows while a partition receives nothing: it is the
    age of the standby's newest data, an upper bound of the loss).

and job-wide ``passes_total``, ``last_pass_timestamp_seconds``, ``pass_seconds``, ``frozen`` (1 once ``--until``
was reached) and ``up``.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from spark_kafka_backup.catalog.store import read_catalog
from spark_kafka_backup.metrics import Sample
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.storage import Location

PREFIX = "kbackup_standby_"


@dataclass(frozen=True)
class CatalogedEnd:
    """What the backup's catalog vouches for in one partition."""

    #: The offset after the last committed record (0: none).
    next: int
    #: Each cataloged piece in offset order: (its last offset, its newest record time or ``None``).
    pieces: tuple[tuple[int, int | None], ...] = ()

    def newest_time_below(self, offset: int) -> int | None:
        """The newest record time of the pieces wholly below ``offset`` (``None``: none, or none timed)."""
        lasts = [last for last, _ in self.pieces]
        held = bisect.bisect_left(lasts, offset)
        times = [time for _, time in self.pieces[:held] if time is not None]
        return max(times) if times else None


def cataloged_end(root: Location, topic: str, partition: int, *, legacy: bool = False) -> CatalogedEnd:
    """The partition's committed end from its catalog; a backup without a catalog (written before catalogs, or by
    the original tool) by its files."""
    catalog = read_catalog(root, topic, partition)
    if catalog is None:
        last = PartitionReader(root / topic, partition, legacy=legacy).last_offset()
        return CatalogedEnd(0 if last is None else last + 1)
    pieces: list[tuple[int, int | None]] = [
        (entry.last_offset, entry.max_timestamp) for entry in catalog.segments if entry.last_offset is not None
    ]
    tail = catalog.tail_of(catalog.tail.name) if catalog.tail is not None else None
    if tail is not None and tail.last_offset is not None:
        pieces.append((tail.last_offset, tail.max_timestamp if tail.times else None))
    pieces.sort(key=lambda piece: piece[0])
    return CatalogedEnd(pieces[-1][0] + 1 if pieces else 0, tuple(pieces))


@dataclass(frozen=True)
class PartitionLag:
    topic: str
    partition: int
    backlog: int
    records_behind: int
    #: The newest record time the standby holds of this partition (``None``: not known).
    restored_time: int | None

    def seconds_behind(self, now_ms: int) -> float | None:
        return None if self.restored_time is None else max(0.0, (now_ms - self.restored_time) / 1000)


def partition_lag(
    topic: str, partition: int, end: CatalogedEnd, backlog: int, restored_next: int | None, records_behind: int
) -> PartitionLag:
    """``restored_next``: the standby's marker (next source offset to restore; ``None``: nothing restored);
    ``records_behind``: the backup's committed records from there (counted by the caller in the segment indexes)."""
    position = 0 if restored_next is None else restored_next
    return PartitionLag(topic, partition, backlog, records_behind,
                        end.newest_time_below(position) if position else None)  # fmt: skip


def worst(lags: Iterable[PartitionLag], now_ms: int) -> tuple[float | None, str]:
    """The largest ``seconds_behind`` and the partition it is of."""
    found: tuple[float | None, str] = (None, "")
    for lag in lags:
        seconds = lag.seconds_behind(now_ms)
        if seconds is not None and (found[0] is None or seconds > found[0]):
            found = (seconds, f"{lag.topic}/{lag.partition}")
    return found


def lag_samples(
    lags: Mapping[tuple[str, int], PartitionLag],
    now_ms: int,
    *,
    passes: int,
    last_pass_at: float | None,
    pass_seconds: float | None,
    frozen: bool,
    up: bool,
) -> list[Sample]:
    samples = [
        Sample(PREFIX + "up", 1 if up else 0, "1 while the follower runs"),
        Sample(PREFIX + "passes_total", passes, "passes over the backup since the follower started", kind="counter"),
        Sample(PREFIX + "frozen", 1 if frozen else 0, "1 once --until was reached: the standby follows no further"),
    ]
    if last_pass_at is not None:
        samples.append(Sample(PREFIX + "last_pass_timestamp_seconds", last_pass_at, "when the last pass ended"))
    if pass_seconds is not None:
        samples.append(Sample(PREFIX + "pass_seconds", pass_seconds, "how long the last pass took"))
    for (topic, partition), lag in sorted(lags.items()):
        labels = {"topic": topic, "partition": str(partition)}
        samples.append(Sample(PREFIX + "backlog_records", lag.backlog,
                              "records of the backup the last pass found not yet on the standby", labels))  # fmt: skip
        samples.append(Sample(PREFIX + "records_behind_backup", lag.records_behind,
                              "records the backup had committed at the last pass's start that the standby does not "
                              "hold", labels))  # fmt: skip
        seconds = lag.seconds_behind(now_ms)
        if seconds is not None:
            samples.append(Sample(PREFIX + "seconds_behind_source", seconds,
                                  "now minus the newest record time the standby holds", labels))  # fmt: skip
    return samples
