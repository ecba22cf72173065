"""A standby cluster kept warm from a live backup: ``restore --follow``, and ``restore --failover``.

A follower runs the restore again and again, one **pass** every ``--follow-interval`` seconds, in one Spark
session. Every pass is the same restore (its identity names no end, see
:mod:`spark_kafka_backup.restore.marker`): it reads each partition's progress marker on the standby and produces
what the backup committed since, up to the ends its catalog vouched for when the pass began (a running backup's
batch in flight is never read). So each pass has the restore's guarantees: transactions with their marker, fencing,
a kill anywhere redone from the marker, nothing doubled or skipped. After its records, a pass commits each consumer
group's offsets from the backup's latest offset round, remapped onto the standby (a group ahead of what the standby
holds is placed after its last restored record, never past a record it has not read; a group with members on the
standby is left alone, with a warning once).

Between passes the follower

- renews its **hold** on the backup (:mod:`spark_kafka_backup.catalog.holds`), which keeps ``prune`` from deleting
  what it has not restored;
- refuses to go on past a **gap**: a partition whose next records a prune let go before they were restored stops
  the follower, naming the offsets the standby misses (a hold that expired while the follower was away);
- adds **partitions** to standby topics it restored when the backup's topic gained some; creates topics the backup
  gained (as any restore does);
- logs one line per pass and publishes the lag (:mod:`spark_kafka_backup.restore.standby_lag`).

``--until CHECKPOINT|TIME`` freezes: passes read no further than the checkpoint's cut, its groups are placed as of
the cut, and the follower ends (exit 0) once the standby holds exactly the cut. A standby that already holds records
past the cut is refused (they cannot be taken back).

A stop (SIGTERM, Ctrl-C) ends the follower with exit 0, as a continuous backup's: what each pass committed stays,
and the next start goes on from the markers.

``--failover`` makes the standby the cluster consumers use: it marks the standby as failed over
(:mod:`spark_kafka_backup.restore.failover_mark`) so that no follower feeds it again (a running one stops at its next
pass, its producers fenced), runs one last pass (bounded by ``--until`` when given), places every group, and prints
per partition what the standby holds. On a standby already failed over it changes nothing and prints the same.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from spark_kafka_backup.boundary import Stopped, check_stop
from spark_kafka_backup.catalog import checkpoints
from spark_kafka_backup.catalog.holds import Hold, read_holds, write_hold
from spark_kafka_backup.catalog.offset_history import HistoryTail
from spark_kafka_backup.catalog.store import read_catalog
from spark_kafka_backup.catalog.topics import read_topic_record
from spark_kafka_backup.errors import (
    AccessDeniedError,
    BackupNotFoundError,
    ChecksumError,
    DamagedBackupError,
    DecryptionKeyError,
    RestoreFencedError,
    SparkKafkaBackupError,
    StandbyGapError,
    TargetChangedError,
    TargetNotEmptyError,
    UsageError,
)
from spark_kafka_backup.job_options import Monitoring
from spark_kafka_backup.kafka.cluster import add_partitions, list_offsets, partition_counts
from spark_kafka_backup.kafka.topics import TopicSelection
from spark_kafka_backup.partition.layout import list_partitions
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.selection import Window, count_selected, first_offset_from
from spark_kafka_backup.restore.failover_mark import FailoverMark, finished, new_mark, read_mark, write_mark
from spark_kafka_backup.restore.group_offsets import GroupDecision
from spark_kafka_backup.restore.marker import ProgressMarker, marker_consumer, read_markers, refresh_markers
from spark_kafka_backup.restore.partition_task import PartitionResult
from spark_kafka_backup.restore.plan import RestorePlan, restored_topics
from spark_kafka_backup.restore.settings import Following, RestoreSettings
from spark_kafka_backup.restore.standby_lag import (
    CatalogedEnd,
    PartitionLag,
    RoundLag,
    RoundsBehind,
    cataloged_end,
    lag_samples,
    partition_lag,
    worst,
)
from spark_kafka_backup.restore.target_limits import effective_topic_configs
from spark_kafka_backup.restore.timestamp_type import LOG_APPEND_TIME, TIMESTAMP_TYPE, set_timestamp_types
from spark_kafka_backup.spark.session import quiet_accumulator_server
from spark_kafka_backup.text import count, iso_time, shown

log = logging.getLogger("spark_kafka_backup.standby")

#: The restore's own logger: quiet (warnings only) after a follower's first pass, which says everything once.
_restore_log = logging.getLogger("spark_kafka_backup.restore")

#: Passes in a row that may fail for a reason that passes (the backup's store or the standby not answering, a
#: segment merged away under a read) before the follower gives up and exits 1.
PASS_ATTEMPTS = 5

#: How often a follower commits again the progress markers of partitions that received nothing (seconds).
MARKER_REFRESH_SECONDS = 12 * 3600

#: Errors no later pass can get past: they end the follower at once. Any other error of a pass (a segment merged away
#: under a read, the store or the standby not answering, a task that failed) is tried again at the next pass.
_LASTING = (
    UsageError,
    StandbyGapError,
    TargetNotEmptyError,
    TargetChangedError,
    RestoreFencedError,
    AccessDeniedError,
    DamagedBackupError,
    ChecksumError,
    DecryptionKeyError,
)


@dataclass
class PassOutcome:
    """What one pass did (the restore job's :func:`~spark_kafka_backup.restore.job.restore_pass`)."""

    plan: RestorePlan
    results: list[PartitionResult]
    decisions: list[GroupDecision]


#: Runs one pass of the restore with these settings (their ``pass_ends`` set) and says what it did.
RunPass = Callable[[RestoreSettings], PassOutcome]


def follow(settings: RestoreSettings, admin: Any, run_pass: RunPass, start_session: Callable[[], Any]) -> int:
    """``--follow`` or ``--failover``; returns the exit code."""
    following = settings.following
    assert following is not None
    settings = _resolve_until(settings, following)
    if following.failover:
        return _failover(settings, admin, run_pass, start_session)
    return Follower(settings, admin, run_pass).run(start_session)


class Follower:
    """The passes of ``--follow`` (module docstring) and what they leave: hold, lag, metrics."""

    def __init__(self, settings: RestoreSettings, admin: Any, run_pass: RunPass) -> None:
        assert settings.following is not None
        self.settings, self.admin, self.run_pass = settings, admin, run_pass
        self.following: Following = settings.following
        self.name = follower_name(settings)
        self.publisher = settings.monitoring.publisher("standby", {"source": str(settings.source)})
        self.lags: dict[tuple[str, int], PartitionLag] = {}
        # The backup's offset rounds since yesterday, at most 1,440 of them (a standby behind all of those is told
        # "at least" that far).
        self.history = HistoryTail(settings.source, int(time.time() * 1000) - 86_400_000)
        self.round_lag = RoundLag()
        self.rounds: RoundsBehind | None = None
        self.passes = 0
        self.last_pass_at: float | None = None
        self.pass_seconds: float | None = None
        self.frozen = False
        self.warned_groups: set[str] = set()
        self.targets_seen: set[tuple[str, int]] = set()
        self.waiting_told: set[str] = set()
        self.cataloged = False
        self.refreshed_at = float("-inf")
        self.settled: dict[tuple[str, str, int], int] = {}
        self.said: set[object] = set()
        self.published_at = float("-inf")

    def run(self, start_session: Callable[[], Any]) -> int:
        self.publisher.start()  # a port in use is refused before anything is produced
        spark = None
        failures = 0
        try:
            spark = start_session()
            log.info(
                "following %s into %s every %.0f s as %s%s; stop with SIGTERM to the driver process %d",
                self.settings.source, self.settings.client["bootstrap.servers"], self.following.interval, self.name,
                "" if self.following.until_checkpoint is None else
                f", up to checkpoint {self.following.until_checkpoint}", os.getpid(),
            )  # fmt: skip
            self._await_topics()
            mark = read_mark(self.settings.client, _targets(self.settings))
            if mark is not None:
                raise UsageError(
                    f"the standby at {self.settings.client['bootstrap.servers']} was {mark.describe()}: its consumers "
                    "and producers now use it, and following again would put the backup's newer records after theirs; "
                    "restore into another standby (or delete the topic kbackup-standby there, for those who mean it)"
                )
            self._renew_hold(None, {})  # before the first pass: a prune meanwhile keeps what it will restore
            while True:
                check_stop()
                began = time.monotonic()
                try:
                    done = self._pass()
                except _LASTING:
                    raise
                except SparkKafkaBackupError as exc:
                    failures += 1
                    if failures >= PASS_ATTEMPTS:
                        raise
                    log.warning("pass failed (%d of %d in a row allowed): %s; trying again in %.0f s",
                                failures, PASS_ATTEMPTS, exc, self.following.interval)  # fmt: skip
                    self._wait(self.following.interval)
                    continue
                failures = 0
                if done:
                    return 0
                self._wait(max(0.0, self.following.interval - (time.monotonic() - began)))
        except RestoreFencedError:
            mark = read_mark(self.settings.client, _targets(self.settings))
            if mark is None:
                raise
            log.info("the standby was %s: following stopped", mark.describe())
            return 0
        except (Stopped, KeyboardInterrupt) as stop:
            how = "Ctrl-C" if isinstance(stop, KeyboardInterrupt) else str(stop)
            log.info(
                "following stopped by %s after %s: the standby keeps what every pass committed; the next start goes on "
                "from there", how, count(self.passes, "pass", "passes"),
            )  # fmt: skip
            return 0
        finally:
            self._publish(up=False)
            self.publisher.close()
            if spark is not None:
                quiet_accumulator_server(spark)  # a stop during a pass: the JVM hangs up on it (no traceback)
                with contextlib.suppress(Exception):
                    spark.stop()

    def _await_topics(self) -> None:
        """Wait until the backup holds a topic this follower restores (a follower may start before its backup has
        written anything), saying so once a minute."""
        told = float("-inf")
        while True:
            check_stop()
            try:
                restored_topics(self.settings)
                return
            except BackupNotFoundError as exc:
                if time.monotonic() - told >= 60:
                    told = time.monotonic()
                    log.warning("%s; waiting for it (looking again every %.0f s)", exc, self.following.interval)
            self._wait(self.following.interval)

    def _pass(self) -> bool:
        """One pass; whether the follower is done (frozen at ``--until``, or the standby failed over)."""
        settings = self.settings
        topics = restored_topics(settings)  # listed once a pass (a LIST request on an object store)
        mark = read_mark(settings.client, [settings.target_topic(topic) for topic in topics])
        if mark is not None:
            log.info("the standby was %s: following stopped", mark.describe())
            return True
        ready = self._ready_topics(topics)
        if not ready:
            self._publish(up=True)
            return False
        settings = replace(settings, selection=TopicSelection(topics=tuple(ready)))
        ends = pass_ends(settings, ready)
        _grow_partitions(settings, self.admin, ready)
        started = time.monotonic()
        quiet = self.passes > 0 and not settings.debug
        # With --until, the groups go where the checkpoint's cut says, back from later rounds' places if need be.
        force = settings.force_offsets or self.following.until_checkpoint is not None
        quiet_metrics = Monitoring(log_format=settings.monitoring.log_format)  # the follower publishes its own
        bounded = replace(settings, pass_ends={key: end.next for key, end in ends.items()}, monitoring=quiet_metrics,
                          force_offsets=force, settled_groups=dict(self.settled))  # fmt: skip
        with _quieted(_restore_log, quiet):
            outcome = self.run_pass(bounded)
        self.passes += 1
        self.pass_seconds = time.monotonic() - started
        self.last_pass_at = time.time()
        self._note_news(outcome, quiet)
        markers = standby_markers(settings, outcome.plan)
        positions = {key: marker.resume_from for key, marker in markers.items()}
        self._settle(outcome, positions)
        self._renew_hold(outcome.plan, positions)
        self._refresh_idle(outcome, markers)
        self.lags = {}
        readers: dict[tuple[str, int], PartitionReader] = {}
        restored: dict[tuple[str, int], int | None] = {}
        for part in outcome.plan.partitions:
            key = (part.source_topic, part.source_partition)
            end = ends.get(key, CatalogedEnd(0))
            position = restored[key] = positions.get((part.target_topic, part.target_partition))
            reader = readers[key] = PartitionReader(settings.source / part.source_topic, part.source_partition,
                                                    legacy=settings.legacy, keys=settings.keys)  # fmt: skip
            behind = (
                count_selected(reader, Window(from_offset=position or 0, to_offset=end.next - 1)) if end.next else 0
            )
            self.lags[key] = partition_lag(part.source_topic, part.source_partition, end, part.to_produce, position,
                                           behind)  # fmt: skip
        self.round_lag.add(self.history.entries())
        self.rounds = self.round_lag.behind(
            restored,
            lambda key, start: first_offset_from(readers[key], start),
            lambda key, start, end: count_selected(readers[key], Window(from_offset=start, to_offset=end - 1)),
        )
        produced = sum(result.produced for result in outcome.results)
        now = int(time.time() * 1000)
        seconds, where = worst(self.lags.values(), now)
        behind = sum(lag.records_behind for lag in self.lags.values())
        most = max(self.lags.values(), key=lambda lag: lag.records_behind, default=None)
        log.info(
            "pass %d: %s produced in %.1f s; %s of the backup's committed ones not on the standby%s%s%s",
            self.passes, count(produced, "record"), self.pass_seconds, count(behind, "record"),
            f" (most: {most.topic}/{most.partition}, {most.records_behind})" if most and behind else "",
            "" if seconds is None else f"; {seconds:.1f} s behind the source (by record times, most: {where})",
            self._rounds_text(now),
        )  # fmt: skip
        if self.following.until_checkpoint is not None and behind == 0:
            self.frozen = True
            log.info(
                "frozen at checkpoint %d: the standby holds exactly its cut, and the groups as of it; following "
                "stopped (run --failover --until %d to make it the cluster consumers use)",
                self.following.until_checkpoint, self.following.until_checkpoint,
            )  # fmt: skip
        self._publish(up=not self.frozen)
        return self.frozen

    def _ready_topics(self, topics: list[str]) -> list[str]:
        """The topics a pass follows: every one this follower restores whose origin (cluster and topic id) the backup
        has recorded. A topic the backup started writing since its last offset round has its files before that
        record (:mod:`spark_kafka_backup.catalog.topics`), and the restore's name for its records includes the
        origin: restored before, they would carry another name than after. (A backup without a catalog, the original
        tool's, never records an origin: it is followed whole.)"""
        recorded = {topic: read_topic_record(self.settings.source, topic) for topic in topics}
        if not self.cataloged:  # a property of the backup: once a catalog is seen, it is not looked for again
            self.cataloged = any(_cataloged(self.settings, topic) for topic in topics)
        if not self.cataloged:
            return topics  # the original tool's backup: no catalog, no origin, ever
        waiting = [topic for topic, record in recorded.items() if record is None]
        for topic in waiting:
            if topic not in self.waiting_told:
                self.waiting_told.add(topic)
                log.info("%s: new in the backup, followed once the backup records where it was read from (at its "
                         "next offset round)", topic)  # fmt: skip
        return [topic for topic in topics if topic not in waiting]

    def _settle(self, outcome: PassOutcome, positions: dict[tuple[str, int], int]) -> None:
        """Note the groups this pass placed at a record the standby holds (or found there already): later passes
        leave them alone until their committed offset moves (counting back to their record at every pass would
        cost the span of a group that stopped reading). A group left alone (members, unplaceable) is not settled."""
        done = {}
        for decision in outcome.decisions:
            for key in decision.committed:
                done[(decision.group, key)] = True
            for key, reason in decision.left_alone.items():
                if reason.startswith("already at"):
                    done[(decision.group, key)] = True
        for part in outcome.plan.partitions:
            key = (part.target_topic, part.target_partition)
            for group, offset in part.groups.items():
                if offset < positions.get(key, 0) and done.get((group, key)):
                    self.settled[(group, part.source_topic, part.source_partition)] = offset

    def _note_news(self, outcome: PassOutcome, quiet: bool) -> None:
        """What a quiet pass would not say otherwise: topics and partitions it restored into for the first time, the
        plan's notes, groups it could not place or left alone because they have members on the standby (each once)."""
        for planned in outcome.plan.topics:
            for note in planned.notes:
                if note not in self.said:
                    self.said.add(note)
                    log.warning("%s", note)
        for result in outcome.results:
            for group, reason in sorted(result.unplaced.items()):
                if (group, reason) not in self.said:
                    self.said.add((group, reason))
                    log.warning("group %s: left where it is on the standby: %s", group, reason)
        new = {(p.target_topic, p.target_partition) for p in outcome.plan.partitions} - self.targets_seen
        if self.targets_seen and new and quiet:
            log.info("now following %s: %s", count(len(new), "more partition"),
                     ", ".join(f"{t}/{p}" for t, p in sorted(new)))  # fmt: skip
        self.targets_seen |= new
        for decision in outcome.decisions:
            active = {reason for reason in decision.left_alone.values() if "active member" in reason}
            if active and decision.group not in self.warned_groups:
                self.warned_groups.add(decision.group)
                log.warning(
                    "group %s: %s; it is not moved while it has members (its consumers there read on from their own "
                    "positions); the follower moves it again once it has none", decision.group, sorted(active)[0],
                )  # fmt: skip
            elif not active:
                self.warned_groups.discard(decision.group)

    def _renew_hold(self, plan: RestorePlan | None, positions: dict[tuple[str, int], int]) -> None:
        """Write this follower's hold (:mod:`spark_kafka_backup.catalog.holds`): after a pass, where each partition
        stands; before the first, the positions of its last hold (or none: every partition it restores held whole)."""
        if plan is None:
            earlier = [hold for hold in read_holds(self.settings.source) if hold.name == self.name]
            restored = dict(earlier[0].next) if earlier else {}
        else:
            restored = {
                (part.source_topic, part.source_partition): positions[(part.target_topic, part.target_partition)]
                for part in plan.partitions
                if (part.target_topic, part.target_partition) in positions
            }
        selection = self.settings.selection
        write_hold(
            self.settings.source,
            Hold(self.name, socket.gethostname(), os.getpid(), int(time.time() * 1000), self.following.hold_expires,
                 restored, topics=None if selection is None else selection.topics,
                 pattern=None if selection is None else selection.pattern),
        )  # fmt: skip

    def _refresh_idle(self, outcome: PassOutcome, markers: dict[tuple[str, int], ProgressMarker]) -> None:
        """Commit again, twice a day, the markers of partitions this pass produced nothing into (Kafka deletes a
        committed offset :data:`MARKER_REFRESH_SECONDS` old enough; the default retention is 7 days)."""
        if time.monotonic() - self.refreshed_at < MARKER_REFRESH_SECONDS:
            return
        busy = {(r.target_topic, r.target_partition) for r in outcome.results if r.produced}
        idle = {key: marker for key, marker in markers.items() if key not in busy}
        if read_mark(self.settings.client, _targets(self.settings)) is None:  # else a failover's own the markers
            refresh_markers(self.settings.client, idle)
        self.refreshed_at = time.monotonic()

    def _rounds_text(self, now: int) -> str:
        """The pass line's words on the backup's offset rounds: none while the standby covers the newest one."""
        rounds = self.rounds
        if rounds is None or rounds.newest is None or rounds.covered == rounds.newest:
            return ""
        seconds = rounds.seconds(now) or 0.0
        if rounds.covered is not None:
            return (f"; groups as of the backup's offset round of {iso_time(rounds.covered)} ({seconds:.0f} s ago; "
                    f"{count(rounds.rounds, 'newer round')} not yet covered)")  # fmt: skip
        return (
            f"; groups behind every offset round of the backup since {iso_time(rounds.at_least or rounds.newest)} "
            f"({seconds:.0f} s ago or more)"
        )

    def _wait(self, seconds: float) -> None:
        """Sleep until the next pass, publishing the lag (it grows while nothing arrives) and noticing a stop."""
        deadline = time.monotonic() + seconds
        interval = self.settings.monitoring.metrics_interval
        while True:
            check_stop()
            left = deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, 1.0))
            if time.monotonic() - self.published_at >= interval:
                self._publish(up=True)

    def _publish(self, *, up: bool) -> None:
        if not self.publisher.enabled:
            return
        self.published_at = time.monotonic()
        try:
            samples = lag_samples(self.lags, int(time.time() * 1000), passes=self.passes,
                                  last_pass_at=self.last_pass_at, pass_seconds=self.pass_seconds, frozen=self.frozen,
                                  up=up, rounds=self.rounds)  # fmt: skip
            self.publisher.publish(samples)
        except Exception as exc:  # the metrics never stop the follower
            log.warning("metrics not written: %s", exc)


