"""What a running restore tells its monitoring: progress and remaining records per target partition.

Per target partition (labels ``topic`` and ``partition`` of the target):

``records_planned``
    Records this run produces there (the plan's selection, less what an
    earlier run already restored; once the tasks are done, what they produced).
``records_restored``
    Records of this run committed there. While the restore runs it is read
    from the restore's progress marker (:mod:`spark_kafka_backup.restore.marker`), which
    names the next source offset: the selected records below it are counted in
    the backup's segment indexes (a local backup and no time window), or else
    estimated in source offsets from the first backed-up offset (gaps and time
    windows make that an overestimate, capped at ``records_planned``). Once the
    tasks are done it is their exact count.
``records_remaining``
    ``records_planned - records_restored``.

Job-wide: planned and finished partitions, records per second since the
tasks started, ``up`` and, once the restore has succeeded,
``last_success_timestamp_seconds``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from spark_kafka_backup.kafka.cluster import TopicPartitionKey
from spark_kafka_backup.metrics import Sample
from spark_kafka_backup.restore.marker import ProgressMarker
from spark_kafka_backup.restore.plan import PartitionPlan

PREFIX = "kbackup_restore_"


@dataclass
class _Partition:
    identity: str
    resume_from: int
    planned: int
    restored: int = 0
    #: Marker positions per record of this partition: 1 for source offsets (at least; gaps make it more), the
    #: target's partition count for a repartitioned topic's merged stream (an estimate: records spread evenly).
    spread: int = 1


#: Counts the records of this run below a source offset on a target partition (None: cannot be counted cheaply).
Counter = Callable[[TopicPartitionKey, int], "int | None"]


class RestoreMetrics:
    """The restore's metrics state (module docstring)."""

    def __init__(
        self,
        parts: Iterable[PartitionPlan],
        *,
        first_offsets: Mapping[TopicPartitionKey, int] | None = None,
        count: Counter | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``first_offsets``: each target partition's first backed-up source offset (the estimate's base);
        ``count``: exact counts where it can make them."""
        self._clock = clock
        firsts = first_offsets or {}
        self._parts = {
            (part.target_topic, part.target_partition): _Partition(
                part.identity,
                max(
                    part.resume_from,
                    part.window.from_offset or 0,
                    firsts.get((part.target_topic, part.target_partition), 0),
                ),
                part.to_produce,
                spread=part.repartition.partitions if part.repartition is not None else 1,
            )
            for part in parts
        }
        self._count = count
        self._started_at = clock()
        self._tasks_started_at: float | None = None
        self._partitions_done = 0
        self._finished_at: float | None = None
        self._stopped = False

    def observe_tasks_started(self, at: float) -> None:
        """The restore's Spark tasks start (its rate counts from here)."""
        self._tasks_started_at = at

    def observe_markers(self, markers: Mapping[TopicPartitionKey, ProgressMarker]) -> None:
        """The progress markers read from the target: this restore's own move its partitions on."""
        for key, marker in markers.items():
            state = self._parts.get(key)
            if state is None or marker.restore != state.identity:
                continue  # another restore's marker, or one from before this run's plan
            counted = self._count(key, marker.resume_from) if self._count is not None else None
            estimate = (marker.resume_from - state.resume_from) // state.spread if counted is None else counted
            state.restored = max(state.restored, min(state.planned, max(0, estimate)))

    def observe_partitions_done(self, finished: int) -> None:
        self._partitions_done = finished

    def observe_results(self, produced: Mapping[TopicPartitionKey, int]) -> None:
        """The tasks' own counts, once every task succeeded: exact, and nothing remains (a task that found more
        of its records already in the target than the plan did produced fewer, and planned that many)."""
        for key, records in produced.items():
            if key in self._parts:
                self._parts[key].restored = self._parts[key].planned = records
        self._partitions_done = len(self._parts)

    def observe_stopped(self, at: float, *, succeeded: bool) -> None:
        self._stopped = True
        if succeeded:
            self._finished_at = at

    def remaining(self) -> int:
        return sum(state.planned - state.restored for state in self._parts.values())

    def samples(self) -> list[Sample]:
        out: list[Sample] = []
        for (topic, partition), state in sorted(self._parts.items()):
            labels = {"topic": topic, "partition": str(partition)}
            out.append(Sample(PREFIX + "records_planned", state.planned, "Records this run produces", labels))
            out.append(Sample(PREFIX + "records_restored", state.restored, "Records of this run committed", labels))
            out.append(
                Sample(PREFIX + "records_remaining", state.planned - state.restored, "Records still to produce", labels)
            )
        out.append(Sample(PREFIX + "partitions_planned", len(self._parts), "Target partitions this run restores"))
        out.append(Sample(PREFIX + "partitions_done", self._partitions_done, "Target partitions finished"))
        if self._tasks_started_at is not None:
            elapsed = max(self._clock() - self._tasks_started_at, 1e-9)
            restored = sum(state.restored for state in self._parts.values())
            out.append(Sample(PREFIX + "records_per_second", restored / elapsed, "Records committed per second"))
        out.append(Sample(PREFIX + "started_timestamp_seconds", self._started_at, "Unix time the job started"))
        if self._finished_at is not None:
            out.append(
                Sample(PREFIX + "last_success_timestamp_seconds", self._finished_at, "Unix time the restore succeeded")
            )
        out.append(Sample(PREFIX + "up", 0 if self._stopped else 1, "1 while the restore runs"))
        return out
