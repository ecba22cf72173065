"""Restoring one backed-up partition into one target partition (runs on a Spark executor).

The task starts a transactional producer for its target partition
(:mod:`spark_kafka_backup.restore.marker`), which fences any other restore writing there,
then reads the partition's progress marker *after* fencing: that, not the
plan, says where to go on. It reads the selected records in offset order,
skips those below the marker's source offset (already in the target), and
produces the rest to the target partition in transactions of
:data:`~spark_kafka_backup.restore.marker.TRANSACTION_RECORDS` records, keeping key,
value, headers (order and duplicates) and timestamp. Each transaction commits
its records together with the advanced marker, so after any crash the target
holds exactly the records below the marker, each once.

A task fenced by a newer restore of the same partition stops producing and
returns ``fenced`` (not an exception: Spark would retry it and fence the newer
one back).

librdkafka can wait for ever in a transactional call despite its timeout when
the coordinator's broker left the cluster (librdkafka issues #5456 and #5511:
a coordinator request's timeout is never checked, and a decommissioned cached
coordinator is never asked again). So each transactional call runs on a
thread of its own and is given up :data:`STUCK_GRACE_SECONDS` after its own
timeout: the task then leaves that producer where it hangs, starts a new one
(which fences it and aborts its open transaction), reads the marker again and
goes on from there, at most :data:`PRODUCER_ATTEMPTS` times.

Memory: the reader's 1 MiB chunks plus the producer's queue (bounded by
``queue.buffering.max.kbytes``), whatever the partition's size.

Consumer groups: a group committed at source offset C resumes, on the target,
at the first restored record at or after C (or after the last restored
record). That record's target offset comes from its delivery report when this
run produces it, and from reading the target (``read_committed``, counting
records from the marker's first offset) when an earlier run did.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from spark_kafka_backup.catalog.integrity import bad_segments
from spark_kafka_backup.errors import ChecksumError, DeliveryError, TargetChangedError, TargetLimitError
from spark_kafka_backup.format.encryption import KeyRing
from spark_kafka_backup.format.record import Record
from spark_kafka_backup.fsutil import restrict_new_files
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.records_file import install_keys, load_key
from spark_kafka_backup.restore.marker import (
    TRANSACTION_RECORDS,
    TRANSACTION_SECONDS,
    TRANSACTION_TIMEOUT_MS,
    ProgressMarker,
    marker_consumer,
    read_markers,
    transactional_id,
)
from spark_kafka_backup.restore.repartition import Repartition, routed_records
from spark_kafka_backup.restore.selection import Window, same_record, selected_records
from spark_kafka_backup.restore.staging import Staged, staged_topic_dir
from spark_kafka_backup.restore.throttle import Pace, Throttle
from spark_kafka_backup.schema_registry.wire import IdRewrite
from spark_kafka_backup.spark.stack_dumps import stacks_if_slow
from spark_kafka_backup.spark.worker_gc import freeze_loaded_objects
from spark_kafka_backup.storage import parse_location

T = TypeVar("T")


@dataclass(frozen=True)
class PartitionTask:
    """Everything a restore task needs (picklable)."""

    source_dir: str
    source_topic: str
    source_partition: int
    target_topic: str
    target_partition: int
    window: Window
    #: The restore's name for this partition's records (see :func:`spark_kafka_backup.restore.marker.restore_identity`).
    identity: str
    #: Source offset to go on from when the target holds no marker (the selected records below it are there,
    #: committed, from target offset ``baseline`` on: a restore whose marker expired, or an older spark-kafka-backup's);
    #: 0 when the target holds none of them.
    resume_from: int
    baseline: int
    #: The target offset after the last record already there (where a group past every record goes).
    after_last: int
    #: Another restore's marker identity the plan found and accepted to replace (empty target, --allow-non-empty).
    replaces: str | None
    groups: dict[str, int]
    client: dict[str, str]
    batch_size: int
    #: This task's part of the restore's rate limits (see :mod:`spark_kafka_backup.restore.throttle`).
    throttle: Throttle = field(default_factory=Throttle)
    legacy: bool = False
    #: The umask of the files the task creates (its staged copy of an object-storage backup).
    umask: int | None = None
    #: Set for a target partition of a repartitioned topic (``source_partition`` is then -1, ``groups`` only names
    #: the groups, and positions of the merged stream replace source offsets:
    #: :mod:`spark_kafka_backup.restore.repartition`).
    repartition: Repartition | None = None
    #: Where this task reads the key-encryption keys of encrypted segments: (file path, variable name) pairs.
    key_sources: tuple[tuple[str | None, str | None], ...] = ()
    #: The schema ids the records' keys and values get in the target registry (``--schema-registry``).
    id_rewrite: IdRewrite | None = None
    #: The producer's ``message.max.bytes``: at least the largest record (the plan measured it).
    message_bytes: int = 1_000_000
    #: ``--restamp-zero-timestamps``: a record stamped 0 is produced with the restore's time (else refused).
    restamp_zero: bool = False

    def sources(self) -> list[tuple[int, Window]]:
        """The backed-up partitions this task reads, with their selections."""
        if self.repartition is None:
            return [(self.source_partition, self.window)]
        return [(source.partition, source.window) for source in self.repartition.sources]

    def group_positions(self) -> dict[int, list[tuple[int, str]]]:
        """Per backed-up partition, ``(committed offset, group)`` in offset order: a group is placed at the first
        record of that partition at or past its offset (or of any partition, repartitioned, whichever comes first)."""
        if self.repartition is None:
            return {self.source_partition: sorted((offset, group) for group, offset in self.groups.items())}
        found: dict[int, list[tuple[int, str]]] = {}
        for group, offsets in self.repartition.groups.items():
            for source in self.repartition.sources:
                # No offset stored on a partition: every record there is unread.
                found.setdefault(source.partition, []).append((offsets.get(source.partition, -1), group))
        return {partition: sorted(items) for partition, items in found.items()}

    def stream(self, readers: dict[int, PartitionReader]) -> Iterator[tuple[int, int, Record]]:
        """``(position, backed-up partition, record)`` of what this task produces, in order; the position is the
        source offset, or the merged stream's position when repartitioned."""
        if self.repartition is None:
            for record in selected_records(readers[self.source_partition], self.window):
                yield record.offset, self.source_partition, record
        else:
            yield from routed_records(self.repartition, readers, self.target_partition, self.rewritten)

    def rewritten(self, record: Record, partition: int) -> Record:
        """``record`` of backed-up ``partition`` as it is produced: with the target registry's schema ids."""
        if self.id_rewrite is None:
            return record
        return self.id_rewrite.record(record, topic=self.source_topic, partition=partition)