def follower_name(settings: RestoreSettings) -> str:
    """The follower's hold name: ``--follower-name``, else one per standby cluster."""
    assert settings.following is not None
    if settings.following.name:
        return settings.following.name
    return "standby-" + hashlib.sha256(settings.client["bootstrap.servers"].encode()).hexdigest()[:12]


def pass_ends(settings: RestoreSettings, topics: list[str]) -> dict[tuple[str, int], CatalogedEnd]:
    """Per backed-up partition of ``topics``, what a pass reads up to: the catalog's committed end, and no further
    than the ``--until`` checkpoint's cut."""
    assert settings.following is not None
    cut = None
    if settings.following.until_checkpoint is not None:
        cut = checkpoints.read_checkpoint(settings.source, settings.following.until_checkpoint).ends
    ends = {}
    for topic in topics:
        for partition in list_partitions(settings.source / topic):
            end = cataloged_end(settings.source, topic, partition, legacy=settings.legacy)
            if cut is not None:
                end = replace(end, next=min(end.next, cut.get((topic, partition), 0)))
            ends[(topic, partition)] = end
    return ends


def standby_markers(settings: RestoreSettings, plan: RestorePlan) -> dict[tuple[str, int], ProgressMarker]:
    """Each target partition's progress marker of this restore (its ``resume_from``: the next source offset to
    restore there)."""
    keys = [(part.target_topic, part.target_partition) for part in plan.partitions]
    consumer = marker_consumer(settings.client)
    try:
        markers = read_markers(consumer, keys)
    finally:
        consumer.close()
    wanted = {(part.target_topic, part.target_partition): part.identity for part in plan.partitions}
    return {key: marker for key, marker in markers.items() if marker.restore == wanted.get(key)}


