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

``records_behind_round``
    Records of the backup below the furthest group offset of the backup's newest offset round that the standby
    does not hold: what the groups had read at the source when that round was taken and the standby lacks.

By the backup's **offset rounds** (:mod:`spark_kafka_backup.catalog.offset_history`; :class:`RoundLag`): a round is
**covered** once the standby holds every record below each of its group offsets on the partitions followed. A
consumer switched to the standby then resumes no earlier than where its group was at that round. Job-wide,
``round_seconds_behind`` is now minus the time of the newest covered round, and ``rounds_behind`` the rounds stored
after it. Rounds are taken every ``--offsets-interval`` whether records arrive or not, so a quiet partition keeps
these small while a stalled follower lets them grow (unlike ``seconds_behind_source``, which grows for a quiet
partition too). A backup whose source has no consumer groups stores no rounds: then these are not exported.

and job-wide ``passes_total``, ``last_pass_timestamp_seconds``, ``pass_seconds``, ``frozen`` (1 once ``--until``
was reached) and ``up``.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from spark_kafka_backup.catalog.offset_history import HistoryEntry
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


#: Partition key of the backup: (topic, partition).
Key = tuple[str, int]

#: Records of the backup a standby does not hold from ``start`` (its next source offset to restore) below ``end``.
CountMissing = Callable[[Key, int, int], int]

#: The offset of the backup's first record at or after an offset of a partition (``None``: none).
FirstFrom = Callable[[Key, int], int | None]


@dataclass(frozen=True)
class RoundsBehind:
    """Where a standby stands against the backup's offset rounds (:class:`RoundLag`)."""

    #: The newest round's time (epoch ms); ``None``: the backup stored no round.
    newest: int | None
    #: The newest round the standby covers (epoch ms); ``None``: none of those kept (see ``at_least``).
    covered: int | None
    #: Rounds newer than the covered one.
    rounds: int
    #: Per partition of the newest round: records below its furthest group offset the standby does not hold.
    records: Mapping[Key, int]
    #: When no kept round is covered: the oldest kept round's time (the covered one, if any, is older).
    at_least: int | None = None

    def seconds(self, now_ms: int) -> float | None:
        """Now minus the covered round's time (or the oldest kept round's, a lower bound); ``None``: no rounds."""
        since = self.covered if self.covered is not None else self.at_least
        return None if since is None else max(0.0, (now_ms - since) / 1000)


class RoundLag:
    """The standby's lag by the backup's offset rounds (module docstring).

    Fed the history's new entries at every pass (:class:`~spark_kafka_backup.catalog.offset_history.HistoryTail`),
    it keeps, of each round not older than the newest covered one, the furthest group offset per partition, at most
    :attr:`keep` rounds (the oldest dropped first): its memory does not grow with the follower's run time."""

    def __init__(self, keep: int = 1440) -> None:
        self.keep = keep
        self.rounds: deque[tuple[int, dict[Key, int]]] = deque()

    def add(self, entries: Iterable[HistoryEntry]) -> None:
        for entry in entries:
            if self.rounds and self.rounds[-1][0] == entry.round_time:
                furthest = self.rounds[-1][1]
            elif self.rounds and entry.round_time < self.rounds[-1][0]:
                continue  # older than a round already kept: the history gives rounds in time order
            else:
                furthest = {}
                self.rounds.append((entry.round_time, furthest))
                if len(self.rounds) > self.keep:
                    self.rounds.popleft()
            key = (entry.topic, entry.partition)
            furthest[key] = max(furthest.get(key, entry.offset), entry.offset)

    def behind(self, positions: Mapping[Key, int | None], first_from: FirstFrom, missing: CountMissing) -> RoundsBehind:
        """``positions``: each followed partition's next source offset to restore (``None``: nothing restored);
        partitions not in it are not followed and do not count. ``first_from(key, offset)``: the backup's first record
        at or after ``offset`` (asked at most once a partition, and only where a round's group is past the standby);
        ``missing``: counted only for the newest round's partitions that are behind."""
        firsts: dict[Key, int | None] = {}

        def held(key: Key, offset: int) -> bool:
            """Whether the standby holds every record of the backup below ``offset``."""
            start = positions[key] or 0
            if offset <= start:
                return True
            if key not in firsts:
                firsts[key] = first_from(key, start)
            first = firsts[key]
            return first is None or offset <= first  # nothing the backup holds from the standby's position to it

        if not self.rounds:
            return RoundsBehind(None, None, 0, {})
        newest_time, newest = self.rounds[-1]
        records = {
            key: 0 if held(key, offset) else missing(key, positions[key] or 0, offset)
            for key, offset in newest.items()
            if key in positions
        }
        for index in range(len(self.rounds) - 1, -1, -1):
            time_ms, furthest = self.rounds[index]
            if all(held(key, offset) for key, offset in furthest.items() if key in positions):
                for _ in range(index):
                    self.rounds.popleft()  # older rounds can tell nothing newer than this one
                return RoundsBehind(newest_time, time_ms, len(self.rounds) - 1, records)
        return RoundsBehind(newest_time, None, len(self.rounds), records, at_least=self.rounds[0][0])


def lag_samples(
    lags: Mapping[tuple[str, int], PartitionLag],
    now_ms: int,
    *,
    passes: int,
    last_pass_at: float | None,
    pass_seconds: float | None,
    frozen: bool,
    up: bool,
    rounds: RoundsBehind | None = None,
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
    if rounds is not None and rounds.newest is not None:
        seconds = rounds.seconds(now_ms)
        if seconds is not None:
            samples.append(Sample(PREFIX + "round_seconds_behind", seconds,
                                  "now minus the time of the backup's newest offset round the standby covers (every "
                                  "record below each of its group offsets restored)"))  # fmt: skip
        samples.append(Sample(PREFIX + "rounds_behind", rounds.rounds,
                              "offset rounds of the backup newer than the newest the standby covers"))  # fmt: skip
        for (topic, partition), records in sorted(rounds.records.items()):
            labels = {"topic": topic, "partition": str(partition)}
            samples.append(Sample(PREFIX + "records_behind_round", records,
                                  "records below the furthest group offset of the backup's newest offset round that "
                                  "the standby does not hold", labels))  # fmt: skip
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
