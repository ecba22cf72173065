"""A continuous backup's periodic questions to the cluster, asked on a thread of their own.

Every ``interval`` seconds the watch (1) records the selected topics'
configuration in the catalog and captures the cluster around them (:mod:`spark_kafka_backup.backup.cluster_metadata`),
at most every :data:`TOPICS_INTERVAL_SECONDS`,
and (2) takes a consumer offset round (:func:`~spark_kafka_backup.backup.group_offsets.take_round`);
every ``sample_every`` seconds between rounds it reads the last stable
offsets alone for the job's metrics; every :data:`REQUESTS_CHECK_SECONDS` it (3) takes the cut of each checkpoint
requested since the last look.
Rounds and cuts are handed to the job's loop, which stores a round and
completes a checkpoint once the backup has reached it: only the job's loop
knows what the query has committed.

Why a thread: a request to a cluster that lost a node can wait for its full
timeout (see :mod:`spark_kafka_backup.kafka.admin_session`), and a whole round through
an outage takes a minute or more. Asked on the job's loop, that stopped its
progress lines, its lease checks and its reaction to SIGTERM for as long.

Failures: a transient one (no connection, no leader, a timeout) is a
progress line (:class:`~spark_kafka_backup.kafka.outage.OutageReport`) and the next round
asks again with a new client; the round is simply missing, which costs
nothing but freshness. Anything else (a refusal, an origin conflict, a
storage error) stops the watch and is raised by :meth:`ClusterWatch.collect`
in the job's thread.

Lifecycle: ``start()`` once the job's first round is taken; ``collect()``
from the job's loop; ``stop()`` at the end, which waits at most one request
timeout for a round in flight.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from spark_kafka_backup.backup.cluster_metadata import MetadataKeeper
from spark_kafka_backup.backup.group_offsets import (
    OffsetRound,
    RecordedTopics,
    ensure_partitions,
    last_stable_offsets,
    record_topics,
    take_round,
)
from spark_kafka_backup.backup.origin import Recreated
from spark_kafka_backup.catalog import checkpoints
from spark_kafka_backup.catalog.topics import read_topic_record
from spark_kafka_backup.errors import ClusterError
from spark_kafka_backup.kafka.admin_session import AdminSession
from spark_kafka_backup.kafka.cluster import TopicPartitionKey, topic_ids
from spark_kafka_backup.kafka.isolated_groups import IsolatedGroupOffsets
from spark_kafka_backup.kafka.outage import OutageReport
from spark_kafka_backup.kafka.topics import TopicSelection
from spark_kafka_backup.partition.writer import DEFAULT_MAX_SEGMENT_SIZE
from spark_kafka_backup.storage import Location
from spark_kafka_backup.text import count

log = logging.getLogger("spark_kafka_backup.backup")

#: The topics' configuration changes rarely: it is read again at most this often.
TOPICS_INTERVAL_SECONDS = 60.0
#: At most one "not answering" line per this many seconds.
OUTAGE_LOG_SECONDS = 60.0
#: How often the target is looked at for new checkpoint requests (``spark-kafka-backup checkpoint create``).
REQUESTS_CHECK_SECONDS = 1.0
#: How long :meth:`ClusterWatch.stop` waits beyond one request timeout for a round in flight.
STOP_GRACE_SECONDS = 5.0


@dataclass
class Collected:
    """What the watch found since the last :meth:`ClusterWatch.collect`."""

    rounds: list[OffsetRound] = field(default_factory=list)
    cuts: list[checkpoints.Checkpoint] = field(default_factory=list)
    #: (unix time, last stable offsets) of the selected partitions: every round's, and one per ``sample_every``.
    samples: list[tuple[float, dict[TopicPartitionKey, int]]] = field(default_factory=list)
    #: Topics found deleted and created again (the cluster id with them, for the message).
    recreated: list[tuple[str, Recreated]] = field(default_factory=list)


class ClusterWatch:
    """Asks the cluster every ``interval`` seconds on a daemon thread (module docstring)."""

    def __init__(
        self,
        target: Location,
        selection: TopicSelection,
        session: AdminSession,
        *,
        servers: str,
        interval: float,
        seen_checkpoint: int,
        topics_recorded_at: float,
        max_segment_size: int = DEFAULT_MAX_SEGMENT_SIZE,
        prepared: Iterable[TopicPartitionKey] = (),
        sample_every: float | None = None,
        groups: IsolatedGroupOffsets | None = None,
        metadata: MetadataKeeper | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._target = target
        self._selection = selection
        self._session = session
        self._groups = groups
        self._metadata = metadata
        self._servers = servers
        self._interval = interval
        self._sample_every = sample_every
        self._seen_checkpoint = seen_checkpoint  # requests get increasing ids: only newer files hold new ones
        self._topics_due = topics_recorded_at + TOPICS_INTERVAL_SECONDS
        self._max_segment_size = max_segment_size
        self._prepared: set[TopicPartitionKey] = set(prepared)  # partitions known to have their files
        self._recorded_ids: dict[str, str] = {}  # the target's recorded topic ids, read once (see take_round)
        self._clock = clock
        self._outage = OutageReport(log, every=OUTAGE_LOG_SECONDS, clock=clock)
        self._found = Collected()
        self._failure: BaseException | None = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="spark-kafka-backup-cluster-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def collect(self) -> Collected:
        """Rounds and checkpoint cuts taken since the last call; raises what stopped the watch, in the caller."""
        with self._lock:
            found, self._found = self._found, Collected()
            failure = self._failure
        if failure is not None:
            raise failure
        return found

    def stop(self) -> None:
        """Ask no more; wait at most one request timeout for the round in flight (the thread is a daemon)."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        if not self._thread.is_alive():
            return
        self._thread.join(self._session.attempt_timeout + STOP_GRACE_SECONDS)
        if self._thread.is_alive():
            log.info("a consumer offset round was still waiting for the cluster at the end: left unfinished")

    # -- the thread ----------------------------------------------------------

    def _run(self) -> None:
        next_round = self._clock() + self._interval
        next_sample = self._clock() + (self._sample_every or 0)
        while not self._stopping.wait(min(REQUESTS_CHECK_SECONDS, self._interval)):
            try:
                due = self._clock() >= next_round
                if due:
                    next_round = self._clock() + self._interval
                sample = not due and self._sample_every is not None and self._clock() >= next_sample
                if due or sample:
                    next_sample = self._clock() + (self._sample_every or 0)
                self.ask_once(with_round=due, with_sample=sample)
            except BaseException as exc:  # handed to the job's thread, which ends the backup with it
                with self._lock:
                    self._failure = exc
                return

    def ask_once(self, *, with_round: bool = True, with_sample: bool = False) -> None:
        """One pass: topics (when due) and a round (``with_round``) or the last stable offsets alone
        (``with_sample``), then the cuts of new checkpoint requests."""
        asked = self._clock()
        try:
            sampled = self._sample() if with_sample else False
            if with_round:
                if asked >= self._topics_due:
                    self._record_topics()
                    self._topics_due = asked + TOPICS_INTERVAL_SECONDS
                round_ = self._session.call(self._take_round)
                self._prepare(round_.ends)
                with self._lock:
                    self._found.rounds.append(round_)
                    self._found.samples.append((round_.taken_at, round_.ends))
            cut = self._take_cuts()
        except ClusterError as exc:
            if not exc.transient:
                raise
            self._outage.failed(
                asked,
                exc,
                "consumer offset rounds and checkpoint cuts wait; retrying, the backup resumes when it answers",
            )
            return
        if with_round or sampled or cut:  # a pass that asked the cluster nothing says nothing about it
            self._outage.answered()

    def _sample(self) -> bool:
        """The last stable offsets for the metrics alone: a failure costs one sample, never the backup.

        Whether the cluster answered."""
        try:
            sampled = self._session.call(
                lambda admin, timeout: last_stable_offsets(admin, self._selection, timeout=timeout), patience=0
            )
        except Exception as exc:
            log.debug("last stable offsets not sampled: %s", exc)
            return False
        with self._lock:
            self._found.samples.append(sampled)
        return True

    def _record_topics(self) -> None:
        def record(admin: object, timeout: float) -> RecordedTopics:
            return record_topics(self._target, admin, self._selection, servers=self._servers, timeout=timeout)

        recorded = self._session.call(record)
        if recorded.changed:
            log.info("topic configuration recorded for %s", count(recorded.changed, "topic"))
        if recorded.recreated:
            with self._lock:
                self._found.recreated += [(recorded.cluster_id, item) for item in recorded.recreated]
        if self._metadata is not None:
            try:
                self._session.call(self._metadata.keep, patience=0)  # never holds up the round after it
            except ClusterError as exc:  # not answering now: captured at the next look, the round taken all the same
                if not exc.transient:
                    raise
                log.debug("cluster metadata not captured this time: %s", exc)

    def _prepare(self, partitions: Iterable[TopicPartitionKey]) -> None:
        """Give partitions that appeared since the last round (a topic grew, a new topic matched) their files, so
        that the backup shows them, empty ones too."""
        new = sorted(set(partitions) - self._prepared)
        if not new:
            return

        def prepare(admin: object, timeout: float) -> tuple[int, list[TopicPartitionKey]]:
            # Not for a topic deleted and created again: its new partitions are not the backed-up incarnation's.
            # A topic whose id the cluster did not give (gone between the round and now) is asked about again.
            ids = topic_ids(admin, {topic for topic, _ in new}, timeout=timeout)
            same = [(t, p) for t, p in new if (record := read_topic_record(self._target, t)) is None
                    or record.topic_id in (None, ids.get(t))]  # fmt: skip
            created = ensure_partitions(self._target, admin, self._selection, max_segment_size=self._max_segment_size,
                                        only=same)  # fmt: skip
            return created, [key for key in new if key in same or key[0] in ids]

        created, settled = self._session.call(prepare)
        self._prepared.update(settled)
        if created:
            log.info("%s prepared in the backup", count(created, "new partition"))

    def _take_round(self, admin: Any, timeout: float) -> OffsetRound:
        return take_round(admin, self._selection, target=self._target, timeout=timeout, group_reader=self._groups,
                          recorded_ids=self._recorded_ids)  # fmt: skip

    def _take_cuts(self) -> bool:
        """Take the cut of each new checkpoint request; whether there was one."""
        served = False
        for requested in checkpoints.list_checkpoints(self._target, above=self._seen_checkpoint):
            if requested.status == "requested":
                # May fail transiently: the request stays unseen and is served at the next round.
                cut = self._session.call(self._take_round)
                taken = checkpoints.take(self._target, requested, cut.groups, cut.ends, int(cut.taken_at * 1000))
                log.info("checkpoint %d: cut taken over %s", taken.id, count(len(taken.ends), "partition"))
                with self._lock:
                    self._found.cuts.append(taken)
                served = True
            self._seen_checkpoint = max(self._seen_checkpoint, requested.id)
        return served