def check_pass(plan: RestorePlan, settings: RestoreSettings) -> None:
    """Before a follower's pass produces: refuse a gap (records the standby has not restored, let go by a prune) and,
    with ``--until``, a standby that already holds records past the cut."""
    following = settings.following
    if following is None:
        return
    cut = None
    if following.until_checkpoint is not None:
        cut = checkpoints.read_checkpoint(settings.source, following.until_checkpoint).ends
    gaps, past = [], []
    for part in plan.partitions:
        if not part.has_marker:
            continue
        where = f"{part.source_topic}/{part.source_partition}"
        catalog = read_catalog(settings.source, part.source_topic, part.source_partition)
        pruned = catalog.pruned if catalog is not None else None
        if pruned is not None and pruned.last_offset >= part.resume_from:
            gaps.append(
                f"{where}: source offsets {part.resume_from}..{pruned.last_offset} (the standby holds those below "
                f"{part.resume_from}; a prune let go of up to {count(pruned.records, 'record')} up to "
                f"{pruned.last_offset})"
            )
        if cut is not None:
            end = cut.get((part.source_topic, part.source_partition), 0)
            if part.resume_from > end:
                reader = PartitionReader(settings.source / part.source_topic, part.source_partition,
                                         legacy=settings.legacy, keys=settings.keys)  # fmt: skip
                beyond = count_selected(reader, Window(from_offset=end, to_offset=part.resume_from - 1))
                if beyond:
                    past.append(f"{where} ({count(beyond, 'record')} at source offsets {end}..{part.resume_from - 1})")
    if gaps:
        raise StandbyGapError(
            "the backup no longer holds records the standby has not restored: "
            + "; ".join(gaps)
            + ". The standby misses them; following stopped. Keep the follower's hold live (it expires after "
            "--hold-expires without a pass) or feed a new standby from the backup"
        )
    if past:
        raise UsageError(
            f"the standby already holds records past checkpoint {following.until_checkpoint}'s cut: "
            + ", ".join(past)
            + "; they cannot be taken back: restore the checkpoint into another cluster "
            f"(restore --checkpoint {following.until_checkpoint}), or freeze at a later checkpoint"
        )


