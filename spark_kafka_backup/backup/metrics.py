"""What a running backup tells its monitoring: lag, throughput, the times of its last successes.

Definitions (each partition of a selected topic, labels ``topic`` and ``partition``):

``last_stable_offset``
    The cluster's last stable offset (LSO): the end a ``read_committed``
    consumer sees, i.e. below any open transaction. Sampled by the job every
    ``--metrics-interval`` seconds and with every consumer offset round.
``backed_up_offset``
    Every record below this offset is durably in the backup: the end offset
    of the last micro-batch Spark recorded as committed, which the sink had
    synced (fsync, or a finished upload) before it reported success.
``lag_records``
    ``last_stable_offset - backed_up_offset`` (never below 0), both as last
    known. Offsets, not records: a compacted or transactional partition has
    fewer records than offsets.
``lag_seconds``
    How long the oldest record not yet in the backup has at least been in the
    cluster: the time since the first LSO sample that was above
    ``backed_up_offset``; 0 when the backup holds everything of the latest sample.

Job-wide: records and bytes written into the backup (counters since the job
started, and per second over the last minute), the unix time of the last
trigger the query completed (a committed micro-batch, or a look that found
nothing new: an idle backup is not a stuck one), of the last stored consumer offset round and of the
last completed checkpoint, the checkpoints waiting for the backup to reach
their cut, the last committed micro-batch id (Spark's checkpoint), and
``up`` (1 while the job runs; a snapshot's final snapshot says 0 and
``last_success_timestamp_seconds`` says when it finished).

Memory: per partition two numbers and the LSO samples the backup has not
reached yet (at most :data:`MAX_SAMPLES_BEHIND`).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from spark_kafka_backup.kafka.cluster import TopicPartitionKey
from spark_kafka_backup.metrics import Sample

#: Throughput is averaged over this many seconds of committed micro-batches.
RATE_WINDOW_SECONDS = 60.0
#: LSO samples kept per partition while the backup is behind them; when full, every other one is dropped (the
#: oldest stays: it alone makes ``lag_seconds``), so a long lag costs little memory and loses only resolution.
MAX_SAMPLES_BEHIND = 64

PREFIX = "kbackup_backup_"


@dataclass
class _Partition:
    lso: int | None = None
    backed_up: int | None = None
    #: (time, LSO) of samples above ``backed_up``, oldest first, LSOs increasing.
    behind: deque[tuple[float, int]] = field(default_factory=deque)

    def drop_reached(self) -> None:
        while self.behind and self.backed_up is not None and self.behind[0][1] <= self.backed_up:
            self.behind.popleft()


@dataclass
class BatchWritten:
    """What one committed micro-batch wrote, per topic (records, bytes), and when: the sink's report."""

    batch_id: int
    by_topic: dict[str, tuple[int, int]]
    at: float


