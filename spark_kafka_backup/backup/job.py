"""The backup job: ``spark-submit jobs/backup.py [options]``.

Lifecycle:

1. Parse and check the settings; check the cluster answers, explicitly
   named topics exist, and the target holds no other cluster's or topic
   incarnation's backup (:mod:`spark_kafka_backup.backup.origin`); take the target's
   lease (:mod:`spark_kafka_backup.storage.lease`: another job on the same target is
   refused, naming it). Nothing starts if any of this fails.
2. Start the Spark session; with ``--kafka-source spark``, refuse (before
   anything is written) when Spark's Kafka connector is not on the class path.
3. Give every selected partition that has no files yet an empty segment,
   and take the first consumer group offset round (groups, then end offsets).
4. Start the Structured Streaming query ``kbackup_kafka`` (or Spark's
   ``kafka``) -> ``kbackup_v1``
   with its checkpoint in ``TARGET/kbackup~state/spark-checkpoint`` by default:
   ``Trigger.AvailableNow`` in snapshot mode (back up what exists at the
   start, then stop), a processing-time trigger otherwise.
5. While it runs: log each micro-batch (records read, remaining lag per
   topic); take an offset round every ``--offsets-interval`` seconds on a
   thread of its own (:mod:`spark_kafka_backup.backup.cluster_watch`: a cluster that
   does not answer never holds up this loop), and store each round once the
   backup has caught up with it.
6. On SIGTERM or SIGINT to the Python driver (its pid is logged at start),
   stop the query: the batch in flight is abandoned (its unsynced writes are
   repaired on the next start and its records read again), then exit 0.
   SIGTERM to the ``spark-submit`` JVM instead makes Spark's shutdown hook
   abandon the batch the same way, exiting 143. Exit 1 on a failure.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import Any

from spark_kafka_backup.backup.access import backup_permissions
from spark_kafka_backup.backup.cluster_metadata import MetadataKeeper
from spark_kafka_backup.backup.cluster_watch import ClusterWatch
from spark_kafka_backup.backup.group_offsets import (
    OffsetRound,
    ensure_partitions,
    last_stable_offsets,
    record_topics,
    store_round,
    take_round,
)
from spark_kafka_backup.backup.metrics import BackupMetrics, BatchWritten
from spark_kafka_backup.backup.origin import Recreated, check_origin
from spark_kafka_backup.backup.schemas import RegistryWatch
from spark_kafka_backup.backup.settings import BackupSettings, parse_backup_args
from spark_kafka_backup.backup.source_loss import SourceLossReport
from spark_kafka_backup.boundary import Stopped, check_stop, take_stop
from spark_kafka_backup.catalog import checkpoints
from spark_kafka_backup.catalog.erase import finish_erase
from spark_kafka_backup.catalog.ledger import CatalogLedger
from spark_kafka_backup.errors import (
    ClusterError,
    OriginError,
    SchemaRegistryError,
    SourceLossError,
    SparkKafkaBackupError,
    StoppedEarlyError,
    UsageError,
)
from spark_kafka_backup.fsutil import restrict_new_files
from spark_kafka_backup.job_options import run_job
from spark_kafka_backup.kafka.admin_session import AdminSession
from spark_kafka_backup.kafka.client_settings import redact
from spark_kafka_backup.kafka.cluster import TopicPartitionKey, cluster_identity, partition_counts
from spark_kafka_backup.kafka.columnar import edge_setting
from spark_kafka_backup.kafka.isolated_groups import IsolatedGroupOffsets
from spark_kafka_backup.kafka.permissions import Permission, refuse_missing, secured
from spark_kafka_backup.kafka.reachability import refuse_unreachable
from spark_kafka_backup.logsetup import ensure_console_logging
from spark_kafka_backup.metrics import MetricsPublisher
from spark_kafka_backup.partition.layout import enclosing_backup, list_partitions, list_topics, state_dir
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.records_file import key_ring
from spark_kafka_backup.partition.writer import PartitionWriter
from spark_kafka_backup.spark.failures import QueryRestarts, failure_cause
from spark_kafka_backup.spark.kafka_connector import (
    SPARK_KAFKA_FORMAT,
    connector_loaded,
    package_coordinate,
    spark_source_client,
)
from spark_kafka_backup.spark.kafka_source import SOURCE_NAME, KafkaSource, decode_offsets
from spark_kafka_backup.spark.parallelism import backup_tasks
from spark_kafka_backup.spark.session import job_session, quiet_accumulator_server
from spark_kafka_backup.spark.v1_sink import SINK_NAME, V1Sink, read_batch_stats
from spark_kafka_backup.spark.written_batches import commit_written_batches, foreach_batch
from spark_kafka_backup.storage import Location, check_writable_root, prepare_root
from spark_kafka_backup.storage.lease import TargetLease
from spark_kafka_backup.text import count

log = logging.getLogger("spark_kafka_backup.backup")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``jobs/backup.py``; returns the exit code."""
    return run_job("backup", argv, parse_backup_args, _run)