def _resolve_until(settings: RestoreSettings, following: Following) -> RestoreSettings:
    """``--until``: the checkpoint (by id, or the newest completed one taken at or before a time), completed."""
    chosen: checkpoints.Checkpoint | None
    if following.until_time is not None:
        chosen = checkpoints.latest_completed_before(settings.source, following.until_time)
        if chosen is None:
            raise UsageError(
                f"--until {iso_time(following.until_time)}: the backup {settings.source} has no completed checkpoint "
                "taken at or before then (spark-kafka-backup checkpoint list shows them; take them regularly beside "
                "a follower to have points to freeze at)"
            )
    elif following.until_checkpoint is not None:
        chosen = checkpoints.read_checkpoint(settings.source, following.until_checkpoint)
    else:
        return settings
    if chosen.status != "completed":
        raise UsageError(f"--until {chosen.id}: checkpoint {chosen.id} is {chosen.status}, not completed")
    return replace(settings, following=replace(following, until_checkpoint=chosen.id, until_time=None))


def _cataloged(settings: RestoreSettings, topic: str) -> bool:
    """Whether spark-kafka-backup keeps a catalog of the topic (then it records the topic's origin too)."""
    return any(read_catalog(settings.source, topic, p) is not None for p in list_partitions(settings.source / topic))


