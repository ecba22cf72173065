"""A restore task's transactions, written once: the backed-up records as Arrow columns, a batch per producer call, a
transaction per :data:`~spark_kafka_backup.restore.marker.TRANSACTION_RECORDS` records committed with its progress
marker, every consumer group placed by the offsets the target gave.

The protocol talks to a :class:`TransactionalProducer`: the native edge's
(:class:`~spark_kafka_backup.kafka.columnar_producer.ColumnarProducer`: no Python object per record) or, where that
cannot be (it is not built, or ``KBACKUP_KAFKA_EDGE=reference``), confluent-kafka's behind the same face
(:class:`~spark_kafka_backup.restore.reference_producer.ReferenceProducer`). What the run does on the columns:

- the records come as chunks of columns (:mod:`spark_kafka_backup.restore.stream_columns`): a backed-up partition's
  batches as read, a time window a mask over the timestamps, or a repartitioned topic's merged stream routed to
  this task's target partition;
- records below the marker are skipped by a binary search over the chunk's positions, and each consumer group
  is placed by one over each partition's offsets (:class:`~spark_kafka_backup.restore.stream_columns.GroupPlacement`);
- schema ids are rewritten on the key and value columns of each call's records
  (:mod:`spark_kafka_backup.schema_registry.wire_columns`);
- the records are queued in chunks that end where a transaction must end (:data:`TRANSACTION_RECORDS` records,
  :data:`TRANSACTION_SECONDS`) and, under a rate limit, after at most a tenth of a second's worth;
- delivery reports are kept by the producer; Python reads the offsets it needs (the first record's, each placed
  group's) when a transaction commits, and the failures by delivery index, which it matches to the open
  transaction's records to name the one that explains a failure.

The task chooses the producer (:mod:`spark_kafka_backup.restore.task`); what it guarantees is said there.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from spark_kafka_backup.errors import DeliveryError, TargetChangedError
from spark_kafka_backup.format.record import Record
from spark_kafka_backup.kafka.cluster import PROGRESS_GROUP
from spark_kafka_backup.kafka.columnar_producer import Deliveries, ProducerError
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.restore import marker as markers
from spark_kafka_backup.restore import producer_calls as calls
from spark_kafka_backup.restore.marker import (
    TRANSACTION_TIMEOUT_MS,
    ProgressMarker,
    marker_consumer,
    transactional_id,
)
from spark_kafka_backup.restore.partition_task import (
    PartitionResult,
    PartitionTask,
    earlier_offset,
    fence,
    zero_stamped,
)
from spark_kafka_backup.restore.producer_calls import (
    FATAL,
    FENCED_CODES,
    FencedError,
    StuckProducerError,
    failure_rank,
    producer_settings,
    record_failure,
    within,
)
from spark_kafka_backup.restore.stream_columns import Chunk, GroupPlacement, task_chunks
from spark_kafka_backup.restore.throttle import Pace, Throttle
from spark_kafka_backup.schema_registry.wire_columns import ColumnIdRewrite

Int64s = npt.NDArray[np.int64]

#: Records queued in one call at most (a reader's batch holds up to 10,000).
CHUNK_RECORDS = 10_000


class TransactionalProducer(Protocol):
    """What the protocol asks of a producer: records as Arrow batches by delivery index, the reports by index, and
    librdkafka's transactional calls; a refused call or record raises
    :class:`~spark_kafka_backup.kafka.columnar_producer.ProducerError`."""

    def init_transactions(self, timeout: float) -> None: ...
    def begin_transaction(self) -> None: ...
    def produce(self, topic: str, partition: int, batch: pa.RecordBatch, first_index: int) -> None: ...
    def poll(self, timeout: float = 0) -> int: ...
    def flush(self, timeout: float) -> int: ...
    def deliveries(self, forget_below: int = 0) -> Deliveries: ...
    def error_text(self, code: int) -> str: ...
    def send_offsets_to_transaction(
        self, topic: str, partition: int, offset: int, metadata: str, group: str, timeout: float
    ) -> None: ...
    def commit_transaction(self, timeout: float) -> None: ...
    def abort_transaction(self, timeout: float) -> None: ...
    def close(self) -> None: ...


#: Makes a task's producer from its librdkafka settings and its marker consumer (which lends the progress group).
ProducerFactory = Callable[[dict[str, str], Any], TransactionalProducer]


def restore_transactions(
    task: PartitionTask,
    readers: dict[int, PartitionReader],
    result: PartitionResult,
    *,
    producer: ProducerFactory,
    chunks: Iterable[Chunk | None] | None = None,
    rewrite: ColumnIdRewrite | None = None,
    sharing: int = 1,
) -> PartitionResult:
    """Produce ``task``'s records through the producer that ``producer`` makes (see
    :mod:`spark_kafka_backup.restore.task`): read from ``readers``, or taken from ``chunks`` (a repartitioned
    topic's read shared by several target partitions: :mod:`spark_kafka_backup.restore.fanout`), whose schema id
    rewrite on columns the caller gives (``rewrite``, built once for them all); ``None`` among them says no chunk
    came for a while, and an open transaction older than :data:`~spark_kafka_backup.restore.marker.TRANSACTION_SECONDS`
    is committed then (a target waiting for a slow sibling would otherwise hold it open past the broker's
    transaction timeout). ``sharing`` producers share the task's queue memory."""
    if chunks is None:
        rewrite = ColumnIdRewrite(task.id_rewrite) if task.id_rewrite is not None else None
        chunks = task_chunks(task, readers, rewrite)
    elif (rewrite is None) != (task.id_rewrite is None):
        raise ValueError("the chunks' schema id rewrite must be the task's")
    where = f"topic {task.target_topic!r} partition {task.target_partition}"
    chosen = producer_settings(task.client, task.batch_size, task.message_bytes, sharing=sharing)
    settings = {key: str(value) for key, value in chosen.items()}
    settings.update({
        "transactional.id": transactional_id(task.target_topic, task.target_partition),
        "transaction.timeout.ms": str(TRANSACTION_TIMEOUT_MS),
    })  # fmt: skip
    consumer = marker_consumer(task.client)
    try:
        held = _Producer(producer(settings, consumer.consumer_group_metadata))
    except BaseException:
        consumer.close()
        raise
    run: _Run | None = None

    def start_producer() -> None:
        try:
            held.call(calls.INIT_SECONDS, held.columns.init_transactions, calls.INIT_SECONDS)
        except ProducerError as exc:
            raise DeliveryError(f"{where}: cannot start a transactional producer: {exc.text}") from exc

    try:
        run = _Run(task, held, fence(task, consumer, start_producer, result))
        run.produce_all(chunks, rewrite, result)
    except StuckProducerError:
        raise  # the producer is held by the call that hangs: nothing more is asked of it
    except FencedError as exc:
        result.fenced = f"{where}: {exc.reason}"
    except ProducerError as exc:
        code, text = exc.code, exc.text
        fatal = held.columns.deliveries().fatal
        if code == FATAL and fatal is not None:
            code, text = fatal
        if code in FENCED_CODES:
            result.fenced = f"{where}: {text}"
        else:
            held.abort()
            reason = run.failure() if run is not None else None
            raise DeliveryError(f"{where}: {reason or text}") from exc
    except BaseException:
        held.abort()
        raise
    finally:
        held.close()  # first: bounded, whatever the consumer's close does
        consumer.close()
    result.ended_at = time.time()
    return result


class _Producer:
    """The columnar producer, with its transactional calls given up when they hang (and then never closed: the call
    that hangs still holds it)."""

    def __init__(self, columns: TransactionalProducer) -> None:
        self.columns = columns
        self.stuck = False

    def call(self, seconds: float, method: object, *args: object) -> object:
        try:
            return within(seconds, method, *args)  # type: ignore[arg-type]
        except StuckProducerError:
            self.stuck = True
            raise

    def abort(self) -> None:
        """Abort an open transaction at once (best effort), not after the broker's timeout: its records vanish."""
        if self.stuck:
            return
        # None open, or the producer is unusable: then the broker aborts it after its timeout.
        with contextlib.suppress(ProducerError, StuckProducerError):
            self.call(calls.ABORT_SECONDS, self.columns.abort_transaction, calls.ABORT_SECONDS)

    def close(self) -> None:
        """Destroy the producer (given up like a transactional call if that hangs too), unless a call holds it."""
        if self.stuck:
            return
        with contextlib.suppress(StuckProducerError):
            self.call(calls.ABORT_SECONDS, self.columns.close)


@dataclass
class _Sent:
    """The open transaction's records, from delivery index ``first``: enough to name the one a failure is about."""

    first: int = 0
    partitions: list[Int64s] = field(default_factory=list)
    offsets: list[Int64s] = field(default_factory=list)
    stamps: list[Int64s] = field(default_factory=list)
    key_missing: list[npt.NDArray[np.bool_]] = field(default_factory=list)
    sizes: list[Int64s] = field(default_factory=list)

    def add(
        self, partitions: Int64s, offsets: Int64s, stamps: Int64s, key_missing: npt.NDArray[np.bool_], sizes: Int64s
    ) -> None:
        self.partitions.append(partitions)
        self.offsets.append(offsets)
        self.stamps.append(stamps)
        self.key_missing.append(key_missing)
        self.sizes.append(sizes)

    def anew(self, first: int) -> None:
        self.first = first
        self.partitions, self.offsets, self.stamps, self.key_missing, self.sizes = [], [], [], [], []

    @property
    def end(self) -> int:
        """The delivery index after the open transaction's last record."""
        return self.first + sum(len(offsets) for offsets in self.offsets)

    def row(self, index: int) -> tuple[int, int, int, bool, int] | None:
        """(partition, offset, timestamp, key missing, size) of the record of delivery index ``index``, if it is
        open."""
        at = index - self.first
        for partitions, offsets, stamps, missing, sizes in zip(
            self.partitions, self.offsets, self.stamps, self.key_missing, self.sizes, strict=True
        ):
            if 0 <= at < len(offsets):
                return int(partitions[at]), int(offsets[at]), int(stamps[at]), bool(missing[at]), int(sizes[at])
            at -= len(offsets)
        return None


class _Run:
    """One producer's pass over the task's records (see the module docstring)."""

    def __init__(self, task: PartitionTask, producer: _Producer, marker: ProgressMarker | None) -> None:
        self.task = task
        self.producer = producer
        self.marker = marker
        self.resume_from = marker.resume_from if marker is not None else task.resume_from
        # Target offset of the first selected record, once known (a marker, or the older spark-kafka-backup's dense
        # prefix).
        self.first: int | None = marker.first if marker is not None else (task.baseline if task.resume_from else None)
        self.next = marker.next if marker is not None else task.after_last
        self.in_transaction = 0
        self.sent = _Sent()
        #: Delivery indexes whose target offsets are wanted (the first record's, placed groups'), and those found.
        self.wanted: set[int] = set()
        self.found: dict[int, int] = {}

    def produce_all(
        self, chunks: Iterable[Chunk | None], rewrite: ColumnIdRewrite | None, result: PartitionResult
    ) -> None:
        task = self.task
        placement = GroupPlacement(task)
        # group -> (nth record of the stream, the record as stored, its partition): placed at a record an earlier run
        # produced
        earlier: dict[str, tuple[int, Record, int]] = {}
        this_run: dict[str, int] = {}  # group -> delivery index of its record in this run
        selected = 0
        first_index = -1
        transaction_ends = 0.0
        last_position = -1
        pace = Pace(task.throttle) if task.throttle.limited else None
        paced_bytes = 0
        checked = 0  # records produced when the delivery reports were last looked at
        for chunk in chunks:
            if chunk is None:  # the shared read is slow to give more (fanout): no transaction outlives its time
                if self.in_transaction and time.monotonic() >= transaction_ends:
                    self._commit(last_position + 1, first_index)
                continue
            n = len(chunk)
            start = int(np.searchsorted(chunk.positions, self.resume_from, side="left"))  # the rest is new here
            for group, at in placement.place(chunk).items():
                if at < start:
                    earlier[group] = (selected + at, chunk.record(at), int(chunk.partitions[at]))
                else:
                    this_run[group] = result.produced + at - start
                    self.wanted.add(this_run[group])
            selected += n
            result.skipped += start
            columns = chunk.columns
            stamps = columns.column("timestamp").to_numpy()
            key_lengths = _lengths(columns.column("key"))
            sizes = np.maximum(key_lengths, 0) + np.maximum(_lengths(columns.column("value")), 0)
            headers = _header_sizes(columns) if task.throttle.bytes_per_second else None
            while start < n:
                if self.in_transaction == 0:
                    self.producer.columns.begin_transaction()
                    transaction_ends = time.monotonic() + markers.TRANSACTION_SECONDS
                    self.sent.anew(result.produced)
                    if self.first is None:
                        first_index = result.produced
                        self.wanted.add(first_index)
                stop = min(n, start + markers.TRANSACTION_RECORDS - self.in_transaction, start + CHUNK_RECORDS)
                if pace is not None:
                    stop = start + _paced_rows(task.throttle, sizes[start:stop], headers, start)
                # Kafka's "no timestamp" is -1, which librdkafka sends as it is; 0 it replaces with "now".
                zeros = np.flatnonzero(stamps[start:stop] == 0) if not task.restamp_zero else np.zeros(0, np.int64)
                # A record's ids are rewritten before its timestamp is looked at, as by the reference.
                checked_to = start + int(zeros[0]) + 1 if len(zeros) else stop
                count = stop - start
                produced = columns.slice(start, checked_to - start)
                if rewrite is not None:
                    produced = rewrite.apply(produced, topic=task.source_topic,
                                             partitions=chunk.partitions[start:checked_to],
                                             offsets=chunk.offsets[start:checked_to])  # fmt: skip
                if len(zeros):
                    at = checked_to - 1
                    raise zero_stamped(task, int(chunk.partitions[at]), int(chunk.offsets[at]))
                self.sent.add(chunk.partitions[start:stop], chunk.offsets[start:stop], stamps[start:stop],
                              key_lengths[start:stop] < 0, sizes[start:stop])  # fmt: skip
                self.producer.columns.produce(task.target_topic, task.target_partition, produced, result.produced)
                result.produced += count
                result.produced_bytes += int(sizes[start:stop].sum())
                self.in_transaction += count
                last_position = int(chunk.positions[stop - 1])
                if result.produced >= checked + CHUNK_RECORDS:  # as often as the reference looks
                    checked = result.produced
                    self.producer.columns.poll(0)
                    if self.producer.columns.deliveries(self.sent.first).failures:
                        self._flush()  # raises
                if pace is not None:
                    paced_bytes += int(sizes[start:stop].sum())
                    paced_bytes += int(headers[start:stop].sum()) if headers is not None else 0
                    pace.wait(result.produced, paced_bytes, until=transaction_ends)
                start = stop
                if self.in_transaction >= markers.TRANSACTION_RECORDS or time.monotonic() >= transaction_ends:
                    self._commit(last_position + 1, first_index)
        if self.in_transaction:
            self._commit(last_position + 1, first_index)
        result.selected = selected
        result.read_again = placement.read_again
        offsets_by_group = {group: self.found[at] for group, at in this_run.items()}
        for group, (nth, expected, partition) in earlier.items():
            try:
                offsets_by_group[group] = earlier_offset(self.task, self.marker, nth,
                                                         task.rewritten(expected, partition),
                                                         from_end=result.skipped - nth)  # fmt: skip
            except TargetChangedError as exc:
                if not task.leave_unplaceable_groups:
                    raise
                result.unplaced[group] = str(exc)
        for group in task.groups:
            if group not in placement.placed:
                offsets_by_group[group] = self.next  # after the last restored record
        result.group_offsets = offsets_by_group
        result.end_offset = self.next

    def failure(self) -> str | None:
        """The failed delivery that explains the open transaction's failure best, named by its record."""
        columns = self.producer.columns
        reports = columns.deliveries(self.sent.first)
        best: tuple[int, str] | None = None
        for index, code in reports.failures:
            row = self.sent.row(index)
            partition, offset, stamp, key_missing, size = row if row is not None else (-1, -1, None, False, 0)
            rank = failure_rank(code, stamp=stamp, key_missing=key_missing, size=size)
            if best is not None and rank <= best[0]:
                continue
            reason = columns.error_text(code)
            if row is not None:
                reason = record_failure(
                    code, reason, topic=self.task.source_topic, partition=partition, offset=offset,
                    stamp=int(stamp or 0), key_missing=key_missing, size=size,
                )  # fmt: skip
            best = (rank, reason)
        return best[1] if best is not None else None

    def _flush(self) -> None:
        columns = self.producer.columns
        remaining = columns.flush(300)
        reports = columns.deliveries(self.sent.first)
        if reports.fatal is not None and reports.fatal[0] in FENCED_CODES:
            raise FencedError(reports.fatal[1])
        if reports.failures:
            fenced = [code for _, code in reports.failures if code in FENCED_CODES]
            if fenced:
                raise FencedError(columns.error_text(fenced[0]))
            raise DeliveryError(
                f"topic {self.task.target_topic!r} partition {self.task.target_partition}: {self.failure()}"
            )
        if remaining:
            raise DeliveryError(
                f"topic {self.task.target_topic!r} partition {self.task.target_partition}: "
                f"{remaining} records not acknowledged within 300 s"
            )

    def _commit(self, resume_from: int, first_index: int) -> None:
        """Commit the open transaction with the marker saying everything below ``resume_from`` is in the target."""
        self._flush()
        columns = self.producer.columns
        reports = columns.deliveries(self.sent.first)
        for index in [i for i in self.wanted if self.sent.first <= i < self.sent.end]:
            self.found[index] = reports.offset_of(index)
            self.wanted.discard(index)
        if self.first is None:
            self.first = self.found[first_index]
        marker = ProgressMarker(self.task.identity, resume_from, self.first, reports.last_offset + 1)
        self.producer.call(
            calls.SEND_OFFSETS_SECONDS,
            columns.send_offsets_to_transaction,
            self.task.target_topic,
            self.task.target_partition,
            resume_from,
            marker.metadata(),
            PROGRESS_GROUP,
            calls.SEND_OFFSETS_SECONDS,
        )
        self.producer.call(calls.COMMIT_SECONDS, columns.commit_transaction, calls.COMMIT_SECONDS)
        self.in_transaction = 0
        self.resume_from, self.next = resume_from, marker.next


def _lengths(column: pa.Array) -> Int64s:
    """Lengths of a binary column's values (-1: null)."""
    return np.asarray(pc.binary_length(column).fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int64)


def _header_sizes(columns: pa.RecordBatch) -> Int64s:
    """Bytes of each record's headers (names and values), as a rate limit counts them."""
    headers = columns.column("headers")
    pairs = headers.flatten()
    each = _lengths(pairs.field("key")) + np.maximum(_lengths(pairs.field("value")), 0)
    owners = pc.list_parent_indices(headers).to_numpy(zero_copy_only=False)
    return np.bincount(owners, weights=each, minlength=len(headers)).astype(np.int64)


def _paced_rows(throttle: Throttle, sizes: Int64s, headers: Int64s | None, start: int) -> int:
    """How many of the next records make at most a tenth of a second at the limit (one at least)."""
    limit = len(sizes)
    if throttle.records_per_second:
        limit = min(limit, max(1, int(throttle.records_per_second / 10)))
    if throttle.bytes_per_second:
        weights = sizes[:limit]
        if headers is not None:
            weights = weights + headers[start : start + limit]
        fitting = int(np.searchsorted(np.cumsum(weights), throttle.bytes_per_second / 10, side="right"))
        limit = min(limit, max(1, fitting))
    return limit
