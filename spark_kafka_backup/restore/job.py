"""The restore job: ``spark-submit jobs/restore.py [options]``.

1. Parse and check the settings; build the plan (:mod:`spark_kafka_backup.restore.plan`):
   every error (missing topics, too few target partitions, non-empty targets)
   comes before anything is produced. ``--dry-run`` prints the plan and stops.
2. Create missing target topics with the backup's partition count.
3. Run one Spark task per backed-up partition (:mod:`spark_kafka_backup.restore.task`),
   in parallel across executors.
4. Once every task has succeeded (all data acknowledged), commit each
   consumer group's remapped offsets (:mod:`spark_kafka_backup.restore.group_offsets`).
5. Print a summary per topic and exit 0; exit 1 on a failure.

Killed at any moment and run again with the same arguments, the restore goes
on where the target log says it stopped (see the plan module).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from spark_kafka_backup.boundary import check_stop
from spark_kafka_backup.errors import (
    BackupNotFoundError,
    ClusterError,
    RestoreFencedError,
    SparkKafkaBackupError,
    TargetChangedError,
)
from spark_kafka_backup.fsutil import restrict_new_files, world_writable
from spark_kafka_backup.job_options import run_job
from spark_kafka_backup.kafka.client_settings import redact
from spark_kafka_backup.kafka.cluster import (
    TopicPartitionKey,
    admin_client,
    create_topics,
    partition_counts,
    topic_ids,
)
from spark_kafka_backup.kafka.columnar import NativeEdgeError, edge_setting, native_edge
from spark_kafka_backup.kafka.permissions import refuse_missing
from spark_kafka_backup.kafka.reachability import refuse_unreachable
from spark_kafka_backup.logsetup import ensure_console_logging, user_stderr
from spark_kafka_backup.partition.layout import enclosing_backup, list_partitions, list_topics
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.selection import count_selected
from spark_kafka_backup.progress import Progress
from spark_kafka_backup.restore.access import check_transactions, restore_permissions
from spark_kafka_backup.restore.cluster_metadata import metadata_policy
from spark_kafka_backup.restore.failover_mark import read_mark
from spark_kafka_backup.restore.follow import PassOutcome, check_pass, follow
from spark_kafka_backup.restore.group_offsets import GroupDecision, commit_group_offsets
from spark_kafka_backup.restore.marker import (
    TRANSACTION_RECORDS,
    TRANSACTION_SECONDS,
    marker_consumer,
    read_markers,
    transactional_id,
)
from spark_kafka_backup.restore.metrics import RestoreMetrics
from spark_kafka_backup.restore.plan import (
    PartitionPlan,
    RestorePlan,
    TopicPlan,
    build_plan,
    refuse_damage,
    restored_topics,
)
from spark_kafka_backup.restore.schemas import register_schemas
from spark_kafka_backup.restore.settings import RestoreSettings, parse_restore_args
from spark_kafka_backup.restore.target_check import changed_targets, refuse_lost, verify_held
from spark_kafka_backup.restore.task import PartitionResult, PartitionTask, restore_bundle_sharing
from spark_kafka_backup.restore.throttle import Throttle
from spark_kafka_backup.restore.timestamp_type import TIMESTAMP_TYPE, PendingTimestampTypes, set_timestamp_types
from spark_kafka_backup.spark.failures import failure_cause
from spark_kafka_backup.spark.parallelism import JobCores, job_cores
from spark_kafka_backup.spark.session import job_session, quiet_accumulator_server
from spark_kafka_backup.storage import Location, check_writable_root
from spark_kafka_backup.text import count, iso_time, shown

log = logging.getLogger("spark_kafka_backup.restore")


#: Spark job group of the restore's tasks (progress is read from it).
JOB_GROUP = "kbackup-restore"

#: Target partitions of a repartitioned topic restored by one task from one read of the topic at most (each has
#: its producer, sharing the memory one has alone).
BUNDLE_TARGETS = 16


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``jobs/restore.py``; returns the exit code."""
    return run_job("restore", argv, parse_restore_args, run)