@dataclass
class PartitionResult:
    source_topic: str
    source_partition: int
    target_topic: str
    target_partition: int
    selected: int = 0
    produced: int = 0
    produced_bytes: int = 0
    #: Selected records found already in the target when the task started.
    skipped: int = 0
    started_at: float = 0.0  # wall clock, seconds since the epoch
    ended_at: float = 0.0
    end_offset: int = 0
    group_offsets: dict[str, int] = field(default_factory=dict)
    #: Set when a newer restore of the same target partition fenced this one: why it stopped.
    fenced: str | None = None
    #: Set when this task found another restore's progress beyond its plan and went on from there.
    taken_over: str | None = None
    #: Repartitioned: per group, records after its new offset that it had read on the source (read again).
    read_again: dict[str, int] = field(default_factory=dict)


class _StuckProducerError(Exception):
    """A transactional call did not return within its timeout and the grace after it (internal to the task)."""


#: How long after its own timeout a transactional call is given up (see the module docstring).
STUCK_GRACE_SECONDS = 15.0

#: Producers one task starts before it fails: the first, and one after each call given up.
PRODUCER_ATTEMPTS = 3

#: The timeouts given to librdkafka's transactional calls (seconds).
INIT_SECONDS = 120.0
SEND_OFFSETS_SECONDS = 60.0
COMMIT_SECONDS = 120.0
ABORT_SECONDS = 10.0


