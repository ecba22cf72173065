"""The reference producer: confluent-kafka behind the native producer's face, one ``produce()`` call and one delivery
report per record.

The restore's transaction protocol is written once (:mod:`spark_kafka_backup.restore.transaction_run`) against
:class:`~spark_kafka_backup.restore.transaction_run.TransactionalProducer`; the native edge
(:class:`~spark_kafka_backup.kafka.columnar_producer.ColumnarProducer`) is one implementation and this adapter the
other, used where the native edge cannot be (it is not built, or ``KBACKUP_KAFKA_EDGE=reference``). Both raise
:class:`~spark_kafka_backup.kafka.columnar_producer.ProducerError` for a refused call or record and report
deliveries as :class:`~spark_kafka_backup.kafka.columnar_producer.Deliveries`, by delivery index (reports come in
produce order: one partition, whose broker keeps the order).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np
import pyarrow as pa

from spark_kafka_backup.kafka.cluster import PROGRESS_GROUP
from spark_kafka_backup.kafka.columnar_producer import Deliveries, ProducerError
from spark_kafka_backup.restore.producer_calls import FENCED_CODES

#: librdkafka logs a fenced producer as FATAL on stderr; the task reports it itself.
_client_log = logging.getLogger("spark_kafka_backup.restore.producer")
_client_log.addHandler(logging.NullHandler())
_client_log.propagate = False

#: librdkafka's "the producer has a fatal error" (fencing, among others) and "unknown".
_FATAL = -150
_UNKNOWN = -1


class ReferenceProducer:
    """confluent-kafka's transactional producer with the calls and reports of the native one. ``group_metadata``:
    the progress group's metadata for :meth:`send_offsets_to_transaction` (the task's marker consumer lends it)."""

    def __init__(self, settings: Mapping[str, str], group_metadata: Callable[[], Any]) -> None:
        from confluent_kafka import Producer

        self._group_metadata = group_metadata
        self._reported = 0  # delivery reports served so far: the next report's delivery index
        self._produced = 0  # records queued so far: the next record's delivery index
        self._last_offset = -1
        self._base = 0
        self._offsets: list[int] = []  # offsets of delivery indexes base.. (-1: failed or not yet)
        self._failures: list[tuple[int, int]] = []
        self._fatal: tuple[int, str] | None = None
        self._producer = Producer(
            {**settings, "on_delivery": self._on_delivery, "error_cb": self._on_error, "logger": _client_log}
        )

    # -- reports ----------------------------------------------------------------------------------------------

    def _on_error(self, error: Any) -> None:
        if error.fatal() and self._fatal is None:
            self._fatal = (int(error.code()), str(error.str()))

    def _on_delivery(self, error: Any, message: Any) -> None:
        index = self._reported
        self._reported += 1
        offset = -1
        if error is not None:
            self._failures.append((index, int(error.code())))
        else:
            offset = self._last_offset = int(message.offset())
        if index >= self._base:
            self._offsets.extend([-1] * (index - self._base - len(self._offsets) + 1))
            self._offsets[index - self._base] = offset

    def deliveries(self, forget_below: int = 0) -> Deliveries:
        """The reports so far; offsets of delivery indexes below ``forget_below`` are forgotten first."""
        if forget_below > self._base:
            del self._offsets[: forget_below - self._base]
            self._base = forget_below
        return Deliveries(
            self._reported, self._last_offset, self._base, np.array(self._offsets, dtype=np.int64),
            list(self._failures), self._fatal,
        )  # fmt: skip

    def error_text(self, code: int) -> str:
        from confluent_kafka import KafkaError

        return str(KafkaError(code).str())

    # -- records ----------------------------------------------------------------------------------------------

    def produce(self, topic: str, partition: int, batch: pa.RecordBatch, first_index: int) -> None:
        """Queue every row of ``batch`` (the native producer's columns), the first as delivery index
        ``first_index``; a record the client refuses raises :class:`ProducerError` (the rows before it queued)."""
        if first_index != self._produced:
            raise ValueError(f"delivery index {first_index} given, {self._produced} expected")
        keys = batch.column("key").to_pylist()
        values = batch.column("value").to_pylist()
        stamps = batch.column("timestamp").to_pylist()
        names = batch.schema.names
        headers = batch.column("headers").to_pylist() if "headers" in names else [None] * len(keys)
        produce = self._producer.produce
        for row, (key, value, stamp, pairs) in enumerate(zip(keys, values, stamps, headers, strict=True)):
            listed = [(pair["key"], pair["value"]) for pair in pairs] if pairs else None
            with self._refusals(produced=row):
                while True:
                    try:
                        produce(topic, value, key, partition, timestamp=stamp, headers=listed)
                        break
                    except BufferError:  # librdkafka's queue is full: serve reports, then queue it
                        self._producer.poll(0.1)
            self._produced += 1

    def poll(self, timeout: float = 0) -> int:
        with self._refusals():
            return int(self._producer.poll(timeout))

    def flush(self, timeout: float) -> int:
        """Wait for every queued record's report; how many are still without one."""
        with self._refusals():
            return int(self._producer.flush(timeout))

    # -- transactions -----------------------------------------------------------------------------------------

    def init_transactions(self, timeout: float) -> None:
        with self._refusals():
            self._producer.init_transactions(timeout)

    def begin_transaction(self) -> None:
        with self._refusals():
            self._producer.begin_transaction()

    def commit_transaction(self, timeout: float) -> None:
        with self._refusals():
            self._producer.commit_transaction(timeout)

    def abort_transaction(self, timeout: float) -> None:
        with self._refusals():
            self._producer.abort_transaction(timeout)

    def send_offsets_to_transaction(
        self, topic: str, partition: int, offset: int, metadata: str, group: str, timeout: float
    ) -> None:
        """Commit ``offset`` (with ``metadata``) for the progress group with the open transaction."""
        from confluent_kafka import TopicPartition

        if group != PROGRESS_GROUP:
            raise ValueError(f"the reference producer commits offsets of {PROGRESS_GROUP}, not {group}")
        position = TopicPartition(topic, partition, offset, metadata=metadata)
        with self._refusals():
            self._producer.send_offsets_to_transaction([position], self._group_metadata(), timeout)

    def close(self) -> None:
        """Nothing to release by hand: confluent-kafka destroys the client with its last reference."""

    @contextmanager
    def _refusals(self, *, produced: int = 0) -> Iterator[None]:
        """confluent-kafka's errors as :class:`ProducerError`, with librdkafka's flags."""
        from confluent_kafka import KafkaException

        try:
            yield
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if error is None or not hasattr(error, "code"):
                raise ProducerError(_UNKNOWN, str(exc), produced=produced) from exc
            if error.code() == _FATAL:
                self._fatal_from_poll()  # the fatal error itself is what the task reports
            raise ProducerError(
                int(error.code()), str(error.str()), fatal=bool(error.fatal()), retriable=bool(error.retriable()),
                requires_abort=bool(error.txn_requires_abort()), produced=produced,
            ) from exc  # fmt: skip
        except SystemError as exc:
            # confluent-kafka raises this when a delivery report is served while one of its calls fails (seen once
            # when a newer restore fenced this one mid-transaction): the producer's own state says why.
            fatal = self._fatal or self._fatal_from_poll()
            if fatal is not None:
                raise ProducerError(*fatal, fatal=True, produced=produced) from exc
            # Or a delivery failed fenced (a newer restore took the partition) before any error was fatal.
            fenced = next((code for _, code in self._failures if code in FENCED_CODES), None)
            if fenced is not None:
                raise ProducerError(fenced, self.error_text(fenced), produced=produced) from exc
            raise ProducerError(_UNKNOWN, str(exc), produced=produced) from exc

    def _fatal_from_poll(self) -> tuple[int, str] | None:
        from confluent_kafka import KafkaException

        try:
            self._producer.poll(0)  # the error callback names the fatal error
        except KafkaException as again:  # or the poll raises it
            error = again.args[0] if again.args else None
            if error is not None and hasattr(error, "code") and self._fatal is None:
                self._fatal = (int(error.code()), str(error.str()))
        except SystemError:
            pass
        return self._fatal