def _refuse_a_topic_directory(source: Location) -> None:
    """A topic's directory given as the backup: the root to give instead, in one line (before Kafka is asked)."""
    inside = enclosing_backup(source)
    if inside is not None and not list_topics(source) and list_partitions(source):
        raise BackupNotFoundError(
            f"--source-dir {source} is a topic's directory of the backup {inside}, not a backup: give --source-dir "
            f"{inside} (with --topics {source.name} to restore only that topic)"
        )


def run(settings: RestoreSettings) -> int:
    ensure_console_logging(debug=settings.debug, log_format=settings.monitoring.log_format)
    edge_setting()  # a mistyped KBACKUP_KAFKA_EDGE is refused before a topic is created
    safe = redact(settings.client)
    log.info("restoring %s into %s", settings.source, safe["bootstrap.servers"])
    umask = restrict_new_files(settings.umask)
    _warn_if_others_can_write(settings.source)
    if settings.state_dir is not None:
        check_writable_root(settings.state_dir, what="restore state directory")
    _refuse_a_topic_directory(settings.source)
    refuse_unreachable(settings.client["bootstrap.servers"])
    admin = admin_client({**settings.client, "socket.timeout.ms": "10000"})
    try:
        partition_counts(admin, timeout=15)
    except ClusterError as exc:
        raise ClusterError(f"cannot reach Kafka at {settings.client['bootstrap.servers']}: {exc}") from exc
    if settings.metadata is not None:
        return metadata_policy(settings, admin, sys.stdout)
    registry_lines: list[str] = []
    if settings.schema_registry is not None:
        restored_topics(settings)  # the options naming topics are checked before anything is registered
        settings, registry_lines = register_schemas(settings)
    matching = None
    if settings.where is not None:
        settings, matching = _match(settings, umask)
    try:
        if settings.following is not None:
            return follow(
                settings,
                admin,
                functools.partial(restore_pass, admin=admin, umask=umask),
                lambda: _session("kbackup-standby", settings, umask),
            )
        return _plan_and_restore(settings, admin, umask, registry_lines)
    finally:
        if matching is not None:  # the session that matched, when the tasks did not use and stop it
            matching.stop()


def _plan_and_restore(settings: RestoreSettings, admin: Any, umask: int, registry_lines: list[str]) -> int:
    plan = build_plan(settings, admin)
    if not settings.dry_run:  # a dry run's report says all of this once, in its own lines
        for topic_plan in plan.topics:
            log.info("%s", topic_plan.describe_origin())
            for note in topic_plan.notes:
                log.warning("%s", note)
        if plan.groups_round is not None:
            log.info("consumer group offsets are taken from the offset round at %s", iso_time(plan.groups_round))
        selected = sum(part.selected for part in plan.partitions)
        found = sum(part.skip for part in plan.partitions)
        log.info("plan: %d records selected, %d of them already in the target, %d to produce", selected, found,
                 selected - found)  # fmt: skip
    if settings.dry_run:
        for line in describe(plan, settings) + registry_lines:
            print(shown(line))  # one line each: a group id's newline or escape sequence is shown, not acted on
        refuse_damage(plan, settings)  # the real run would refuse: so does the dry run, after the report
        return 0
    watch = RestoreWatch(settings, plan)
    watch.start()  # a port in use is refused before anything is created or produced
    succeeded = False
    try:
        _restore(settings, plan, admin, umask, watch)
        succeeded = True
    finally:
        watch.stop(succeeded=succeeded)
    return 0


def restore_pass(settings: RestoreSettings, *, admin: Any, umask: int) -> PassOutcome:
    """One pass of a follower (:mod:`spark_kafka_backup.restore.follow`): the restore, bounded by the settings'
    ``pass_ends``, in the follower's Spark session, with what it did returned."""
    plan = build_plan(settings, admin)
    check_pass(plan, settings)  # the plan's notes are the follower's to say (once, not at every pass)
    watch = RestoreWatch(settings, plan)  # publishes nothing: the follower publishes the standby's metrics
    results, decisions = _restore(settings, plan, admin, umask, watch)
    return PassOutcome(plan, results, decisions)