def _within(seconds: float, call: Any, *args: Any) -> Any:
    """``call(*args)`` on a daemon thread; its result or exception, or :class:`_StuckProducerError` after
    ``seconds + STUCK_GRACE_SECONDS`` (the call goes on waiting on its thread, holding its producer)."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call(*args)
        except BaseException as exc:  # re-raised on the task's thread
            outcome["error"] = exc

    thread = threading.Thread(target=run, name="kbackup-restore-transaction", daemon=True)
    thread.start()
    thread.join(seconds + STUCK_GRACE_SECONDS)
    if thread.is_alive():
        raise _StuckProducerError(
            f"{getattr(call, '__name__', 'a transactional call')} did not return within {seconds:.0f} s "
            f"+ {STUCK_GRACE_SECONDS:.0f} s"
        )
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


class _FencedError(Exception):
    """A newer producer with the partition's transactional id took over (internal to the task)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def producer_settings(client: dict[str, str], batch_size: int, message_bytes: int = 1_000_000) -> dict[str, object]:
    return {
        **client,
        "enable.idempotence": "true",
        "acks": "all",
        "max.in.flight.requests.per.connection": "5",
        "message.max.bytes": str(max(message_bytes, batch_size)),
        "batch.size": str(batch_size),
        "linger.ms": "20",
        "queue.buffering.max.kbytes": str(max(64 * 1024, 4 * batch_size // 1024)),
    }


#: librdkafka logs a fenced producer as FATAL on stderr; the task reports it itself.
_task_log = logging.getLogger("spark_kafka_backup.restore")
_client_log = logging.getLogger("spark_kafka_backup.restore.producer")
_client_log.addHandler(logging.NullHandler())
_client_log.propagate = False

_FENCED_CODES = frozenset({-144, 90, 47})  # _FENCED, PRODUCER_FENCED, INVALID_PRODUCER_EPOCH
_FATAL = -150  # an operation refused because the producer had a fatal error (see the error callback)


def restore_partition(task: PartitionTask) -> PartitionResult:
    """Produce the task's records; return what was done and the groups' new offsets."""

    freeze_loaded_objects()
    restrict_new_files(task.umask)
    install_keys(KeyRing.of(load_key(file=file, env=env) for file, env in task.key_sources))
    result = PartitionResult(task.source_topic, task.source_partition, task.target_topic, task.target_partition)
    result.started_at = time.time()
    with stacks_if_slow(), contextlib.ExitStack() as stack:
        readers = {}
        for partition, window in task.sources():
            staged = stack.enter_context(
                staged_topic_dir(parse_location(task.source_dir), partition, window, legacy=task.legacy)
            )
            _check_segments(task, partition, window, staged)
            readers[partition] = PartitionReader(staged.topic_dir, partition, legacy=task.legacy)
        where = f"topic {task.target_topic!r} partition {task.target_partition}"
        stuck = ""
        for attempt in range(1, PRODUCER_ATTEMPTS + 1):
            try:
                done = _restore_from(task, readers, result)
                if attempt > 1:
                    done.taken_over = None  # the progress found was this task's own earlier producer's
                return done
            except _StuckProducerError as exc:
                stuck = str(exc)
                if attempt < PRODUCER_ATTEMPTS:
                    _task_log.warning("%s: %s; going on with a new producer", where, stuck)
                result = PartitionResult(
                    task.source_topic, task.source_partition, task.target_topic, task.target_partition,
                    started_at=result.started_at,
                )  # fmt: skip
        raise DeliveryError(
            f"{where}: the target cluster did not complete a transaction with {PRODUCER_ATTEMPTS} producers "
            f"(last: {stuck}); what was committed stays, run the restore again"
        )


def _restore_from(task: PartitionTask, readers: dict[int, PartitionReader], result: PartitionResult) -> PartitionResult:
    from confluent_kafka import KafkaException, Producer

    where = f"topic {task.target_topic!r} partition {task.target_partition}"
    deliveries = _Deliveries(task.source_topic)
    producer = Producer(
        {
            **producer_settings(task.client, task.batch_size, task.message_bytes),
            "transactional.id": transactional_id(task.target_topic, task.target_partition),
            "transaction.timeout.ms": str(TRANSACTION_TIMEOUT_MS),
            "on_delivery": deliveries.on_delivery,
            "error_cb": deliveries.on_error,
            "logger": _client_log,
        }
    )
    consumer = marker_consumer(task.client)
    key = (task.target_topic, task.target_partition)
    try:
        # Once before fencing (a restore of other records is refused without stopping the one that wrote them),
        # and again after (what the fenced one committed until then is what counts).
        _foreign(read_markers(consumer, [key]).get(key), task, where)
        try:
            _within(INIT_SECONDS, producer.init_transactions, INIT_SECONDS)
        except KafkaException as exc:
            raise DeliveryError(f"{where}: cannot start a transactional producer: {exc.args[0].str()}") from exc
        marker = _foreign(read_markers(consumer, [key]).get(key), task, where)
        run = _Run(task, producer, consumer, deliveries, marker)
        if marker is not None and marker.resume_from > task.resume_from:
            result.taken_over = (
                f"{where}: another restore of the same records had reached {_position(task)} {marker.resume_from}; "
                "this one went on from there"
            )
        run.produce_all(readers, result)
    except _StuckProducerError:
        raise  # the producer is held by the call that hangs: nothing more is asked of it
    except _FencedError as exc:
        result.fenced = f"{where}: {exc.reason}"
    except KafkaException as exc:
        error = exc.args[0] if exc.args else None
        if error is not None and error.code() == _FATAL:
            try:
                producer.poll(0)  # the error callback names the fatal error
            except KafkaException as again:  # or the poll raises it
                error = again.args[0] if again.args else error
            error = deliveries.fatal or error
        if error is not None and error.code() in _FENCED_CODES:
            result.fenced = f"{where}: {error.str()}"
        else:
            _abort(producer)
            reason = deliveries.failure or (error.str() if error is not None else str(exc))
            raise DeliveryError(f"{where}: {reason}") from exc
    except SystemError as exc:
        # confluent-kafka raises this when a delivery report is served while one of its calls is failing (seen
        # once when a newer restore fenced this one mid-transaction): the producer's own state says why.
        error = deliveries.fatal
        if error is None:
            try:
                producer.poll(0)
            except KafkaException as again:
                error = again.args[0] if again.args else None
        if deliveries.fenced or (error is not None and error.code() in _FENCED_CODES):
            result.fenced = f"{where}: {error.str() if error is not None else deliveries.failure}"
        else:
            _abort(producer)
            reason = deliveries.failure or (error.str() if error is not None else str(exc))
            raise DeliveryError(f"{where}: {reason}") from exc
    except BaseException:
        _abort(producer)
        raise
    finally:
        consumer.close()
    result.ended_at = time.time()
    return result


def _foreign(marker: ProgressMarker | None, task: PartitionTask, where: str) -> ProgressMarker | None:
    """This restore's marker (``None`` when there is none, or the plan accepted replacing another restore's)."""
    if marker is None or marker.restore == task.replaces:
        return None
    if marker.restore != task.identity:
        raise TargetChangedError(
            f"{where} now holds another restore's records (written after this restore was planned); "
            "nothing was produced there by this run"
        )
    return marker


def _abort(producer: Any) -> None:
    """Abort an open transaction at once (best effort), not after the broker's timeout: its records vanish."""
    from confluent_kafka import KafkaException

    # None open, or the producer is unusable: then the broker aborts it after its timeout.
    with contextlib.suppress(KafkaException, _StuckProducerError):
        _within(ABORT_SECONDS, producer.abort_transaction, ABORT_SECONDS)


#: Broker errors about one record of a batch: librdkafka gives every record of the batch the batch's error, so the
#: task names the record that explains it (the most extreme timestamp, the largest record, a missing key).
_INVALID_TIMESTAMP, _TOO_LARGE, _INVALID_RECORD, _CORRUPT = 32, 10, 87, 2
_RECORD_ERRORS = frozenset({_INVALID_TIMESTAMP, _TOO_LARGE, _INVALID_RECORD, _CORRUPT})
#: Messages purged from the producer's queue when a transaction is aborted: a consequence, never the cause.
_PURGED = frozenset({-152, -151})


class _Deliveries:
    """Delivery reports of one producer, in produce order (one partition: the broker keeps the order)."""

    def __init__(self, source_topic: str = "") -> None:
        self.source_topic = source_topic
        self.count = 0
        self.last_offset = -1
        self.failure: str | None = None
        self.fenced = False
        self.fatal: Any = None
        #: Delivery indexes whose offsets are wanted, and those found.
        self.wanted: set[int] = set()
        self.found: dict[int, int] = {}
        #: (backed-up partition, offset, timestamp) of each record produced since delivery index ``sent_from`` (a
        #: failed delivery report carries no timestamp).
        self.sent: list[tuple[int, int, int]] = []
        self.sent_from = 0
        self._rank = -1  # how well the failure kept explains what went wrong (see _rank)

    def on_error(self, error: Any) -> None:
        if error.fatal() and self.fatal is None:
            self.fatal = error

    def on_delivery(self, error: Any, message: Any) -> None:
        index = self.count
        self.count += 1
        if error is not None:
            rank = _rank(error.code(), message, self._timestamp(index))
            if rank > self._rank:
                self._rank = rank
                self.failure = self._describe(index, error, message)
                self.fenced = error.code() in _FENCED_CODES
            return
        self.last_offset = message.offset()
        if index in self.wanted:
            self.found[index] = self.last_offset

    def sent_anew(self) -> None:
        """Every record produced so far is delivered: forget where they came from."""
        self.sent.clear()
        self.sent_from = self.count

    def _timestamp(self, index: int) -> int | None:
        at = index - self.sent_from
        return self.sent[at][2] if 0 <= at < len(self.sent) else None

    def _describe(self, index: int, error: Any, message: Any) -> str:
        """The broker's reason, and the record it is about when the error is about a record."""
        reason = str(error.str())
        if error.code() not in _RECORD_ERRORS:
            return reason
        at = index - self.sent_from
        if not 0 <= at < len(self.sent):
            return reason
        partition, offset, stamp = self.sent[at]
        size = len(message.key() or b"") + len(message.value() or b"")
        detail = f"timestamp {stamp}" if error.code() == _INVALID_TIMESTAMP else f"{size} bytes of key and value"
        if error.code() == _INVALID_RECORD and message.key() is None:
            detail = "no key"
        return f"the broker rejected the record of {self.source_topic}/{partition} offset {offset} ({detail}): {reason}"


def _rank(code: int, message: Any, stamp: int | None) -> int:
    """How well a failed delivery explains a failure: the record-level cause best, purged messages least."""
    if code in _PURGED:
        return 0
    if code not in _RECORD_ERRORS:
        return 1
    if code == _INVALID_TIMESTAMP:
        return 2 + (0 if stamp is None else min(abs(stamp - int(time.time() * 1000)), 1 << 62))
    if code == _INVALID_RECORD:
        return 2 + (1 << 62 if message.key() is None else 0)
    return 2 + len(message.key() or b"") + len(message.value() or b"")


class _Run:
    """One task's pass: what it produces, the transactions, and where each group lands."""

    def __init__(
        self,
        task: PartitionTask,
        producer: Any,
        consumer: Any,
        deliveries: _Deliveries,
        marker: ProgressMarker | None,
    ) -> None:
        self.task = task
        self.producer = producer
        self.consumer = consumer
        self.deliveries = deliveries
        self.marker = marker
        self.resume_from = marker.resume_from if marker is not None else task.resume_from
        # Target offset of the first selected record, once known (a marker, or the older spark-kafka-backup's dense
        # prefix).
        self.first: int | None = marker.first if marker is not None else (task.baseline if task.resume_from else None)
        self.next = marker.next if marker is not None else task.after_last
        self.in_transaction = 0

    def produce_all(self, readers: dict[int, PartitionReader], result: PartitionResult) -> None:
        task = self.task
        produce = self.producer.produce
        topic, partition = task.target_topic, task.target_partition
        waiting = task.group_positions()
        rewrite = task.rewritten if task.id_rewrite is not None else None
        placed: set[str] = set()
        # group -> index of its record among the selected, the record and its partition, when an earlier run produced it
        earlier: dict[str, tuple[int, Record, int]] = {}
        this_run: dict[str, int] = {}  # group -> delivery index of its record in this run
        # Repartitioned: what each placed group had read on the source, to count the records it will read again.
        read_by = dict(task.repartition.groups) if task.repartition else {}
        index = 0
        first_index = -1
        transaction_ends = 0.0
        pace = Pace(task.throttle) if task.throttle.limited else None
        # Large records can exceed a byte limit within a few records: then every record is paced.
        pace_every = 1 if task.throttle.bytes_per_second else 100
        paced_bytes = 0
        for (position, source, record), is_last in _with_last(task.stream(readers)):
            if read_by:
                for group in placed.intersection(read_by):
                    if record.offset < read_by[group].get(source, -1):
                        result.read_again[group] = result.read_again.get(group, 0) + 1
            queue = waiting.get(source)
            while queue and queue[0][0] <= record.offset:
                _, group = queue.pop(0)
                if group in placed:
                    continue
                placed.add(group)
                if position < self.resume_from:
                    earlier[group] = (index, record, source)
                else:
                    this_run[group] = result.produced
                    self.deliveries.wanted.add(result.produced)
            index += 1
            if position < self.resume_from:
                result.skipped += 1
                continue
            if self.in_transaction == 0:
                self.producer.begin_transaction()
                transaction_ends = time.monotonic() + TRANSACTION_SECONDS
                if self.first is None:
                    self.deliveries.wanted.add(result.produced)
                    first_index = result.produced
            if rewrite is not None:
                record = rewrite(record, source)
            # Kafka's "no timestamp" is -1, which librdkafka sends as it is; 0 it replaces with "now".
            timestamp = -1 if record.timestamp is None else record.timestamp
            if timestamp == 0 and not task.restamp_zero:
                raise _zero_stamped(task, source, record)
            headers = list(record.headers) if record.headers else None
            while True:
                try:
                    produce(topic, record.value, record.key, partition, timestamp=timestamp, headers=headers)
                    break
                except BufferError:
                    self.producer.poll(0.1)
            self.deliveries.sent.append((source, record.offset, timestamp))
            result.produced += 1
            size = len(record.key or b"") + len(record.value or b"")
            result.produced_bytes += size
            self.in_transaction += 1
            if result.produced % 10_000 == 0:
                self.producer.poll(0)
                if self.deliveries.failure is not None:
                    self._flush()  # raises
            if pace is not None:
                paced_bytes += size + (sum(len(k.encode()) + len(v or b"") for k, v in headers) if headers else 0)
                if result.produced % pace_every == 0:
                    pace.wait(result.produced, paced_bytes, until=transaction_ends)
            if is_last or self.in_transaction >= TRANSACTION_RECORDS or time.monotonic() >= transaction_ends:
                if self.first is None:
                    self._flush()
                    self.first = self.deliveries.found[first_index]
                self._commit(position + 1)
        result.selected = index
        offsets = {group: self.deliveries.found[at] for group, at in this_run.items()}
        for group, (nth, expected, source) in earlier.items():
            offsets[group] = self._earlier_offset(nth, task.rewritten(expected, source))
        for group in task.groups:
            if group not in placed:
                offsets[group] = self.next  # after the last restored record
        result.group_offsets = offsets
        result.end_offset = self.next

    def _flush(self) -> None:
        remaining = self.producer.flush(300)
        if self.deliveries.fenced:
            raise _FencedError(str(self.deliveries.failure))
        if self.deliveries.failure is not None:
            raise DeliveryError(
                f"topic {self.task.target_topic!r} partition {self.task.target_partition}: {self.deliveries.failure}"
            )
        if remaining:
            raise DeliveryError(
                f"topic {self.task.target_topic!r} partition {self.task.target_partition}: "
                f"{remaining} records not acknowledged within 300 s"
            )

    def _commit(self, resume_from: int) -> None:
        """Commit the open transaction with the marker saying everything below ``resume_from`` is in the target."""
        from confluent_kafka import TopicPartition

        self._flush()
        assert self.first is not None
        marker = ProgressMarker(self.task.identity, resume_from, self.first, self.deliveries.last_offset + 1)
        position = TopicPartition(
            self.task.target_topic, self.task.target_partition, resume_from, metadata=marker.metadata()
        )
        metadata = self.consumer.consumer_group_metadata()
        _within(
            SEND_OFFSETS_SECONDS, self.producer.send_offsets_to_transaction, [position], metadata, SEND_OFFSETS_SECONDS
        )
        _within(COMMIT_SECONDS, self.producer.commit_transaction, COMMIT_SECONDS)
        self.deliveries.sent_anew()
        self.in_transaction = 0
        self.resume_from, self.next = resume_from, marker.next

    def _earlier_offset(self, nth: int, expected: Record) -> int:
        """Target offset of the ``nth`` selected record (``expected``), produced by an earlier run.

        Counted among the committed records from the restore's first one, and checked to be that record: records
        deleted or compacted away since would otherwise move a group past records it had not read.
        """
        from spark_kafka_backup.kafka.cluster import nth_committed_record

        first = self.marker.first if self.marker is not None else self.task.baseline
        where = f"topic {self.task.target_topic!r} partition {self.task.target_partition}"
        found = nth_committed_record(self.task.client, self.task.target_topic, self.task.target_partition, first, nth)
        if found is None or not same_record(expected, found[1]):
            raise TargetChangedError(
                f"{where}: the restored record of source offset {expected.offset} is not where the restore left it "
                f"(the {nth + 1}th record from target offset {first}): records were deleted or compacted since, "
                "so consumer group offsets cannot be placed; restore into a new topic"
            )
        return int(found[0])


def _zero_stamped(task: PartitionTask, source: int, record: Record) -> TargetLimitError:
    """A record stamped 0 the plan did not see (backed up since): librdkafka would give it the restore's time."""
    return TargetLimitError(
        f"topic {task.source_topic!r} partition {source} offset {record.offset} is stamped 0 "
        "(1970-01-01T00:00:00.000Z): librdkafka, the producer under spark-kafka-backup, sends 0 as 'now', so it would "
        "come "
        "back with the restore's time; what is committed stays, run the restore again with "
        "--restamp-zero-timestamps to accept that"
    )


def _with_last(items: Iterable[T]) -> Iterator[tuple[T, bool]]:
    """Each item, and whether it is the last."""
    iterator = iter(items)
    try:
        current = next(iterator)
    except StopIteration:
        return
    for following in iterator:
        yield current, False
        current = following
    yield current, True


def _position(task: PartitionTask) -> str:
    """What the marker's number counts, for messages."""
    return "source offset" if task.repartition is None else "position"


def _check_segments(task: PartitionTask, partition: int, window: Window, staged: Staged) -> None:
    """Refuse to produce from a partition whose cataloged segments fail their checksums.

    Segments the plan chose to leave out (``--skip-bad-segments``) and segments outside the offset window are
    not checked: they are not read.
    """
    topic_dir = parse_location(task.source_dir)
    found = bad_segments(
        topic_dir.parent,
        task.source_topic,
        partition,
        from_offset=window.from_offset,
        to_offset=window.to_offset,
        files=staged.topic_dir,
        only=staged.names,
    )
    for bad in found:
        if bad.name in window.skip_segments:
            continue
        raise ChecksumError(
            f"topic {task.source_topic!r} partition {partition}: segment {bad.name} "
            f"(offsets {bad.first_offset}..{bad.last_offset}) is damaged: {bad.reason}; nothing was produced "
            "from this partition (--skip-bad-segments restores the rest and reports what was left out)"
        )