def _targets(settings: RestoreSettings) -> list[str]:
    """The standby's topics this restore writes into (their failover marks are this follower's)."""
    return [settings.target_topic(topic) for topic in restored_topics(settings)]


def _grow_partitions(settings: RestoreSettings, admin: Any, topics: list[str]) -> None:
    """Add partitions to standby topics this follower restored into (or created, still empty), where the backup's
    topic has more (partitions added at the source while it was backed up); any other topic is left to the plan,
    which refuses it."""
    existing = partition_counts(admin)
    grow: dict[str, int] = {}
    for topic in topics:
        target = settings.target_topic(topic)
        recorded = read_topic_record(settings.source, topic)
        held = max(list_partitions(settings.source / topic), default=-1) + 1
        wanted = max(held, recorded.partitions if recorded is not None else 0)
        if target in existing and existing[target] < wanted:
            consumer = marker_consumer(settings.client)
            try:
                ours = read_markers(consumer, [(target, p) for p in range(existing[target])])
            finally:
                consumer.close()
            empty = not any(list_offsets(admin, [(target, p) for p in range(existing[target])],
                                         latest=True, read_committed=False).values())  # fmt: skip
            if ours or empty:
                grow[target] = wanted
    if grow:
        add_partitions(admin, grow)
        for target, wanted in sorted(grow.items()):
            log.info("%s: grown to %s, as the backed-up topic was", target, count(wanted, "partition"))