def _match(settings: RestoreSettings, umask: int) -> tuple[RestoreSettings, Any]:
    """``--where``: the records it holds for, found by Spark, and the session that found them: the restore's tasks
    run in it (one Spark start, not two); a dry run's is stopped here."""
    from spark_kafka_backup.restore.matching import match_records

    spark = _session("kbackup-restore", settings, umask)
    try:
        matched = match_records(settings, spark, restored_topics(settings))
    except BaseException:
        quiet_accumulator_server(spark)
        spark.stop()
        raise
    if settings.dry_run:
        spark.stop()
        return matched, None
    return matched, spark


def _session(name: str, settings: RestoreSettings, umask: int) -> Any:
    return job_session(
        name, debug=settings.debug, spark_conf=settings.spark_conf, umask=umask,
        log_format=settings.monitoring.log_format,
    )  # fmt: skip


def _restore(
    settings: RestoreSettings, plan: RestorePlan, admin: Any, umask: int, watch: RestoreWatch
) -> tuple[list[PartitionResult], list[GroupDecision]]:
    """Steps 2 to 5 of the module docstring; what the tasks did, and what became of each group."""
    first = next((part for part in plan.partitions if part.to_produce > 0 or part.groups), None)
    if first is not None:  # the one permission Kafka cannot be asked about, before anything is created
        check_transactions(settings.client, transactional_id(first.target_topic, first.target_partition))
    to_create = {t.target_topic: t.create_partitions for t in plan.topics if t.create_partitions is not None}
    later = {t.target_topic: t.set_timestamp_type for t in plan.topics if t.set_timestamp_type is not None}
    pending = PendingTimestampTypes(settings.state_file("timestamp-types"))
    pending.add(later)  # before the topics exist: a crash before the end still sets the type on the next run
    if to_create:
        configs = {t.target_topic: t.config for t in plan.topics if t.create_partitions is not None}
        # Another restore of the same backup may create them at the same moment: theirs are as good.
        created = create_topics(
            admin, to_create, configs=configs, replication_factor=settings.replication_factor, exist_ok=True
        )
        if created:
            log.info("created %s: %s", count(len(created), "topic"),
                     ", ".join(f"{t} ({count(to_create[t], 'partition')})" for t in created))  # fmt: skip
            # What ACLs allow on a topic shows only once it exists.
            on_created = [
                p for p in restore_permissions(plan.topics, []) if p.resource_type == "TOPIC" and p.name in created
            ]
            refuse_missing(
                admin, on_created, settings.client, done=f"only the (empty) topics {', '.join(created)} were created"
            )
    topics = {topic.target_topic: topic for topic in plan.topics}
    tasks = [_task(part, topics[part.target_topic], settings, umask) for part in plan.partitions
             if part.to_produce > 0 or part.groups]  # fmt: skip
    started = time.monotonic()
    watch.tasks_started()
    idle = len(plan.partitions) - len(tasks)
    empty = sum(1 for part in plan.partitions if part.to_produce == 0)
    if empty:  # those with groups still run a task: their offsets are placed
        placing = f" ({empty - idle} of them only place consumer group offsets)" if empty > idle else ""
        log.info("%s nothing to produce%s", count(empty, "partition has", "partitions have"), placing)
    # The incarnation of each target topic the tasks produce into: a failure is named by what changed under it.
    produced_into: dict[str, str] = {}
    with contextlib.suppress(ClusterError):  # only to name a failure: the tasks do not wait for it
        produced_into = topic_ids(admin, {task.target_topic for task in tasks}, timeout=15) if tasks else {}
    try:
        results = _run_tasks(tasks, settings, umask, watch, idle=idle) if tasks else []
    except SparkKafkaBackupError as exc:
        changed = changed_targets(produced_into, settings.client)
        if changed:
            raise TargetChangedError(f"the restore failed: {'; '.join(changed)} ({exc})") from exc
        raise
    watch.metrics.observe_results({(r.target_topic, r.target_partition): r.produced for r in results})
    seconds = time.monotonic() - started
    fenced = [result.fenced for result in results if result.fenced]
    if fenced:
        raise RestoreFencedError(
            "another restore took over the target, this one stopped: "
            + "; ".join(fenced)
            + " (what each had committed is in the target once; the newer restore goes on from there and "
            "commits the consumer group offsets)"
        )
    for result in results:
        if result.taken_over:
            log.warning("%s", result.taken_over)
    _summary(plan, results, seconds)
    for result in results:
        for group, records in sorted(result.read_again.items()):
            log.info(
                "group %s: %s/%d was repartitioned: the group resumes at the first record it had not read, and reads "
                "%d records it had read before again",
                group, result.target_topic, result.target_partition, records,
            )  # fmt: skip
    for part in plan.source_parts():
        for bad in part.bad_segments:
            log.warning(
                "not restored: %s/%d %s (segment %s: %s)",
                part.source_topic,
                part.source_partition,
                bad.offsets,
                bad.name,
                bad.reason,
            )
    # The cluster may have lost and regained nodes while the tasks produced: a client made before can go on
    # waiting for a node that died (spark_kafka_backup.kafka.admin_session); the last requests go through a new one.
    admin = admin_client({**settings.client, "socket.timeout.ms": "10000"})
    # A follower's standby keeps CreateTime while it is fed (LogAppendTime would re-stamp the next pass's records):
    # its failover sets the type.
    if later and (settings.following is None or settings.following.failover):
        set_timestamp_types(admin, later)
        pending.done(later)
        for topic, kind in sorted(later.items()):
            log.info(
                "%s: restored with the original timestamps, then set to %s=%s (new records are stamped by the broker)",
                topic,
                TIMESTAMP_TYPE,
                kind,
            )
    # Every record this restore produced, and every one it found already there, must still be there: checked
    # before the groups are moved onto them (spark_kafka_backup.restore.target_check).
    held = {(p.target_topic, p.target_partition): p.identity for p in plan.partitions
            if (p.selected > 0 and p.to_produce > 0) or p.has_marker}  # fmt: skip
    following = settings.following is not None  # a standby's retention deletes at its head as the source's does
    retention: list[str] | None = [] if settings.accept_retention_loss or following else None
    missing = verify_held(settings.client, admin, held, head_loss=retention)
    refuse_lost(missing, None if following else retention,
                what="the target lost records of this restore after they were produced",
                then="no consumer group was moved; restore into a topic nobody deletes records of")  # fmt: skip
    targets = {part.target_topic for part in plan.partitions}
    if settings.following is not None and not settings.following.failover and read_mark(settings.client, targets):
        raise RestoreFencedError("the standby was failed over while this pass ran: no consumer group was moved")
    planned: dict[str, dict[TopicPartitionKey, int]] = {}
    for result in results:
        for group, offset in result.group_offsets.items():
            planned.setdefault(group, {})[(result.target_topic, result.target_partition)] = offset
    decisions = commit_group_offsets(admin, settings.client, planned, force=settings.force_offsets)
    for decision in decisions:
        for (topic, partition), offset in sorted(decision.committed.items()):
            log.info("group %s: %s/%d committed at %d", decision.group, topic, partition, offset)
        for (topic, partition), reason in sorted(decision.left_alone.items()):
            log.info("group %s: %s/%d left alone: %s", decision.group, topic, partition, reason)
    return results, decisions


