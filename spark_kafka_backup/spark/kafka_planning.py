"""The driver side of the ``kbackup_kafka`` source: the offsets each micro-batch reads.

:class:`OffsetPlanner` asks the cluster for each selected partition's latest offset (and each topic's id, and the
earliest offset of each partition new to the query: where it starts), through an admin session that replaces a client
that stopped answering, and turns them into the end offsets of the next micro-batch and its reading tasks
(:func:`~spark_kafka_backup.spark.kafka_reader.pack_ranges`). It lives in the one long-lived driver-side Python
process Spark keeps for a Python source; executors never make one (they read with
:func:`~spark_kafka_backup.spark.kafka_task.read_task`). What it does through broker failures and outages is
described in :mod:`spark_kafka_backup.spark.kafka_source`.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Container, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows

from spark_kafka_backup.errors import ClusterError, SparkKafkaBackupError
from spark_kafka_backup.kafka.admin_session import AdminSession
from spark_kafka_backup.kafka.cluster import TopicPartitionKey, list_offsets, partition_counts, topic_ids
from spark_kafka_backup.kafka.outage import OutageReport
from spark_kafka_backup.logsetup import ensure_console_logging
from spark_kafka_backup.spark.kafka_ranges import KafkaRange, KafkaTask, pack_ranges
from spark_kafka_backup.spark.source_options import SourceOptions, decode_ids, decode_offsets, encode_offsets
from spark_kafka_backup.text import count as count_of

log = logging.getLogger("spark_kafka_backup.source")

#: How often a snapshot asks a cluster that stopped answering again.
UNREACHABLE_RETRY_SECONDS = 2.0
#: At most one "not answering" warning per this many seconds (Spark asks every trigger).
UNREACHABLE_LOG_SECONDS = 30.0
#: How long one planning step goes on asking (with a new admin client after a failure) before it plans nothing.
PLANNING_PATIENCE_SECONDS = 12.0
#: The (topic, partition, log start) of offsets this process said were deleted before the backup started.
_TOLD_DELETED: set[tuple[str, int, int]] = set()


class _Every:
    """Every partition (``in`` is always true): a snapshot's target asks for no earliest offset."""

    def __contains__(self, key: object) -> bool:
        return True


class _GoingOn:
    """The partitions a trigger asks no earliest offset for (``in``): those the query reads on from ``begin``, and,
    in a snapshot, those outside its ``target`` (never read)."""

    def __init__(self, begin: Mapping[TopicPartitionKey, int], target: Mapping[TopicPartitionKey, int] | None) -> None:
        self.begin, self.target = begin, target

    def __contains__(self, key: object) -> bool:
        return key in self.begin or (self.target is not None and key not in self.target)