@contextlib.contextmanager
def _quieted(logger: logging.Logger, quiet: bool) -> Iterator[None]:
    if not quiet:
        yield
        return
    before = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(before)


def _failover(settings: RestoreSettings, admin: Any, run_pass: RunPass, start_session: Callable[[], Any]) -> int:
    """``--failover`` (module docstring)."""
    following = settings.following
    assert following is not None
    targets = _targets(settings)
    earlier = read_mark(settings.client, targets)
    if earlier is not None and earlier.done:
        log.info("the standby was already %s: nothing changed", earlier.describe())
        _print_holdings(settings, earlier, None)
        return 0
    if earlier is not None:
        if following.until_checkpoint not in (None, earlier.until):
            raise UsageError(
                f"an earlier failover did not finish ({earlier.describe()}): run it again as it was "
                f"({'--until ' + str(earlier.until) if earlier.until is not None else 'without --until'})"
            )
        log.info("an earlier failover did not finish (%s): carrying it out", earlier.describe())
        following = replace(following, until_checkpoint=earlier.until)
        settings = replace(settings, following=following)
    # Marked first: a follower still running produces nothing more (its tasks look after fencing), stops at its next
    # pass; the ends are read after, so that this pass restores everything the backup committed before the mark.
    mark = earlier if earlier is not None else new_mark(following.until_checkpoint)
    write_mark(settings.client, targets, mark)
    topics = restored_topics(settings)
    ends = pass_ends(settings, topics)
    _grow_partitions(settings, admin, topics)
    spark = start_session()
    try:
        force = settings.force_offsets or following.until_checkpoint is not None
        outcome = run_pass(replace(settings, pass_ends={key: end.next for key, end in ends.items()},
                                   monitoring=Monitoring(log_format=settings.monitoring.log_format),
                                   force_offsets=force))  # fmt: skip
    finally:
        quiet_accumulator_server(spark)
        with contextlib.suppress(Exception):
            spark.stop()
    _restore_timestamp_types(settings, admin, outcome.plan)
    mark = finished(mark)
    write_mark(settings.client, targets, mark)
    log.info("the standby was %s", mark.describe())
    _print_holdings(settings, mark, outcome.plan)
    return 0