class RestoreWatch:
    """The restore's metrics (:mod:`spark_kafka_backup.restore.metrics`): markers read and published every interval.

    Lifecycle: :meth:`start` before the tasks, :meth:`poll` from the driver's loop while they run, :meth:`stop`
    at the end (the last snapshot says whether the restore succeeded). Reading the markers can fail (the target
    lost a node): the restore goes on and the metrics keep their last values.
    """

    def __init__(self, settings: RestoreSettings, plan: RestorePlan) -> None:
        self.settings = settings
        self._parts = {(p.target_topic, p.target_partition): p for p in plan.partitions if p.to_produce > 0 or p.groups}
        self.publisher = settings.monitoring.publisher("restore", {"source": str(settings.source)})
        local = isinstance(settings.source, Path)
        self.metrics = RestoreMetrics(
            self._parts.values(),
            first_offsets={} if local or not self.publisher.enabled else self._first_offsets(),
            count=self._count if local else None,
        )
        self._keys = [key for key, part in self._parts.items() if part.to_produce > 0]
        self._consumer: Any = None
        self._polled_at = float("-inf")

    def start(self) -> None:
        self.publisher.start()
        self._publish()

    def tasks_started(self) -> None:
        self.metrics.observe_tasks_started(time.time())

    def _count(self, key: TopicPartitionKey, below: int) -> int | None:
        """This run's records below source offset ``below``, from the segment indexes (None with a time window)."""
        part = self._parts[key]
        if part.window.by_records or part.repartition is not None:
            return None
        return count_selected(self._reader(part), part.window, below=below) - part.skip

    def _first_offsets(self) -> dict[TopicPartitionKey, int]:
        """Each partition's first backed-up offset, from its partition index (one read per partition)."""
        found = {}
        for key, part in self._parts.items():
            if part.repartition is not None:
                continue  # positions of a merged stream, not offsets
            with contextlib.suppress(Exception):  # the estimate's base only: the metrics never stop the restore
                segments = self._reader(part).segments
                if segments:
                    found[key] = segments[0].start_offset
        return found

    def _reader(self, part: PartitionPlan) -> PartitionReader:
        return PartitionReader(self.settings.source / part.source_topic, part.source_partition,
                               legacy=self.settings.legacy, keys=self.settings.keys)  # fmt: skip

    def poll(self, partitions_done: int) -> None:
        if not self.publisher.enabled:
            return
        self.metrics.observe_partitions_done(partitions_done)
        now = time.monotonic()
        if now - self._polled_at < self.settings.monitoring.metrics_interval:
            return
        self._polled_at = now
        try:
            if self._consumer is None:
                self._consumer = marker_consumer(self.settings.client)
            self.metrics.observe_markers(read_markers(self._consumer, self._keys, timeout=10))
        except Exception as exc:  # the metrics must never stop the restore
            log.debug("restore progress not read for the metrics: %s", exc)
        self._publish()

    def stop(self, *, succeeded: bool) -> None:
        self.metrics.observe_stopped(time.time(), succeeded=succeeded)
        self._publish()
        self.publisher.close()
        if self._consumer is not None:
            self._consumer.close()

    def _publish(self) -> None:
        if not self.publisher.enabled:
            return
        try:
            self.publisher.publish(self.metrics.samples())
        except Exception as exc:  # a full disk under the metrics file must not stop the restore
            log.warning("metrics not written: %s", exc)