def _run(settings: BackupSettings) -> int:
    ensure_console_logging(debug=settings.debug, log_format=settings.monitoring.log_format)
    return BackupJob(settings).run()


@dataclass
class BackupJob:
    settings: BackupSettings
    _stop_signal: int | None = None
    _pending: list[OffsetRound] = field(default_factory=list)
    _checkpoints: list[checkpoints.Checkpoint] = field(default_factory=list)
    _seen_checkpoint: int = 0  # requests get increasing ids: only newer files can hold new ones
    _logged_batch: int = -1
    _restarts: QueryRestarts = field(default_factory=QueryRestarts)
    _rows: int = 0
    _batch_seconds: float = 0.0  # the micro-batches' own time (Spark's triggerExecution), start-up excluded
    _began: float = field(default_factory=time.monotonic)  # the job's start, before Spark
    _lease: TargetLease | None = None
    _umask: int = 0o022
    _metrics: BackupMetrics = field(default_factory=BackupMetrics)
    _publisher: MetricsPublisher | None = None
    _published_at: float = float("-inf")
    _stats_dir: Path | None = None
    #: Records read by committed batches not logged yet (from the sink's commits).
    _read_by_batch: dict[int, int] = field(default_factory=dict)
    _progress_seen: str = ""  # the timestamp of the last query progress the metrics took in
    _registry: RegistryWatch | None = None
    _source_loss: SourceLossReport | None = None
    #: Topics refused because they were deleted and created again (see :mod:`spark_kafka_backup.backup.origin`).
    _recreated: dict[str, str] = field(default_factory=dict)
    #: Topics whose groups' offsets rounds leave out for another incarnation (named once).
    _other_incarnations: set[str] = field(default_factory=set)
    #: The signal handlers before the query's own (put back when the job ends).
    _saved_handlers: dict[int, Any] = field(default_factory=dict)
    #: Set once the job stops its query (a signal): the batch function's failures are then the stop's.
    _stopping: threading.Event = field(default_factory=threading.Event)

    def run(self) -> int:
        try:
            return self._run()
        except (Stopped, KeyboardInterrupt) as stop:
            if not self.settings.snapshot:
                raise
            signum = stop.signum if isinstance(stop, Stopped) else signal.SIGINT
            raise StoppedEarlyError(_stopped_snapshot(signum, {}, {}), signum=signum) from stop
        finally:
            # From the query's start to here a signal is recorded, not raised: a stop under way, or a finished
            # snapshot's teardown (Spark's stop, the lease), is not turned into another outcome by a second signal.
            for sig, handler in self._saved_handlers.items():
                signal.signal(sig, handler)

    def _run(self) -> int:
        settings = self.settings
        edge_setting()  # a mistyped KBACKUP_KAFKA_EDGE is refused before anything is written
        self._umask = restrict_new_files(settings.umask)
        safe = redact(settings.client)
        log.info(
            "backing up %s from %s into %s (%s)",
            settings.selection.describe(),
            safe["bootstrap.servers"],
            settings.target,
            "snapshot" if settings.snapshot else "continuous",
        )
        check_writable_root(settings.target)  # before the cluster is asked anything: a typo fails at once
        inside = enclosing_backup(settings.target)
        if inside is not None:  # every read command takes the outer root as the backup: a nested one is lost to them
            raise UsageError(f"--target-dir {settings.target} is inside the backup {inside}: back up into {inside} "
                             "itself (it takes more topics), or into a directory outside it")  # fmt: skip
        if settings.checkpoint_location is not None:
            check_writable_root(settings.checkpoint_location, what="Spark checkpoint location")
        session = AdminSession({**settings.client, "socket.timeout.ms": "10000"})
        self._groups = IsolatedGroupOffsets({**settings.client, "socket.timeout.ms": "10000"})
        self._metadata = MetadataKeeper(settings.target, settings.selection, settings.client)
        self._preflight(session)
        if settings.schema_registry is not None:
            interval = settings.schema_registry_interval or settings.offsets_interval
            self._registry = RegistryWatch(settings.target, settings.schema_registry, interval=interval)
            self._registry.check()
        self._metrics = BackupMetrics(rate_window=settings.monitoring.metrics_interval)
        publisher = self._publisher = settings.monitoring.publisher("backup", {"target": str(settings.target)})
        publisher.start()  # a port in use is refused before anything is written
        self._publish(force=True)  # up, from the start
        # Where the sink's commits say what each batch read and wrote: the batch lines and the metrics.
        self._stats_dir = Path(tempfile.mkdtemp(prefix="spark-kafka-backup-batches-"))
        finished = False
        try:
            # One job per target, from before Spark starts (its checkpoint is in the target too) until the end.
            with TargetLease(state_dir(settings.target), self._purpose) as lease, self._checkpoint_lease():
                self._lease = lease
                # Spark before the first write to the target: a missing connector is refused with nothing written.
                spark = self._session()
                try:
                    check_stop()  # one lost while Spark started: before anything is written to the target
                    code = self._back_up(spark, session)
                    finished = settings.snapshot  # a snapshot stopped before its end raised StoppedEarlyError
                    return code
                finally:
                    spark.stop()
        finally:
            self._groups.close()
            self._metrics.observe_stopped(time.time(), finished=finished)
            self._publish(force=True)
            publisher.close()
            if self._stats_dir is not None:
                shutil.rmtree(self._stats_dir, ignore_errors=True)

    def _back_up(self, spark: Any, session: AdminSession) -> int:
        settings = self.settings
        prepare_root(settings.target)
        # Under the target's lease, before any writer opens a partition; a sealed partition's erase with its key.
        erased = finish_erase(settings.target, key_ring(settings.files.encryption_key()))
        if erased is not None:
            later = erased == "forwards" and not isinstance(settings.target, Path)
            log.warning("finished an erase that was interrupted (%s)%s", erased,
                        "; on a versioned bucket the earlier versions of the segments it replaced stay until that "
                        "erase is run again" if later else "")  # fmt: skip
        created = session.call(
            lambda admin, _: ensure_partitions(
                settings.target, admin, settings.selection, max_segment_size=settings.files.max_segment_size
            )
        )
        if created:
            log.info("%s prepared in the backup", count(created, "new partition"))
        self._record_topics(session)
        topics_recorded_at = time.monotonic()
        if self._registry is not None:
            self._registry.capture_now(when="at the start")
        first_round = session.call(
            lambda admin, timeout: take_round(
                admin, settings.selection, target=settings.target, timeout=timeout, group_reader=self._groups
            )
        )
        self._add_rounds([first_round])
        if settings.snapshot:
            self._groups.close()  # a snapshot reads its groups once, at its start
        self._metrics.observe_last_stable_offsets(first_round.ends, first_round.taken_at)
        existing = checkpoints.list_checkpoints(settings.target)
        self._checkpoints = [c for c in existing if c.status == "pending"]
        completed = [c.taken_at for c in existing if c.status == "completed" and c.taken_at is not None]
        self._metrics.observe_checkpoints(
            waiting=len(self._checkpoints), completed_at=max(completed) / 1000 if completed else None
        )
        # Read again from the oldest request still waiting (one may predate a snapshot's checkpoint).
        outstanding = [c.id for c in existing if c.status == "requested"]
        self._seen_checkpoint = min(outstanding) - 1 if outstanding else max((c.id for c in existing), default=0)

        self._source_loss = SourceLossReport(settings.target, settings.selection,
                                             every=min(settings.offsets_interval, 30.0))  # fmt: skip
        check_stop()  # a stop whose first raise a finalizer swallowed: before the query, not after it
        query = self._start(spark)
        # SIGINT too, unless it was ignored (a backup started in the background of a script).
        stops = [signal.SIGTERM] + ([] if signal.getsignal(signal.SIGINT) == signal.SIG_IGN else [signal.SIGINT])
        self._saved_handlers = {sig: signal.signal(sig, self._on_signal) for sig in stops}
        taken = take_stop()  # one that arrived as the query started: stopped like one arriving from here on
        if taken is not None:
            self._on_signal(taken, None)
        log.info("running; stop with SIGTERM to the driver process %d (a snapshot stops by itself)", os.getpid())
        started = time.monotonic()
        stopped_by: int | None = None  # the signal that stopped the query (a snapshot that ends by itself: none)
        watch = None
        if not settings.snapshot:
            watch = ClusterWatch(
                settings.target,
                settings.selection,
                session,
                servers=settings.client["bootstrap.servers"],
                interval=settings.offsets_interval,
                seen_checkpoint=self._seen_checkpoint,
                topics_recorded_at=topics_recorded_at,
                max_segment_size=settings.files.max_segment_size,
                prepared=first_round.ends,  # ensure_partitions gave them their files
                sample_every=settings.monitoring.metrics_interval if self._publisher_enabled else None,
                groups=self._groups,
                metadata=self._metadata,
            )
            watch.start()
        try:
            while True:
                if not query.isActive:
                    failure = query.exception()
                    if failure is None:
                        break
                    query = self._start_again(spark, failure)
                if self._lease is not None and self._lease.lost is not None:
                    self._stopping.set()
                    query.stop()
                    self._lease.check()
                if self._stop_signal is not None:
                    log.info("signal %d: stopping; a batch still in flight is not committed: the next start reads it "
                             "again (nothing is lost or stored twice)", self._stop_signal)  # fmt: skip
                    quiet_accumulator_server(spark)
                    query.stop()
                    stopped_by = self._stop_signal
                    break
                try:
                    query.awaitTermination(1)
                except Exception as exc:  # the query failed: StreamingQueryException with the cause inside
                    query = self._start_again(spark, exc)
                    continue
                self._report_progress(query)
                if watch is not None:
                    self._take_over(watch, query)
                self._store_reached_rounds(query)
                if self._registry is not None and not settings.snapshot:
                    self._registry.poll()
                self._source_loss.poll()
                self._publish()
            self._report_progress(query)
            if settings.snapshot and stopped_by is None:
                # A finished snapshot holds everything up to the end offsets it
                # captured at its start, and every round was taken before that.
                self._store_reached_rounds(query, finished_snapshot=True)
                done = checkpoints.record_completed(
                    settings.target, first_round.groups, first_round.ends, int(first_round.taken_at * 1000)
                )
                log.info("checkpoint %d completed", done.id)
                self._metrics.observe_checkpoints(waiting=0, completed_at=time.time())
                if self._publisher_enabled:
                    self._sample_at_end(session)
                self._seal_newest_segments()
                self._summary(time.monotonic() - started)
                if self._registry is not None:  # last: the records are complete and sealed whatever it says
                    self._capture_after("the snapshot's last record")
                self._refuse_source_loss()
                self._refuse_at_end(session)
            else:
                if watch is not None:
                    watch.stop()
                    self._take_over(watch, query)
                self._store_reached_rounds(query)
                for waiting in self._checkpoints:
                    checkpoints.finish(
                        settings.target, waiting, failed_reason="the backup stopped before it reached the cut"
                    )
                    log.info("checkpoint %d failed: the backup stopped before it reached the cut", waiting.id)
                self._seal_newest_segments()
                if self._registry is not None:
                    self._capture_after("the last records read before the stop")
                self._source_loss.poll(now=True)
                if self._source_loss.gaps:
                    log.warning("the source deleted records before this backup read them: %s (recorded in the "
                                "backup as lost at the source)", self._source_loss.describe())  # fmt: skip
                self._refuse_at_end(session)
                if settings.snapshot and stopped_by is not None:
                    raise StoppedEarlyError(_stopped_snapshot(stopped_by, first_round.ends, _backed_up_offsets(query)),
                                            signum=stopped_by)  # fmt: skip
        finally:
            if watch is not None:
                watch.stop()
            if self._registry is not None:
                self._registry.stop()
        return 0

    # -- steps ---------------------------------------------------------------

    def _refuse_source_loss(self) -> None:
        """A finished snapshot is whole, or exits 1 naming what the source deleted before it was read."""
        assert self._source_loss is not None
        self._source_loss.poll(now=True)
        lost = self._source_loss.describe()
        if not lost:
            log.info("snapshot: nothing was deleted at the source while the snapshot read it")
            return
        if self.settings.accept_source_loss:
            log.warning("snapshot: the source deleted %s before they were read (accepted with --accept-source-loss; "
                        "recorded in the backup as lost at the source)", lost)  # fmt: skip
            return
        raise SourceLossError(
            f"the snapshot holds everything else, but the source deleted {lost} before they were read (retention or "
            "deleted records); they are recorded in the backup as lost at the source (--accept-source-loss exits 0)"
        )

    def _capture_after(self, what: str) -> None:
        """Capture the registry once more: every schema the records read so far name was registered before they were
        read. A failure is exit 1 (the records are backed up; the copy may lack schemas they name)."""
        assert self._registry is not None
        try:
            self._registry.capture_now(when=f"after {what}")
        except SparkKafkaBackupError as exc:
            raise SchemaRegistryError(
                f"the records are backed up, but the schema registry could not be captured after {what}, so "
                f"schemas registered since the last capture may be missing from the backup: {exc}; capture it with "
                f"spark-kafka-backup schemas capture {self.settings.target} --schema-registry URL"
            ) from exc

    def _preflight(self, session: AdminSession) -> None:
        settings = self.settings
        refuse_unreachable(settings.client["bootstrap.servers"])
        try:  # one attempt: an unreachable cluster is reported at once
            counts = session.call(lambda admin, _: partition_counts(admin, timeout=15), patience=0)
        except ClusterError as exc:
            raise ClusterError(f"cannot reach Kafka at {self.settings.client['bootstrap.servers']}: {exc}") from exc
        selection = self.settings.selection
        if selection.topics is not None:
            missing = [topic for topic in selection.topics if topic not in counts]
            if missing and secured(settings.client):
                # Kafka hides a topic from a principal that may not DESCRIBE it: say which permission is missing.
                reading = [Permission("READ", "TOPIC", topic, "read its records") for topic in missing]
                session.call(lambda admin, _: refuse_missing(admin, reading, settings.client))
            if missing:
                raise SparkKafkaBackupError(
                    f"topic(s) {', '.join(missing)} do not exist on {self.settings.client['bootstrap.servers']}"
                )
        elif not selection.select(counts) and self.settings.snapshot:
            raise SparkKafkaBackupError(
                f"no topic on {self.settings.client['bootstrap.servers']} matches --topics-regex "
                f"{selection.pattern!r}: a snapshot would back up nothing (a continuous backup waits for matching "
                "topics to appear)"
            )
        elif not selection.select(counts):
            log.warning("no topic matches %r yet; the backup picks topics up as they appear", selection.pattern)
        state = state_dir(self.settings.target)
        chosen = [*selection.topics] if selection.topics is not None else selection.select(counts)
        if state.name in chosen:  # only an older spark-kafka-backup's state directory can have a topic's name
            raise SparkKafkaBackupError(
                f"topic {state.name!r} cannot be backed up into {self.settings.target}: that target keeps "
                "spark-kafka-backup's "
                f"state in the directory {state} (made by an older spark-kafka-backup); back it up into a new target, "
                "or leave "
                "it out of --topics / --topics-regex"
            )
        session.call(lambda admin, timeout: refuse_missing(admin, backup_permissions(admin, chosen), settings.client))
        servers = self.settings.client["bootstrap.servers"]
        cluster_id, topic_ids = session.call(
            lambda admin, timeout: cluster_identity(admin, selection.select(counts), timeout=timeout)
        )
        recreated = check_origin(self.settings.target, cluster_id, topic_ids, servers=servers)
        log.info("cluster %s; topic ids: %s", cluster_id, ", ".join(f"{t} {i}" for t, i in topic_ids.items()) or "none")
        self._refuse_recreated(cluster_id, recreated)
        if recreated:  # the readers are not even asked for them
            refused = {item.topic for item in recreated}
            remaining = selection.without(refused)
            if remaining is None:
                raise OriginError("; ".join(item.describe(self.settings.target, cluster_id) for item in recreated))
            self.settings = replace(self.settings, selection=remaining)

    @property
    def _publisher_enabled(self) -> bool:
        return self._publisher is not None and self._publisher.enabled

    def _publish(self, *, force: bool = False) -> None:
        """Refresh the metrics every ``--metrics-interval`` (``force``: now)."""
        if not self._publisher_enabled:
            return
        now = time.monotonic()
        if not force and now - self._published_at < self.settings.monitoring.metrics_interval:
            return
        self._published_at = now
        assert self._publisher is not None
        try:
            self._collect_batch_stats()
            self._publisher.publish(self._metrics.samples())
        except Exception as exc:  # a full disk under the metrics file must not stop the backup
            log.warning("metrics not written: %s", exc)

    def _sample_at_end(self, session: AdminSession) -> None:
        """A finished snapshot's last look at the cluster: its lag now (records that arrived while it ran)."""
        try:
            at, ends = session.call(
                lambda admin, timeout: last_stable_offsets(admin, self.settings.selection, timeout=timeout)
            )
        except ClusterError as exc:
            log.warning("the last stable offsets could not be read for the metrics: %s", exc)
            return
        self._metrics.observe_last_stable_offsets(ends, at)

    def _checkpoint_lease(self) -> TargetLease:
        """The Spark checkpoint is leased too (it may be outside the target): two jobs never share one."""
        checkpoint = self.settings.checkpoint
        return TargetLease(checkpoint, self._purpose, name="kbackup.lease", guards=f"the Spark checkpoint {checkpoint}")

    @property
    def _purpose(self) -> str:
        """How the target's lease names this job (``spark-kafka-backup checkpoint create`` asks for a continuous
        one)."""
        return "snapshot backup" if self.settings.snapshot else checkpoints.CONTINUOUS_BACKUP

    def _record_topics(self, session: AdminSession) -> None:
        servers = self.settings.client["bootstrap.servers"]
        recorded = session.call(
            lambda admin, timeout: record_topics(
                self.settings.target, admin, self.settings.selection, servers=servers, timeout=timeout
            )
        )
        if recorded.changed:
            log.info("topic configuration recorded for %s", count(recorded.changed, "topic"))
        self._refuse_recreated(recorded.cluster_id, recorded.recreated)
        if self._stop_signal is not None:
            return  # a stop is not held up by a capture (two connections, seconds under load): the next start takes one
        try:
            session.call(self._metadata.keep)
        except ClusterError as exc:  # the cluster around the topics waits for the next capture, never the records
            log.warning("cluster metadata not captured this time: %s", exc)

    def _refuse_recreated(self, cluster_id: str, recreated: list[Recreated]) -> None:
        """Name each topic found deleted and created again, once; the job exits 1 at its end for them."""
        for item in recreated:
            if item.topic not in self._recreated:
                self._recreated[item.topic] = item.describe(self.settings.target, cluster_id)
                log.error("%s", self._recreated[item.topic])

    def _refuse_at_end(self, session: AdminSession) -> None:
        """The last look: a topic recreated since the last round is named too; any refused topic is exit 1."""
        with contextlib.suppress(ClusterError):  # the records are stored; an unreachable cluster changes nothing
            self._record_topics(session)
        if self._recreated:
            raise OriginError(
                "everything else is backed up, but "
                + "; ".join(self._recreated[topic] for topic in sorted(self._recreated))
            )

    def _session(self) -> Any:
        spark = job_session(
            "kbackup-backup",
            debug=self.settings.debug,
            spark_conf=self.settings.spark_conf,
            umask=self._umask,
            log_format=self.settings.monitoring.log_format,
        )
        spark.dataSource.register(KafkaSource)
        spark.dataSource.register(V1Sink)
        if self.settings.kafka_source == "spark" and not connector_loaded(spark):
            raise SparkKafkaBackupError(
                "--kafka-source spark needs Spark's Kafka connector on the class path: "
                f"spark-submit --packages {package_coordinate()} jobs/backup.py ..."
            )
        return spark

    def _start(self, spark: Any) -> Any:
        settings = self.settings
        # Where the files are written (the sink's or the source's tasks): the job's options, with this run's umask and
        # its directory of batch figures.
        files = replace(settings.files, umask=self._umask, stats_dir=self._stats_dir)
        if settings.kafka_source == "spark":
            reader = spark.readStream.format(SPARK_KAFKA_FORMAT)
            client = spark_source_client(settings.java_client)
            # Spark's source skips deleted offsets and reads recreated topics on: the sink checks both.
            files = replace(files, check_source=True, client=dict(settings.client))
        else:
            # Small partitions are packed into tasks; keep every core busy when there are enough of them.
            context = spark.sparkContext
            tasks, why = backup_tasks(dict(context.getConf().getAll()), context.defaultParallelism)
            if not context.master.startswith("local"):
                log.info("a micro-batch with enough partitions is packed into at least %s: %s", count(tasks, "task"),
                         why)  # fmt: skip
            reader = spark.readStream.format(SOURCE_NAME).option("minPartitions", str(tasks))
            client = settings.client
            reader = reader.option("logFormat", settings.monitoring.log_format)
            reader = reader.option("sourceGapsRoot", _location_text(settings.target))
            # The source's tasks write the files: the records never cross to the JVM and back to a second Python
            # process; this process commits the rows that say what they wrote (foreachBatch, below).
            reader = reader.option("writeTo", json.dumps(files.options()))
        for key, value in client.items():
            reader = reader.option(f"kafka.{key}", value)
        if settings.selection.topics is not None:
            reader = reader.option("subscribe", ",".join(settings.selection.topics))
        else:
            reader = reader.option("subscribePattern", settings.selection.pattern)
        reader = reader.option("startingOffsets", "earliest").option("includeHeaders", "true")
        reader = reader.option("failOnDataLoss", "false")
        if settings.max_offsets_per_trigger:
            reader = reader.option("maxOffsetsPerTrigger", str(settings.max_offsets_per_trigger))
        records = reader.load().writeStream
        if settings.kafka_source == "spark":
            writer = records.format(SINK_NAME).options(**files.options())
        else:
            commit = commit_written_batches(
                str(settings.target), self._stats_dir, schema_ids=settings.schema_registry is not None
            )
            writer = foreach_batch(records, spark, commit, self._stopping)
        writer = writer.queryName("kbackup-backup").option("checkpointLocation", str(settings.checkpoint))
        if settings.snapshot:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=f"{settings.trigger_interval} seconds")
        return writer.start()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._stop_signal = signum
        self._stopping.set()  # a batch failing from here on failed because of the stop

    def _start_again(self, spark: Any, failure: BaseException) -> Any:
        """The query started again from its checkpoint after Spark failed to start a Python process in time (see
        :class:`QueryRestarts`); any other failure ends the job."""
        if self._stop_signal is not None or not self._restarts.allow(failure, completed_batch=self._logged_batch):
            raise SparkKafkaBackupError(f"the backup query failed: {failure_cause(failure)}") from None
        log.warning(
            "the backup query stopped: Spark did not get a Python process of its own started in time (%s; a busy "
            "machine); starting it again from its checkpoint (%d of %d in a row)",
            failure_cause(failure), self._restarts.count, self._restarts.limit,
        )  # fmt: skip
        return self._start(spark)

    def _collect_batch_stats(self) -> None:
        """Take what the sink's commits left (records read per batch; written, for the metrics)."""
        if self._stats_dir is None:
            return
        for stats in read_batch_stats(self._stats_dir):
            self._read_by_batch[stats.batch] = stats.read
            if self._publisher_enabled:
                self._metrics.observe_written(BatchWritten(stats.batch, stats.topics, stats.at))

    def _report_progress(self, query: Any) -> None:
        recent = query.recentProgress
        self._collect_batch_stats()  # after: a batch's commit leaves its file before Spark reports the batch
        if recent and recent[-1].get("timestamp", "") != self._progress_seen:
            # A trigger completed (with data or without: an idle query reports one every 10 s or so).
            self._progress_seen = recent[-1].get("timestamp", "")
            self._metrics.observe_trigger(time.time())
            self._metrics.observe_backed_up(_backed_up_offsets(query))
        for progress in recent:
            batch = progress.get("batchId", -1)
            if batch <= self._logged_batch:
                continue
            if "addBatch" not in (progress.get("durationMs") or {}):
                # A trigger that found nothing new: Spark names it after the next batch, which has not run (the one
                # that runs later takes that number and must be said then).
                log.debug("trigger found no new records (batch %d not run yet)", batch)
                continue
            self._logged_batch = batch
            rows = self._records_read(batch, progress)
            seconds = (progress.get("durationMs") or {}).get("triggerExecution", 0) / 1000
            self._rows += rows
            self._batch_seconds += seconds
            self._metrics.observe_batch(batch)
            lag = _lag_by_topic(progress)
            lag_text = ", ".join(f"{topic} {count}" for topic, count in sorted(lag.items())) or "none"
            log.info("batch %d: %d records read in %.1f s; remaining lag: %s", batch, rows, seconds, lag_text)

        for batch in [b for b in self._read_by_batch if b <= self._logged_batch]:
            del self._read_by_batch[batch]

    def _records_read(self, batch: int, progress: dict[str, Any]) -> int:
        """Records batch ``batch`` read.

        Spark's source counts them (its rows are the records). Behind this project's source the rows Spark counts
        are the tasks' reports, one per partition written, so the count comes from the sink's commit (records
        written and found already stored); if its file was not written (a full disk), the offsets the batch
        advanced stand in (transaction markers and aborted records among them; none on the first batch).
        """
        if self.settings.kafka_source == "spark":
            self._read_by_batch.pop(batch, None)
            return int(progress.get("numInputRows", 0))
        if batch in self._read_by_batch:
            return self._read_by_batch.pop(batch)
        start, end = _offsets_field(progress, "startOffset"), _offsets_field(progress, "endOffset")
        return sum(max(0, offset - start.get(key, offset)) for key, offset in end.items())

    def _take_over(self, watch: ClusterWatch, query: Any) -> None:
        """Pick up the watch's rounds and checkpoint cuts; complete the checkpoints the backup has reached."""
        found = watch.collect()
        for cluster_id, item in found.recreated:
            self._refuse_recreated(cluster_id, [item])
        self._add_rounds(found.rounds)
        self._checkpoints.extend(found.cuts)
        for at, ends in found.samples:
            self._metrics.observe_last_stable_offsets(ends, at)
        self._metrics.observe_checkpoints(waiting=len(self._checkpoints))
        if not self._checkpoints:
            return
        backed_up = _backed_up_offsets(query)
        still = []
        for waiting in self._checkpoints:
            if OffsetRound(waiting.groups, waiting.ends, 0).reached_by(backed_up):
                checkpoints.finish(self.settings.target, waiting)
                log.info("checkpoint %d completed", waiting.id)
                self._metrics.observe_checkpoints(waiting=len(self._checkpoints) - 1, completed_at=time.time())
            else:
                still.append(waiting)
        self._checkpoints = still
        self._metrics.observe_checkpoints(waiting=len(still))

    def _add_rounds(self, rounds: list[OffsetRound]) -> None:
        """Rounds to store once the backup reaches them; a topic whose groups' offsets a round left out for another
        incarnation is named once."""
        for round_ in rounds:
            for topic, (recorded, found) in sorted(round_.other_incarnations.items()):
                if topic not in self._other_incarnations:
                    self._other_incarnations.add(topic)
                    log.warning(
                        "consumer group offsets of topic %r are not stored: the cluster's topic (id %s) is not the "
                        "incarnation backed up here (id %s); the backup keeps the offsets it had stored for it, and "
                        "offset rounds go on for the other topics",
                        topic, found, recorded,
                    )  # fmt: skip
        self._pending.extend(rounds)

    def _store_reached_rounds(self, query: Any, *, finished_snapshot: bool = False) -> None:
        if not self._pending:
            return
        backed_up = _backed_up_offsets(query)
        while self._pending and (finished_snapshot or self._pending[0].reached_by(backed_up)):
            round_ = self._pending.pop(0)
            changed = store_round(self.settings.target, round_, prune=self.settings.prune_groups)
            groups = len(round_.groups)
            stored_at = time.time()
            log.info(
                "consumer offsets of %s stored (%s changed), %.1f s after they were read",
                count(groups, "group"),
                count(changed, "file"),
                stored_at - round_.taken_at,
            )
            self._metrics.observe_round_stored(stored_at)

    #: How long sealing waits for a partition's lock (a task of the stopped query still closing its writer).
    SEAL_LOCK_SECONDS = 600.0

    def _seal_newest_segments(self) -> None:
        """At a clean stop on local disk with ``--compression`` or an encryption key: every partition's newest segment
        is sealed too (a later run starts a new one), so no record stays plain at rest. On a store every object is
        sealed when it is published already."""
        settings = self.settings
        target = settings.target
        compression = settings.files.compression
        key = settings.files.encryption_key()
        if not isinstance(target, Path) or (compression is None and key is None):
            return
        sealed = 0
        ledger = CatalogLedger(target)
        for topic in list_topics(target):
            if not settings.selection.matches(topic):
                continue
            for partition in list_partitions(target / topic):
                with PartitionWriter(target / topic, topic, partition, max_segment_size=settings.files.max_segment_size,
                                     lock_timeout=self.SEAL_LOCK_SECONDS, ledger=ledger, compression=compression,
                                     encryption_key=key) as writer:  # fmt: skip
                    sealed += writer.seal_newest()
        log.info("sealed the newest segment of %s (%s)", count(sealed, "partition"),
                 "encrypted" if key is not None else f"compressed with {compression}")  # fmt: skip

    def _summary(self, seconds: float) -> None:
        target = self.settings.target
        #: Per topic: partitions, records, bytes of plain records, bytes in sealed segments.
        topics: dict[str, tuple[int, int, int, int]] = {}
        for topic in list_topics(target):
            if not self.settings.selection.matches(topic):
                continue
            topic_dir = target / topic
            records = size = stored = plain = 0
            partitions = list_partitions(topic_dir)
            for partition in partitions:
                for segment in PartitionReader(topic_dir, partition).summaries():
                    records += segment.record_count
                    if segment.compression is None:
                        # The records file's bytes, magic byte included, as `ls` shows them (the batch lines count
                        # the records' bytes only).
                        size += segment.records_bytes
                        plain += segment.record_count
                    else:
                        stored += segment.records_bytes
            topics[topic] = (len(partitions), records, size, stored)
            if self.settings.files.encrypted and plain:
                log.warning("snapshot: %s: %s in segments that are not encrypted", topic, count(plain, "record"))
        shown = topics if len(topics) <= SUMMARY_TOPICS else {}  # beyond, a line each would bury the rest
        for topic, (partitions_, records, size, stored) in shown.items():
            log.info("snapshot: %s: %s, %s, %s in the backup", topic, count(partitions_, "partition"),
                     count(records, "record"), _stored_bytes(size, stored))  # fmt: skip
        if not shown:
            totals = [sum(values) for values in zip(*topics.values(), strict=True)] if topics else [0, 0, 0, 0]
            log.info("snapshot: %s, %s, %s, %s in the backup (per topic: spark-kafka-backup ls %s)",
                     count(len(topics), "topic"), count(totals[0], "partition"), count(totals[1], "record"),
                     _stored_bytes(totals[2], totals[3]), target)  # fmt: skip
        rate = self._rows / self._batch_seconds if self._batch_seconds > 0 else 0.0
        log.info(
            "snapshot finished: %d records read in %.1f s of micro-batches (%.0f records/s); %.1f s from the job's "
            "start to its end, Spark's start-up included (%.1f s after the query started)",
            self._rows, self._batch_seconds, rate, time.monotonic() - self._began, seconds,
        )  # fmt: skip