def _restore_timestamp_types(settings: RestoreSettings, admin: Any, plan: RestorePlan) -> None:
    """Set LogAppendTime on the standby's topics whose backed-up topic had it (a follower creates them with
    CreateTime, so that their records keep their times): read from the backup, whoever and wherever the follower
    ran."""
    if TIMESTAMP_TYPE in settings.topic_config or TIMESTAMP_TYPE in settings.drop_topic_config:
        return  # the operator chose the standby's timestamp type
    wanted: dict[str, str] = {}
    for planned in plan.topics:
        record = read_topic_record(settings.source, planned.source_topic)
        if record is not None and record.config.get(TIMESTAMP_TYPE) == LOG_APPEND_TIME:
            wanted[planned.target_topic] = LOG_APPEND_TIME
    if not wanted:
        return
    now = effective_topic_configs(admin, list(wanted))
    change = {topic: kind for topic, kind in wanted.items() if now.get(topic, {}).get(TIMESTAMP_TYPE) != kind}
    set_timestamp_types(admin, change)
    for topic in sorted(change):
        log.info("%s: set to %s=%s, as the backed-up topic was", topic, TIMESTAMP_TYPE, LOG_APPEND_TIME)


def _print_holdings(settings: RestoreSettings, mark: FailoverMark, plan: RestorePlan | None) -> None:
    """Per backed-up partition: the last source offset the standby holds, and what the backup holds past it."""
    lines = [f"standby {settings.client['bootstrap.servers']}: {mark.describe()}"]
    parts = plan.partitions if plan is not None else _planned_parts(settings)
    keys = [(target, partition) for target, partition, _, _ in parts_keys(parts)]
    consumer = marker_consumer(settings.client)
    try:
        markers: dict[tuple[str, int], ProgressMarker] = read_markers(consumer, keys)
    finally:
        consumer.close()
    for target, partition, source_topic, source_partition in parts_keys(parts):
        reader = PartitionReader(settings.source / source_topic, source_partition, legacy=settings.legacy,
                                 keys=settings.keys)  # fmt: skip
        marker = markers.get((target, partition))
        position = 0 if marker is None else marker.resume_from
        past = count_selected(reader, Window(from_offset=position))
        last = f"source offsets up to {position - 1}" if position else "nothing of it"
        beyond = f"; the backup holds {count(past, 'record')} past them" if past else "; the backup holds no more"
        lines.append(f"{source_topic}/{source_partition} -> {target}/{partition}: holds {last}{beyond}")
    for line in lines:
        print(shown(line), flush=True)


def parts_keys(parts: Sequence[Any]) -> list[tuple[str, int, str, int]]:
    return sorted((p.target_topic, p.target_partition, p.source_topic, p.source_partition) for p in parts)


@dataclass(frozen=True)
class _Part:
    source_topic: str
    source_partition: int
    target_topic: str
    target_partition: int


def _planned_parts(settings: RestoreSettings) -> list[_Part]:
    return [
        _Part(topic, partition, settings.target_topic(topic), partition)
        for topic in restored_topics(settings)
        for partition in list_partitions(settings.source / topic)
    ]