def _warn_if_others_can_write(source: Location) -> None:
    """A warning when users other than the owner and group may write to the backup being restored."""
    if not isinstance(source, Path):
        return  # object storage: its access policy is the bucket's
    writable, first = world_writable(source)
    if writable:
        log.warning(
            "others can write to %s of the backup %s (first: %s): anyone on this machine could have changed "
            "what is restored; checksums catch changed segments, not a backup replaced as a whole "
            "(chmod -R o-w %s)",
            count(writable, "file or directory", "files or directories"),
            source,
            ", ".join(str(path) for path in first),
            source,
        )


def _task(part: PartitionPlan, topic: TopicPlan, settings: RestoreSettings, umask: int) -> PartitionTask:
    batch_size = settings.batch_size if topic.batch_limit is None else min(settings.batch_size, topic.batch_limit)
    return PartitionTask(
        source_dir=str(settings.source / part.source_topic),
        source_topic=part.source_topic,
        source_partition=part.source_partition,
        target_topic=part.target_topic,
        target_partition=part.target_partition,
        window=part.window,
        identity=part.identity,
        resume_from=part.resume_from,
        replaces=part.replaces,
        baseline=part.baseline,
        after_last=part.after_last,
        groups=part.groups,
        client=settings.client,
        batch_size=batch_size,
        throttle=Throttle(settings.max_rate),
        legacy=settings.legacy,
        umask=umask,
        repartition=part.repartition,
        key_sources=settings.key_sources,
        id_rewrite=settings.id_rewrite(part.source_topic),
        message_bytes=topic.producer_message_bytes,
        restamp_zero=settings.restamp_zero_timestamps or topic.restamped,
        allow_non_empty=settings.allow_non_empty,
        stop_when_failed_over=settings.following is not None and not settings.following.failover,
        leave_unplaceable_groups=settings.following is not None,
    )