class BackupMetrics:
    """The backup's metrics state: fed by the job's loop, read as :class:`Sample` lists (module docstring)."""

    def __init__(self, *, rate_window: float = RATE_WINDOW_SECONDS, clock: Callable[[], float] = time.time) -> None:
        """``rate_window``: seconds of batches the rates average (at least a minute)."""
        self._clock = clock
        self._rate_window = max(RATE_WINDOW_SECONDS, rate_window)
        self._partitions: dict[TopicPartitionKey, _Partition] = {}
        self._records: dict[str, int] = {}
        self._bytes: dict[str, int] = {}
        self._recent: deque[BatchWritten] = deque()
        self._counted_batches: set[int] = set()
        self._started_at = clock()
        self._last_batch_id: int | None = None
        # Until a trigger completes, the job's start: a query that never completes one is stalled since then.
        self._last_batch_at: float = self._started_at
        self._last_round_at: float | None = None
        self._last_checkpoint_at: float | None = None
        self._checkpoints_waiting = 0
        self._finished_at: float | None = None
        self._stopped = False

    # -- what happened -------------------------------------------------------

    def observe_last_stable_offsets(
        self, ends: Mapping[TopicPartitionKey, int], at: float, *, complete: bool = True
    ) -> None:
        """A sample of the cluster's LSOs taken at unix time ``at``; ``complete``: of every selected partition,
        so a partition left out of it is gone (its topic deleted or no longer selected) and is forgotten."""
        if complete:
            for key in [key for key in self._partitions if key not in ends]:
                del self._partitions[key]
        for key, lso in ends.items():
            state = self._partitions.setdefault(key, _Partition())
            if state.lso is not None and lso < state.lso:
                # The topic was recreated (delete-records does not lower the LSO): what was backed up is another
                # incarnation's; unknown until the backup's next batch reports the new one.
                state.behind.clear()
                state.backed_up = None
            state.lso = lso
            ahead = state.backed_up is None or lso > state.backed_up
            newer = not state.behind or lso > state.behind[-1][1]
            if ahead and newer:
                if len(state.behind) >= MAX_SAMPLES_BEHIND:
                    oldest = state.behind[0]
                    state.behind = deque([oldest, *list(state.behind)[2::2]])
                state.behind.append((at, lso))

    def observe_backed_up(self, offsets: Mapping[TopicPartitionKey, int]) -> None:
        """End offsets of the last committed micro-batch: everything below is durable in the backup."""
        for key, offset in offsets.items():
            state = self._partitions.setdefault(key, _Partition())
            state.backed_up = offset
            state.drop_reached()

    def observe_trigger(self, at: float) -> None:
        """A trigger of the query completed at unix time ``at``: a micro-batch committed, or the query found
        nothing new (Spark reports an idle trigger about every 10 s)."""
        self._last_batch_at = at

    def observe_batch(self, batch_id: int) -> None:
        """Spark recorded micro-batch ``batch_id`` (one with records) as committed."""
        if self._last_batch_id is None or batch_id > self._last_batch_id:
            self._last_batch_id = batch_id

    def observe_written(self, written: BatchWritten) -> None:
        """The sink's report of one batch (a batch replayed after a crash is counted once)."""
        if written.batch_id in self._counted_batches:
            return
        self._counted_batches.add(written.batch_id)
        if len(self._counted_batches) > 1000:
            self._counted_batches = set(sorted(self._counted_batches)[-100:])
        for topic, (records, size) in written.by_topic.items():
            self._records[topic] = self._records.get(topic, 0) + records
            self._bytes[topic] = self._bytes.get(topic, 0) + size
        self._recent.append(written)

    def observe_round_stored(self, at: float) -> None:
        self._last_round_at = at

    def observe_checkpoints(self, *, waiting: int, completed_at: float | None = None) -> None:
        """Checkpoints waiting for the backup; ``completed_at``: when the newest completed one was (the job seeds
        it from the catalog at its start, so a snapshot run that fails still shows the last good one)."""
        self._checkpoints_waiting = waiting
        if completed_at is not None:
            self._last_checkpoint_at = max(completed_at, self._last_checkpoint_at or completed_at)

    def observe_stopped(self, at: float, *, finished: bool) -> None:
        """The job ends; ``finished``: a snapshot that backed up everything up to its start's LSOs."""
        self._stopped = True
        if finished:
            self._finished_at = at

    # -- what it amounts to --------------------------------------------------

    def lag(self, key: TopicPartitionKey) -> tuple[int, float] | None:
        """(records, seconds) of one partition's lag; None while the LSO or the backed-up offset is unknown."""
        state = self._partitions.get(key)
        if state is None or state.lso is None or state.backed_up is None:
            return None
        seconds = self._clock() - state.behind[0][0] if state.behind else 0.0
        return max(0, state.lso - state.backed_up), max(0.0, seconds)

    def samples(self) -> list[Sample]:
        now = self._clock()
        out: list[Sample] = []
        for (topic, partition), state in sorted(self._partitions.items()):
            labels = {"topic": topic, "partition": str(partition)}
            if state.lso is not None:
                out.append(
                    Sample(
                        PREFIX + "last_stable_offset",
                        state.lso,
                        "The cluster's last stable offset, as last sampled",
                        labels,
                    )
                )
            if state.backed_up is not None:
                out.append(
                    Sample(
                        PREFIX + "backed_up_offset",
                        state.backed_up,
                        "Every record below this offset is durably in the backup",
                        labels,
                    )
                )
            lag = self.lag((topic, partition))
            if lag is not None:
                out.append(
                    Sample(
                        PREFIX + "lag_records",
                        lag[0],
                        "Offsets between what is durably backed up and the last stable offset",
                        labels,
                    )
                )
                out.append(
                    Sample(
                        PREFIX + "lag_seconds",
                        lag[1],
                        "The oldest record not yet backed up has been in the cluster at least this long",
                        labels,
                    )
                )
        for topic in sorted(self._records):
            labels = {"topic": topic}
            out.append(
                Sample(
                    PREFIX + "records_written_total",
                    self._records[topic],
                    "Records written into the backup since the job started",
                    labels,
                    "counter",
                )
            )
            out.append(
                Sample(
                    PREFIX + "bytes_written_total",
                    self._bytes[topic],
                    "Bytes of record files written into the backup since the job started",
                    labels,
                    "counter",
                )
            )
        while self._recent and self._recent[0].at < now - self._rate_window:
            self._recent.popleft()
        window = min(self._rate_window, max(now - self._started_at, 1e-9))
        records = sum(r for batch in self._recent for r, _ in batch.by_topic.values())
        size = sum(b for batch in self._recent for _, b in batch.by_topic.values())
        out.append(
            Sample(
                PREFIX + "records_per_second",
                records / window,
                "Records written per second over the last minute (or metrics interval)",
            )
        )
        out.append(
            Sample(
                PREFIX + "bytes_per_second",
                size / window,
                "Bytes written per second over the last minute (or metrics interval)",
            )
        )
        out.append(
            Sample(
                PREFIX + "last_batch_timestamp_seconds",
                self._last_batch_at,
                "Unix time the query last completed a trigger (a micro-batch, or a look that found nothing new); "
                "the job's start until one completes",
            )
        )
        optional = (
            ("last_batch_id", self._last_batch_id, "Id of the last committed micro-batch in the Spark checkpoint"),
            (
                "last_offsets_round_timestamp_seconds",
                self._last_round_at,
                "Unix time of the last stored consumer offset round",
            ),
            (
                "last_checkpoint_timestamp_seconds",
                self._last_checkpoint_at,
                "Unix time of the last completed checkpoint",
            ),
            ("last_success_timestamp_seconds", self._finished_at, "Unix time a snapshot backup finished"),
        )
        for name, value, text in optional:
            if value is not None:
                out.append(Sample(PREFIX + name, value, text))
        out.append(
            Sample(
                PREFIX + "checkpoints_waiting",
                self._checkpoints_waiting,
                "Checkpoints whose cut the backup has not reached yet",
            )
        )
        out.append(Sample(PREFIX + "started_timestamp_seconds", self._started_at, "Unix time the job started"))
        out.append(Sample(PREFIX + "up", 0 if self._stopped else 1, "1 while the backup runs"))
        return out