#: A snapshot's summary names each topic up to this many topics, and gives the totals beyond.
SUMMARY_TOPICS = 20


def _stored_bytes(plain: int, sealed: int) -> str:
    sizes = [f"{plain:,} bytes"] if plain or not sealed else []
    return " and ".join(sizes + ([f"{sealed:,} bytes in sealed segments"] if sealed else []))


def _stopped_snapshot(signum: int, planned: dict[TopicPartitionKey, int], reached: dict[TopicPartitionKey, int]) -> str:
    """What a snapshot stopped by a signal says: how far it got of the end offsets it planned at its start."""
    name = signal.Signals(signum).name
    if not reached:
        progress = "no micro-batch of it had been committed"
    else:
        done = sum(1 for key, end in planned.items() if reached.get(key, 0) >= end)
        left = sum(max(0, end - reached.get(key, 0)) for key, end in planned.items())
        progress = (
            f"{done} of {count(len(planned), 'partition')} backed up to the end offsets it planned, "
            f"{count(left, 'offset')} still to read"
        )
    return (
        f"the snapshot was stopped by {name} before it was complete: {progress}; what it backed up is kept, and a run "
        "with the same options goes on from there (the backup holds no completed checkpoint of this run)"
    )


def _location_text(location: Location) -> str:
    """A location as executors find it: a local path made absolute."""
    return str(location.resolve()) if isinstance(location, Path) else str(location)


def _offsets_field(progress: dict[str, Any], name: str) -> dict[TopicPartitionKey, int]:
    sources = progress.get("sources") or []
    if not sources:
        return {}
    value = sources[0].get(name)
    if isinstance(value, str):
        value = json.loads(value) if value.strip() else None
    if not isinstance(value, dict):
        return {}
    if "v" in value:
        return decode_offsets(value)
    # Spark's own Kafka source: {"topic": {"0": 42, ...}, ...}
    return {
        (topic, int(partition)): int(offset)
        for topic, partitions in value.items()
        if isinstance(partitions, dict)
        for partition, offset in partitions.items()
    }


def _lag_by_topic(progress: dict[str, Any]) -> dict[str, int]:
    end = _offsets_field(progress, "endOffset")
    latest = _offsets_field(progress, "latestOffset")
    lag: dict[str, int] = {}
    for (topic, partition), offset in latest.items():
        lag[topic] = lag.get(topic, 0) + max(0, offset - end.get((topic, partition), 0))
    return lag


def _backed_up_offsets(query: Any) -> dict[TopicPartitionKey, int]:
    """The end offsets of the last committed micro-batch: everything below is in the backup."""
    progress = query.lastProgress
    return _offsets_field(progress, "endOffset") if progress else {}