def bundle_size() -> int:
    """How many target partitions of a repartitioned topic one task restores from one read: :data:`BUNDLE_TARGETS`
    where the tasks produce through the native edge, else 1 (on confluent-kafka's producer, a Python call per
    record, the targets' producing would share one Python process and be slower than their reads are saved)."""
    try:
        native = native_edge() is not None
    except NativeEdgeError:  # the tasks say why, as without bundles
        native = False
    return BUNDLE_TARGETS if native else 1


def bundles_of(tasks: list[PartitionTask], most: int) -> list[list[PartitionTask]]:
    """The Spark tasks: a target partition restored one to one is a task of its own; the target partitions of a
    repartitioned topic are one task, up to ``most`` of them, which reads the topic once for them all
    (:mod:`spark_kafka_backup.restore.fanout`) instead of once each."""
    bundles: list[list[PartitionTask]] = []
    open_bundles: dict[tuple[str, str], list[PartitionTask]] = {}
    for task in tasks:
        if task.repartition is None:
            bundles.append([task])
            continue
        key = (task.source_topic, task.target_topic)
        bundle = open_bundles.get(key)
        if bundle is None or len(bundle) >= most:
            bundle = open_bundles[key] = []
            bundles.append(bundle)
        bundle.append(task)
    return bundles


def _shared_throttle(
    bundles: list[list[PartitionTask]], settings: RestoreSettings, cores: JobCores
) -> list[list[PartitionTask]]:
    """The tasks, each target partition with its part of the whole restore's rate limits (see
    :mod:`spark_kafka_backup.restore.throttle`): shared by as many as can produce at once (as many Spark tasks as
    the job's ``cores``, the largest bundles counted whole; every one where the settings bound no count)."""
    if not settings.throttle.limited:
        if settings.max_rate:
            log.info("throttled to %s records/s in each partition (--max-rate)", f"{settings.max_rate:,}")
        return bundles
    slots = len(bundles) if cores.count is None else cores.count
    at_once = max(1, sum(sorted((len(bundle) for bundle in bundles), reverse=True)[:slots]))
    part = settings.throttle.share(at_once, per_partition_records=settings.max_rate)
    log.info(
        "throttled to %s in all: %s for each of the %s restored at once%s",
        settings.throttle.describe(),
        part.describe(),
        count(at_once, "partition"),
        "" if cores.bounded or at_once <= 1 else f" (all of them, {cores.source})",
    )
    return [[replace(task, throttle=part) for task in bundle] for bundle in bundles]


def _run_tasks(
    tasks: list[PartitionTask], settings: RestoreSettings, umask: int, watch: RestoreWatch, *, idle: int = 0
) -> list[PartitionResult]:
    """Run the tasks; ``idle`` partitions of the plan have nothing to do and count as done from the start."""
    from pyspark.sql import SparkSession

    # --where's session when it matched (spark_kafka_backup.restore.matching), else one of the tasks' own.
    spark = SparkSession.getActiveSession() or _session("kbackup-restore", settings, umask)
    try:
        context = spark.sparkContext
        cores = job_cores(dict(context.getConf().getAll()))
        bundles = _shared_throttle(bundles_of(tasks, bundle_size()), settings, cores)
        # Schema id maps go once to each executor (a broadcast), not with every task.
        rewrites = {task.source_topic: task.id_rewrite for task in tasks if task.id_rewrite is not None}
        shared = context.broadcast(rewrites) if rewrites else None
        # --where runs likewise (every task of a repartitioned topic reads every source partition).
        matches = {key: runs for task in tasks for key, runs in task.matches().items()}
        shared_matches = context.broadcast(matches) if matches else None
        unmatched = dict.fromkeys(matches)
        shipped = [[replace(task, id_rewrite=None).with_matches(unmatched) for task in bundle] for bundle in bundles]
        rdd = context.parallelize(shipped, len(shipped))
        done = context.accumulator(0)  # target partitions whose task finished
        outcome: dict[str, Any] = {}

        def collect() -> None:
            context.setJobGroup(JOB_GROUP, "spark-kafka-backup restore")
            try:
                outcome["results"] = rdd.flatMap(
                    functools.partial(restore_bundle_sharing, shared, shared_matches, done)
                ).collect()
            except Exception as exc:  # re-raised on the main thread
                outcome["error"] = exc

        worker = threading.Thread(target=collect, name="spark-kafka-backup-restore-collect", daemon=True)
        check_stop()  # one lost while Spark started: before any record is produced
        worker.start()
        # Plain lines, also on a terminal: the log shares it (a bar redrawn in place would run into its lines); none
        # for a follower's passes, which would repeat them every pass.
        with (
            user_stderr() as stderr,
            Progress("restore", idle + len(tasks), "partitions", stream=stderr, terminal=False,
                     enabled=settings.following is None) as shown,
        ):  # fmt: skip
            follow_tasks(
                worker,
                lambda: int(done.value),
                shown,
                watch.poll,
                succeeded=lambda: "results" in outcome,
                idle=idle,
            )
        if "error" in outcome:
            raise outcome["error"]
        results: list[PartitionResult] = outcome["results"]
        return results
    except SparkKafkaBackupError:
        raise
    except Exception as exc:
        raise SparkKafkaBackupError(f"the restore failed: {failure_cause(exc)}") from exc
    finally:
        if settings.following is None:  # a follower's passes share its session
            quiet_accumulator_server(spark)  # a stop while tasks run: the JVM hangs up on it (no traceback)
            spark.stop()