class OffsetPlanner:
    """The driver side of the source: what each micro-batch reads (see the module docstring)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._session: AdminSession | None = None  # made at first use, on the driver
        self._latest: dict[TopicPartitionKey, int] = {}
        self._target: dict[TopicPartitionKey, int] | None = None
        self._outage = OutageReport(log, every=UNREACHABLE_LOG_SECONDS)
        self._leaderless_logged = -math.inf
        #: The selected topics' ids at the last planning step, and the topics refused for a new id (logged once).
        self._ids_now: dict[str, str] = {}
        self._refused: set[str] = set()

    def _current(
        self, *, partial: bool = False, known: Container[TopicPartitionKey] = ()
    ) -> tuple[dict[TopicPartitionKey, int], dict[TopicPartitionKey, int]]:
        """Earliest and latest offsets of every selected partition now; the earliest only of those not ``known``
        (a query's partitions go on from where they are: offsets deleted there since are found by the task that
        reads them, :func:`~spark_kafka_backup.spark.read_checks.deleted_under`, one request less per trigger).

        A client that stops answering is replaced by a new one (see
        :mod:`spark_kafka_backup.kafka.admin_session`) for up to
        :data:`PLANNING_PATIENCE_SECONDS`; then the transient error is raised.
        ``partial``: partitions whose leader does not answer are left out of
        both (they are planned at a later trigger), the others are there; an
        error only when none answers.
        """
        if self._session is None:
            self._session = AdminSession(self.options.client)

        def offsets_now(
            admin: Any, timeout: float
        ) -> tuple[dict[TopicPartitionKey, int], dict[TopicPartitionKey, int]]:
            return self._offsets_now(admin, timeout, partial=partial, known=known)

        return self._session.call(offsets_now, patience=PLANNING_PATIENCE_SECONDS)

    def _offsets_now(
        self, admin: Any, timeout: float, *, partial: bool, known: Container[TopicPartitionKey] = ()
    ) -> tuple[dict[TopicPartitionKey, int], dict[TopicPartitionKey, int]]:
        counts = partition_counts(admin, timeout=timeout)
        if self.options.selection.topics is not None:
            missing = [t for t in self.options.selection.topics if t not in counts]
            if missing and not any(t in counts for t in self.options.selection.topics):
                raise SparkKafkaBackupError(
                    f"none of the topics {', '.join(self.options.selection.topics)} exists on "
                    f"{self.options.client['bootstrap.servers']}"
                )
        selected = self.options.selection.select(counts)
        keys = [(t, p) for t in selected for p in range(counts[t])]
        new = [key for key in keys if key not in known]
        # The three questions go to different nodes (ids to the client's "controller", offsets to each leader):
        # asked at once, a dead node costs one timeout of the trigger, not one per question.
        with ThreadPoolExecutor(3, thread_name_prefix="spark-kafka-backup-planning") as asking:
            ids = asking.submit(topic_ids, admin, selected, timeout=timeout)
            # Partitions new to the query whose start does not come at once are planned at a later trigger (below):
            # no waiting for them in a continuous query.
            earliest_asked = asking.submit(
                list_offsets, admin, new, latest=False, timeout=timeout, partial=partial,
                retry_seconds=0.0 if partial else None,
            )  # fmt: skip
            latest_asked = asking.submit(
                list_offsets, admin, keys, latest=True, read_committed=self.options.read_committed, timeout=timeout,
                partial=partial,
            )  # fmt: skip
            try:
                self._ids_now = ids.result()
            except ClusterError as exc:
                # Not known this trigger: nothing is refused on it, and the tasks still confirm the ids they were
                # given before handing records on (a topic first seen now is read without one). The client may be
                # waiting for a dead "controller": the next trigger asks with a new one.
                log.debug("topic ids not read for this trigger: %s", exc)
                self._ids_now = {}
                if exc.transient and self._session is not None:
                    self._session.renew()
            latest = latest_asked.result()
            try:
                earliest = earliest_asked.result()
            except ClusterError as exc:
                if not partial:
                    raise
                # Only partitions new to the query are asked (a topic the pattern matched a moment ago, partitions
                # added): without their start they are left out of this trigger, reported below as unanswered, and
                # the others are planned.
                log.debug("earliest offsets of the new partitions not read for this trigger: %s", exc)
                earliest = {}
        answered = {key for key in latest if key in known or key in earliest}
        if len(answered) < len(keys):
            self._report_leaderless(sorted(set(keys) - answered), len(keys))
            # This client may go on sending their requests to a leader that died until its metadata is refreshed;
            # the next trigger asks with a new one, which learns the leaders of now. (In the 3-node failover test a
            # killed leader's partition still got no answer for 40-60 s with a new client each trigger: the other
            # partitions were planned meanwhile.)
            if self._session is not None:
                self._session.renew()
            earliest = {key: offset for key, offset in earliest.items() if key in answered}
            latest = {key: offset for key, offset in latest.items() if key in answered}
        return earliest, latest

    def _report_leaderless(self, missing: list[TopicPartitionKey], total: int) -> None:
        now = time.monotonic()
        if now - self._leaderless_logged < UNREACHABLE_LOG_SECONDS:
            return
        self._leaderless_logged = now
        shown = ", ".join(f"{topic}/{partition}" for topic, partition in missing[:5])
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        log.warning(
            "no answer for %d of %d partitions (%s%s: no leader yet?): the others are read on, these when their "
            "leader answers",
            len(missing), total, shown, more,
        )  # fmt: skip

    def initial_offset(self) -> dict[str, Any]:
        """Where a query without a checkpoint starts (``startingOffsets``, or where the backup ends)."""
        ensure_console_logging(log_format=self.options.log_format)
        earliest, latest = self._current()
        stored = self._stored_positions(earliest, latest) if self.options.starting == "earliest" else {}
        for (topic, partition), low in sorted(earliest.items()):
            if low > 0 and (topic, partition) not in stored and (topic, partition, low) not in _TOLD_DELETED:
                _TOLD_DELETED.add((topic, partition, low))  # Spark may ask for the initial offset more than once
                log.warning(
                    "topic %r partition %d: offsets 0..%d no longer exist on the cluster "
                    "(deleted by retention before this backup started)",
                    topic,
                    partition,
                    low - 1,
                )
        starting = self.options.starting
        if starting == "earliest":
            start = {**earliest, **stored}
        elif starting == "latest":
            start = latest
        else:
            assert isinstance(starting, dict)
            start = {}
            for key in latest:
                wanted = starting.get(key, -2)
                start[key] = earliest[key] if wanted == -2 else latest[key] if wanted == -1 else wanted
        return encode_offsets(start, self._ids_now)

    def _stored_positions(
        self, earliest: Mapping[TopicPartitionKey, int], latest: Mapping[TopicPartitionKey, int]
    ) -> dict[TopicPartitionKey, int]:
        """A query started without a checkpoint goes on where the backup (``sourceGapsRoot``) ends, so that what
        the backup holds is read without a break (READ_THROUGH in :mod:`spark_kafka_backup.partition.ledger`): from each
        partition's last stored record, which is read again and compared with the stored one (a target that holds
        other records is refused there); when the source has deleted it since, from the offset after it, and the
        task records the deleted range as lost at the source, exactly (reading from the log start would hide it).
        Partitions whose end is below the backup's (a topic deleted and created again, a log truncated) start at the
        log start, as before, where every record read again is compared with the stored one."""
        if self.options.gaps_root is None:
            return {}
        from spark_kafka_backup.errors import BackupNotFoundError
        from spark_kafka_backup.partition.layout import list_partitions
        from spark_kafka_backup.partition.reader import PartitionReader
        from spark_kafka_backup.storage import parse_location

        root = parse_location(self.options.gaps_root)
        positions = {}
        for topic in sorted({topic for topic, _ in latest}):
            try:
                stored = set(list_partitions(root / topic))
            except BackupNotFoundError:
                # A topic created since the job prepared its partitions (Spark asks for the initial offset again
                # until the first batch is committed): nothing of it is stored yet.
                continue
            for key in sorted(key for key in latest if key[0] == topic and key[1] in stored):
                last = PartitionReader(root / topic, key[1]).last_offset()
                if last is not None and last + 1 <= latest[key]:
                    positions[key] = last if last >= earliest.get(key, 0) else last + 1
        return positions

    def prepare_snapshot(self) -> None:
        """A snapshot reads up to the latest offsets of now, and no further."""
        self._target = self._current(known=_Every())[1]
        log.info(
            "snapshot target: %s, %s",
            count_of(len(self._target), "partition"),
            count_of(sum(self._target.values()), "offset"),
        )

    def _current_or_wait(
        self, known: Container[TopicPartitionKey]
    ) -> tuple[dict[TopicPartitionKey, int], dict[TopicPartitionKey, int]] | None:
        """:meth:`_current` through an outage: ``None`` (continuous) or waiting up to the snapshot's limit."""
        while True:
            asked = time.monotonic()
            try:
                current = self._current(partial=self._target is None, known=known)
            except ClusterError as exc:
                if not exc.transient:
                    raise  # a refusal (authorization, a bad request): asking again changes nothing
                waited = self._outage.failed(asked, exc, "no new data planned, waiting for it to answer")
                if self._target is not None and waited > self.options.snapshot_unreachable:
                    raise ClusterError(
                        f"the source cluster did not answer for {waited:.0f} s during the snapshot ({exc}); "
                        "run it again: it goes on from what is already backed up"
                    ) from exc
                if self._target is None:
                    return None  # Spark asks again at the next trigger
                time.sleep(UNREACHABLE_RETRY_SECONDS)
                continue
            self._outage.answered()
            return current

    def latest_offset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """The end of the next micro-batch, within ``limit``; ``start`` again when the cluster does not answer."""
        ensure_console_logging(log_format=self.options.log_format)
        begin = decode_offsets(start)
        # The earliest offsets only of partitions new to the query (where they start): the others go on from
        # ``begin``, and a task reading from there finds offsets deleted since (read_checks.deleted_under), records
        # them as lost or fails with failOnDataLoss, as a check here would. Under a limit of rows per trigger
        # (maxOffsetsPerTrigger) every partition's is asked: a deleted range counted as available would take the
        # budget of the others, a trigger after another.
        limited = isinstance(limit, ReadMaxRows)
        current = self._current_or_wait(known=() if limited else _GoingOn(begin, self._target))
        if current is None:
            return start
        earliest, latest = current
        ids, refused = self._incarnations(decode_ids(start))
        if refused:  # a topic deleted and created again: its new offsets are not this query's (see _incarnations)
            earliest = {key: offset for key, offset in earliest.items() if key[0] not in refused}
            latest = {key: offset for key, offset in latest.items() if key[0] not in refused}
        self._latest = latest
        if self._target is not None:
            # Snapshot: nothing beyond what existed when the query started.
            latest = {key: min(offset, self._target[key]) for key, offset in latest.items() if key in self._target}
        end = dict(begin)
        available: dict[TopicPartitionKey, int] = {}
        for key, offset in latest.items():
            first = max(begin.get(key, 0), earliest.get(key, 0))
            if offset > first:
                available[key] = offset - first
            end.setdefault(key, begin.get(key, first))
        end.update(admit(begin, earliest, available, limit))
        return encode_offsets(end, ids)

    def _incarnations(self, known: Mapping[str, str]) -> tuple[dict[str, str], set[str]]:
        """The topic ids the next offsets belong to, and the topics refused because theirs changed.

        A topic's offsets count from 0 again when it is deleted and created again; reading on from the old
        incarnation's offsets would append the new one's records to the old one's. So a topic keeps the id it was
        first planned with for good (it is in every offset JSON after), and a topic whose id differs from it is not
        planned again (one error line says so); a topic seen for the first time takes its id now.
        """
        ids = dict(known)
        refused = set()
        for topic, now in self._ids_now.items():
            before = known.get(topic)
            if before is None:
                ids[topic] = now
            elif before != now:
                refused.add(topic)
                if topic not in self._refused:
                    self._refused.add(topic)
                    log.error(
                        "topic %r was deleted and created again: it had topic id %s and now has %s; its records "
                        "are no longer read (its backup keeps the old incarnation; back the new one up into a new "
                        "target)",
                        topic, before, now,
                    )  # fmt: skip
        return ids, refused

    def latest_seen(self) -> dict[str, Any] | None:
        """The latest offsets the last trigger saw (Spark shows them as the source's lag)."""
        return encode_offsets(self._latest) if self._latest else None

    def tasks(self, start: dict[str, Any], end: dict[str, Any]) -> list[KafkaTask]:
        """The reading tasks of the micro-batch from ``start`` to ``end``."""
        begin = decode_offsets(start)
        ids = decode_ids(end)
        ranges = []
        for (topic, partition), stop in sorted(decode_offsets(end).items()):
            first = begin.get((topic, partition), 0)
            if stop > first:
                ranges.append(
                    KafkaRange(
                        topic,
                        partition,
                        first,
                        stop,
                        self.options.client,
                        self.options.include_headers,
                        self.options.read_timeout,
                        self.options.fail_on_data_loss,
                        self.options.gaps_root,
                        ids.get(topic),
                    )
                )
        return pack_ranges(ranges, self.options.min_partitions)


def admit(
    begin: Mapping[TopicPartitionKey, int],
    earliest: Mapping[TopicPartitionKey, int],
    available: Mapping[TopicPartitionKey, int],
    limit: ReadLimit,
) -> dict[TopicPartitionKey, int]:
    """End offsets within ``limit``, shared in proportion to what each partition has."""
    total = sum(available.values())
    budget = limit.max_rows if isinstance(limit, ReadMaxRows) else None
    result = {}
    for key, count in available.items():
        first = max(begin.get(key, 0), earliest.get(key, 0))
        take = count if budget is None or total <= budget else (count * budget) // total
        if budget is not None and total > budget and take == 0 and count == max(available.values()):
            take = min(count, budget)  # always make progress
        result[key] = first + take
    return result
