"""A restore task's reference producer: confluent-kafka, one ``produce()`` call and one delivery report per record.

Used where the native edge cannot be (it is not built, or ``KBACKUP_KAFKA_EDGE=reference``); the native path
(:mod:`spark_kafka_backup.restore.columnar_run`) is tested against it. What a task guarantees is in
:mod:`spark_kafka_backup.restore.task`.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

from spark_kafka_backup.errors import DeliveryError
from spark_kafka_backup.format.record import Record
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
    with_last,
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
from spark_kafka_backup.restore.throttle import Pace

#: librdkafka logs a fenced producer as FATAL on stderr; the task reports it itself.
_client_log = logging.getLogger("spark_kafka_backup.restore.producer")
_client_log.addHandler(logging.NullHandler())
_client_log.propagate = False


def restore_reference(
    task: PartitionTask, readers: dict[int, PartitionReader], result: PartitionResult
) -> PartitionResult:
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

    def start_producer() -> None:
        try:
            within(calls.INIT_SECONDS, producer.init_transactions, calls.INIT_SECONDS)
        except KafkaException as exc:
            raise DeliveryError(f"{where}: cannot start a transactional producer: {exc.args[0].str()}") from exc

    try:
        run = _Run(task, producer, consumer, deliveries, fence(task, consumer, start_producer, result))
        run.produce_all(readers, result)
    except StuckProducerError:
        raise  # the producer is held by the call that hangs: nothing more is asked of it
    except FencedError as exc:
        result.fenced = f"{where}: {exc.reason}"
    except KafkaException as exc:
        error = exc.args[0] if exc.args else None
        if error is not None and error.code() == FATAL:
            try:
                producer.poll(0)  # the error callback names the fatal error
            except KafkaException as again:  # or the poll raises it
                error = again.args[0] if again.args else error
            error = deliveries.fatal or error
        if error is not None and error.code() in FENCED_CODES:
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
        if deliveries.fenced or (error is not None and error.code() in FENCED_CODES):
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


def _abort(producer: Any) -> None:
    """Abort an open transaction at once (best effort), not after the broker's timeout: its records vanish."""
    from confluent_kafka import KafkaException

    # None open, or the producer is unusable: then the broker aborts it after its timeout.
    with contextlib.suppress(KafkaException, StuckProducerError):
        within(calls.ABORT_SECONDS, producer.abort_transaction, calls.ABORT_SECONDS)


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
        self._rank = -1  # how well the failure kept explains what went wrong (see failure_rank)

    def on_error(self, error: Any) -> None:
        if error.fatal() and self.fatal is None:
            self.fatal = error

    def on_delivery(self, error: Any, message: Any) -> None:
        index = self.count
        self.count += 1
        if error is not None:
            key_missing = message.key() is None
            size = len(message.key() or b"") + len(message.value() or b"")
            rank = failure_rank(error.code(), stamp=self._timestamp(index), key_missing=key_missing, size=size)
            if rank > self._rank:
                self._rank = rank
                self.failure = self._describe(index, error, message)
                self.fenced = error.code() in FENCED_CODES
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
        at = index - self.sent_from
        if not 0 <= at < len(self.sent):
            return str(error.str())
        partition, offset, stamp = self.sent[at]
        return record_failure(
            error.code(), str(error.str()), topic=self.source_topic, partition=partition, offset=offset, stamp=stamp,
            key_missing=message.key() is None, size=len(message.key() or b"") + len(message.value() or b""),
        )  # fmt: skip


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
        for (position, source, record), is_last in with_last(task.stream(readers)):
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
                transaction_ends = time.monotonic() + markers.TRANSACTION_SECONDS
                if self.first is None:
                    self.deliveries.wanted.add(result.produced)
                    first_index = result.produced
            if rewrite is not None:
                record = rewrite(record, source)
            # Kafka's "no timestamp" is -1, which librdkafka sends as it is; 0 it replaces with "now".
            timestamp = -1 if record.timestamp is None else record.timestamp
            if timestamp == 0 and not task.restamp_zero:
                raise zero_stamped(task, source, record.offset)
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
            if is_last or self.in_transaction >= markers.TRANSACTION_RECORDS or time.monotonic() >= transaction_ends:
                if self.first is None:
                    self._flush()
                    self.first = self.deliveries.found[first_index]
                self._commit(position + 1)
        result.selected = index
        offsets = {group: self.deliveries.found[at] for group, at in this_run.items()}
        for group, (nth, expected, source) in earlier.items():
            offsets[group] = earlier_offset(self.task, self.marker, nth, task.rewritten(expected, source))
        for group in task.groups:
            if group not in placed:
                offsets[group] = self.next  # after the last restored record
        result.group_offsets = offsets
        result.end_offset = self.next

    def _flush(self) -> None:
        remaining = self.producer.flush(300)
        if self.deliveries.fenced:
            raise FencedError(str(self.deliveries.failure))
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
        within(
            calls.SEND_OFFSETS_SECONDS,
            self.producer.send_offsets_to_transaction,
            [position],
            metadata,
            calls.SEND_OFFSETS_SECONDS,
        )
        within(calls.COMMIT_SECONDS, self.producer.commit_transaction, calls.COMMIT_SECONDS)
        self.deliveries.sent_anew()
        self.in_transaction = 0
        self.resume_from, self.next = resume_from, marker.next