def follow_tasks(
    worker: threading.Thread,
    finished_tasks: Callable[[], int],
    shown: Progress,
    poll: Callable[[int], None],
    *,
    succeeded: Callable[[], bool],
    idle: int = 0,
    every: float = 0.5,
) -> None:
    """Show the tasks' progress and poll the watch until ``worker`` (the thread running the job) ends.

    A job that ``succeeded`` is shown complete even when Spark's status tracker
    had not yet counted its last tasks as the job ended.
    """
    if idle:
        shown.advance(idle, note=f"{idle} with nothing to produce")
    while worker.is_alive():
        worker.join(every)
        check_stop()  # a stop whose first raise a finalizer swallowed ends the restore here
        finished = idle + finished_tasks()
        if finished > shown.done:
            shown.advance(finished - shown.done)
        poll(finished)
    if succeeded() and shown.done < shown.total:
        shown.advance(shown.total - shown.done)


def _summary(plan: RestorePlan, results: list[PartitionResult], seconds: float) -> None:
    by_topic: dict[str, list[PartitionResult]] = {}
    for result in results:
        by_topic.setdefault(result.target_topic, []).append(result)
    for topic_plan in plan.topics:  # every topic is named, those with nothing to produce too
        if topic_plan.target_topic not in by_topic:
            parts = [p for p in plan.partitions if p.target_topic == topic_plan.target_topic]
            there = sum(p.skip for p in parts)
            why = f"all {count(there, 'record')} already in the target" if there else "no records selected"
            log.info("restored %s: nothing to produce (%s; %s)", topic_plan.target_topic,
                     count(len(parts), "partition"), why)  # fmt: skip
    for topic, items in sorted(by_topic.items()):
        records = sum(r.produced for r in items)
        size = sum(r.produced_bytes for r in items)
        # From the first task's start to the last one's end: the topic's producing time.
        busy = max(r.ended_at for r in items) - min(r.started_at for r in items)
        rate = records / busy if busy > 0 else 0.0
        producers = " and ".join(sorted({r.producer for r in items if r.producer}))
        log.info(
            "restored %s: %d records, %d bytes of keys and values in %.1f s (%.0f records/s%s)",
            topic,
            records,
            size,
            busy,
            rate,
            f", produced through {producers}" if producers else "",
        )
    # A task counts what it found in the target after fencing; a partition without a task, what the plan found.
    found = {(r.target_topic, r.target_partition): r.skipped for r in results}
    skipped = sum(found.get((p.target_topic, p.target_partition), p.skip) for p in plan.partitions)
    if skipped:
        log.info(
            "%s already in the target (from an earlier run, or the same records found there), not produced again",
            count(skipped, "record was", "records were"),
        )
    log.info("restore finished in %.1f s", seconds)


def describe(plan: RestorePlan, settings: RestoreSettings) -> list[str]:
    """The dry-run report: topics, partitions, records and bytes in the window, planned group offsets."""
    lines = ["dry run: nothing was changed"]
    if settings.where is not None:
        matched = sum(part.selected for part in plan.partitions)
        lines.append(f"--where {settings.where!r}: {count(matched, 'record')} selected (each partition's below)")
    predicted = False
    if plan.groups_round is not None:
        lines.append(f"consumer group offsets as of the offset round at {iso_time(plan.groups_round)}")
    for topic in plan.topics:
        lines.append(topic.describe_origin())
        if topic.create_partitions:
            config = ", ".join(f"{key}={value}" for key, value in sorted(topic.config.items()))
            if config:
                with_config = f", config {config}"
            else:
                with_config = f", the target's default configuration ({topic.no_config_because})"
            lines.append(
                f"create topic {topic.target_topic} with {count(topic.create_partitions, 'partition')}{with_config}"
            )
        else:
            lines.append(f"topic {topic.target_topic} exists with {count(topic.existing_partitions or 0, 'partition')}")
        if topic.set_timestamp_type is not None:
            lines.append(f"  then set {TIMESTAMP_TYPE}={topic.set_timestamp_type} (records keep their timestamps)")
        lines += [f"  {note}" for note in topic.notes]
    for source in plan.merged_sources:
        for bad in source.bad_segments:
            verdict = "left out" if settings.skip_bad_segments else "damaged, the restore refuses"
            lines.append(
                f"  {source.source_topic}/{source.source_partition} {verdict}: {bad.offsets} (segment {bad.name}: "
                f"{bad.reason})"
            )
    for part in plan.partitions:
        if part.repartition is not None:
            lines.append(
                f"{part.source_topic}/* -> {part.target_topic}/{part.target_partition} "
                f"(repartitioned, {part.repartition.describe()}): {part.selected} records selected, "
                f"{part.to_produce} to produce; target {part.status}, offsets from {part.baseline}"
            )
            for group in sorted(part.groups):
                lines.append(f"  group {group}: at the first record it had not read (approximate, see docs/restore.md)")
            continue
        reader = PartitionReader(
            settings.source / part.source_topic, part.source_partition, legacy=settings.legacy, keys=settings.keys
        )
        size = sum(len(r.key or b"") + len(r.value or b"") for r in _selected(reader, part))
        lines.append(
            f"{part.source_topic}/{part.source_partition} -> {part.target_topic}/{part.target_partition}: "
            f"{part.selected} records ({size} bytes of keys and values) selected, "
            f"{part.to_produce} to produce; target {part.status}, offsets from {part.baseline}"
        )
        for bad in part.bad_segments:
            verdict = "left out" if settings.skip_bad_segments else "damaged, the restore refuses"
            lines.append(f"  {verdict}: {bad.offsets} (segment {bad.name}: {bad.reason})")
        for group, offset in sorted(part.groups.items()):
            nth = count_selected(reader, part.window, below=offset)
            if part.skip:  # where the records an earlier run committed landed is read from the target
                lines.append(f"  group {group}: source offset {offset} -> restored record {nth}")
            else:
                # Each committed transaction's marker takes one offset after its records.
                new = part.baseline + nth + nth // TRANSACTION_RECORDS
                lines.append(f"  group {group}: source offset {offset} -> target offset {new}")
                predicted = True
    if predicted:
        lines.append(
            f"(target offsets are predicted: the restore commits its records in transactions of up to "
            f"{TRANSACTION_RECORDS:,} records, and each commit takes one offset in the target; a target that takes "
            f"more than {TRANSACTION_SECONDS:.0f} s for {TRANSACTION_RECORDS:,} records gets more commits, so the "
            "offsets land a little later. The real run sets each group exactly where its records landed.)"
        )
    return lines


def _selected(reader: PartitionReader, part: PartitionPlan) -> Any:
    from spark_kafka_backup.partition.selection import selected_records

    return selected_records(reader, part.window)
