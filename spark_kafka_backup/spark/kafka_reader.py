"""Reading Kafka for the ``kbackup_kafka`` source on an executor: what a task is given and how it reads.

Only :class:`KafkaTask` (picklable) crosses from the driver; :func:`~spark_kafka_backup.spark.kafka_task.read_task`
builds its own consumer and reads with :func:`read_range` or :func:`read_together` here (confluent-kafka), or the
native edge (:mod:`spark_kafka_backup.spark.columnar_reader`). See :mod:`spark_kafka_backup.spark.kafka_source` for the
options and how work is planned and packed into tasks.

Offsets the source deletes under a task (retention, ``kafka-delete-records``)
are an event here, never a silent jump: the consumer runs with
``auto.offset.reset=error``, and a position the broker no longer has ends
the task (``failOnDataLoss=true``) or is recorded as lost at the source and
read on from the new log start (:func:`_deleted_under`).
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from spark_kafka_backup.catalog.source_gaps import DROPPED, READ, record_gap
from spark_kafka_backup.errors import ClusterError, SparkKafkaBackupError
from spark_kafka_backup.kafka.client_settings import redact
from spark_kafka_backup.kafka.cluster import TopicIdAsker, is_transient
from spark_kafka_backup.storage import parse_location
from spark_kafka_backup.text import count

log = logging.getLogger("spark_kafka_backup.source")

HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))
BASE_FIELDS = [
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
]


def kafka_schema(include_headers: bool) -> StructType:
    """Spark's Kafka source schema (with ``headers`` when asked)."""
    fields = list(BASE_FIELDS)
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


# confluent-kafka's timestamp types (0 none, 1 CreateTime, 2 LogAppendTime) -> Kafka's ids, as Spark reports them.
_TIMESTAMP_KINDS = np.array([-1, 0, 1], dtype=np.int32)


@dataclass(frozen=True)
class KafkaRange(InputPartition):
    """One Kafka partition's offsets ``[start, end)`` to read: all a task needs."""

    topic: str
    partition: int
    start: int
    end: int
    client: dict[str, str]
    include_headers: bool
    read_timeout: float
    #: What a task does when the source deleted offsets of the range before it read them (see the options).
    fail_on_data_loss: bool = False
    gaps_root: str | None = None
    #: The topic id the range's offsets belong to (one incarnation of the topic); ``None``: not checked.
    topic_id: str | None = None


#: A partition with at least this many offsets to read is a task of its own; smaller ones are packed up to it.
PACK_RECORDS = 200_000
#: At most this many partitions in one task.
PACK_RANGES = 500

#: A task that has had no data for this long says so (again after as long), until ``read_timeout`` fails it.
STALL_WARNING_SECONDS = 30.0


class Stall:
    """The warning of a task whose fetches bring nothing: the cluster stopped answering (its planned offsets exist,
    so no data means no answer). The planner cannot say it: Spark does not plan while a batch is being read."""

    def __init__(self) -> None:
        self.last_progress = time.monotonic()
        self._warned = self.last_progress

    def progressed(self) -> None:
        self.last_progress = self._warned = time.monotonic()

    def waited(self, what: str, read_timeout: float) -> float:
        """Seconds without data; a warning every :data:`STALL_WARNING_SECONDS` of them, naming ``what``."""
        now = time.monotonic()
        waited = now - self.last_progress
        if now - self._warned >= STALL_WARNING_SECONDS and waited < read_timeout:
            self._warned = now
            log.warning(
                "source cluster not answering for %.0f s: no data for %s; the task waits up to %.0f s in all",
                waited, what, read_timeout,
            )  # fmt: skip
        return waited


@dataclass(frozen=True)
class KafkaTask(InputPartition):
    """The ranges one task reads with one consumer (see "Tasks" in the module docstring)."""

    ranges: tuple[KafkaRange, ...]


def pack_ranges(ranges: list[KafkaRange], min_tasks: int = 1) -> list[KafkaTask]:
    """Group ranges into tasks: large ranges alone, small ones packed (see "Tasks" in the module docstring)."""
    large = [r for r in ranges if r.end - r.start >= PACK_RECORDS]
    small = sorted((r for r in ranges if r.end - r.start < PACK_RECORDS), key=lambda r: r.start - r.end)
    tasks = [KafkaTask((r,)) for r in large]
    if small:
        total = sum(r.end - r.start for r in small)
        count = max(min_tasks - len(large), -(-total // PACK_RECORDS), -(-len(small) // PACK_RANGES), 1)
        bins: list[list[KafkaRange]] = [[] for _ in range(min(count, len(small)))]
        loads = [0] * len(bins)
        # Largest first, each to the least loaded task (the top of a heap of (load, ranges, task)) when it has
        # room; else to the least loaded task that has, else to a new one (rare: ranges come largest first).
        heap = [(0, 0, b) for b in range(len(bins))]
        for r in small:
            size = r.end - r.start
            load, members, target = heap[0]
            fits = members < PACK_RANGES and load + size <= PACK_RECORDS
            if not fits:
                room = [b for b in range(len(bins)) if len(bins[b]) < PACK_RANGES and loads[b] + size <= PACK_RECORDS]
                if room:
                    target = min(room, key=lambda b: (loads[b], len(bins[b])))
                else:
                    bins.append([])
                    loads.append(0)
                    target = len(bins) - 1
            loads[target] += size
            bins[target].append(r)
            if fits:
                heapq.heapreplace(heap, (loads[target], len(bins[target]), target))
            else:
                heap = [(loads[b], len(bins[b]), b) for b in range(len(bins))]
                heapq.heapify(heap)
        tasks += [KafkaTask(tuple(sorted(group, key=lambda r: (r.topic, r.partition)))) for group in bins if group]
    return tasks


class Incarnations:
    """Confirms, after records are fetched and before they are handed on, that each topic still has the id its ranges
    were planned with.

    A topic deleted and created again starts at offset 0 again: a consumer reading on at its position would hand on
    the new incarnation's records as if they followed the old one's. Fetched before a check that still finds the
    planned id, records are the planned incarnation's (an id never comes back). A topic whose id changed (or that is
    gone: which incarnation was fetched cannot be told) is refused: its records are dropped, one error line says
    why, and the planner refuses it from the next trigger on.
    """

    def __init__(self, ranges: tuple[KafkaRange, ...]) -> None:
        self._planned = {r.topic: r.topic_id for r in ranges if r.topic_id is not None}
        # As long as fetching may wait for a cluster that stopped answering.
        self._asker = TopicIdAsker(ranges[0].client if ranges else {}, patience=ranges[0].read_timeout if ranges else 0)
        self._gaps_root = ranges[0].gaps_root if ranges else None
        self._gone: set[str] = set()  # refused because deleted: what was dropped of them is lost at the source
        self.refused: set[str] = set()

    def confirm(self) -> set[str]:
        """Ask the cluster now; the topics refused so far."""
        checked = sorted(set(self._planned) - self.refused)
        if not checked:
            return self.refused
        found = self._asker.ask(checked)
        for topic in checked:
            if found.get(topic) != self._planned[topic]:
                self.refused.add(topic)
                now = found.get(topic)
                if now is None:
                    self._gone.add(topic)
                log.error(
                    "topic %r changed while it was read: it was planned as topic id %s and %s; its records read "
                    "since the last check are dropped and it is no longer backed up here",
                    topic, self._planned[topic], f"now has {now}" if now else "no longer exists",
                )  # fmt: skip
        return self.refused

    def confirmed(self, batches: list[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """The batches whose topic still has its planned id (one check for all of them)."""
        if not batches:
            return
        refused = self.confirm() if self._planned else set()
        for batch in batches:
            topic = batch.column("topic")[0].as_py()
            if topic not in refused:
                yield batch
            elif topic in self._gone and self._gaps_root is not None:
                # Deleted while read: the source no longer has what was dropped, and the backup does not either.
                offsets = batch.column("offset")
                first, last = offsets[0].as_py(), offsets[len(offsets) - 1].as_py()
                record_gap(parse_location(self._gaps_root), topic, batch.column("partition")[0].as_py(), first, last,
                           how=DROPPED)  # fmt: skip


def read_together(
    ranges: tuple[KafkaRange, ...], consumer: Any, *, batch_rows: int, incarnations: Incarnations
) -> Iterator[pa.RecordBatch]:
    from confluent_kafka import KafkaError, TopicPartition

    schema = to_arrow_schema(kafka_schema(ranges[0].include_headers), timezone="UTC")
    pending = {(r.topic, r.partition): _Columns(r, schema) for r in ranges}
    consumer.incremental_assign([TopicPartition(r.topic, r.partition, r.start) for r in ranges])
    stall = Stall()
    while pending:
        messages = consumer.consume(num_messages=5000, timeout=1.0)
        if not messages:
            no_data(stall, pending[min(pending)].task, len(pending))
            continue
        stall.progressed()
        keys = [(message.topic(), message.partition()) for message in messages]
        cuts = [0, *(i for i in range(1, len(keys)) if keys[i] != keys[i - 1]), len(keys)]
        ready: list[pa.RecordBatch] = []  # handed on after one check of the topics' ids (see Incarnations)
        for start, stop in itertools.pairwise(cuts):
            columns = pending.get(keys[start])
            if columns is None:
                error = messages[start].error()
                if error is not None and error.code() != KafkaError._PARTITION_EOF and not is_transient(error):
                    raise ClusterError(f"reading {count(len(pending), 'partition')}: {error.str()}")
                continue  # a partition already complete: what was fetched past its range is not ours
            try:
                done = columns.add_all(messages[start:stop], columns.task.end, KafkaError._PARTITION_EOF)
            except _OffsetResetError as reset:
                resume = _deleted_under(consumer, columns.task, reset.position)
                done = resume >= columns.task.end
                item = columns.task
                consumer.incremental_unassign([TopicPartition(item.topic, item.partition)])
                if not done:
                    consumer.incremental_assign([TopicPartition(item.topic, item.partition, resume)])
                    continue
                if columns.rows:
                    ready.append(columns.batch())
                del pending[keys[start]]
                continue
            if columns.rows and (done or columns.rows >= batch_rows):
                ready.append(columns.batch())
            if done:
                del pending[keys[start]]
                item = columns.task
                consumer.incremental_unassign([TopicPartition(item.topic, item.partition)])
        yield from incarnations.confirmed(ready)
        stall.progressed()  # the time the batches' taker spent (writing them, waiting for a lock) is not a stall
        for key in [key for key in pending if key[0] in incarnations.refused]:
            del pending[key]
            consumer.incremental_unassign([TopicPartition(*key)])


def no_data(stall: Stall, item: KafkaRange, unread: int = 0) -> None:
    """A fetch brought nothing: fail once the range ``item`` (a packed task's first unread one, of ``unread``) has had
    no data for its ``read_timeout``."""
    where = f"topic {item.topic!r} partition {item.partition}"
    if stall.waited(where + (f" ({count(unread, 'partition')} unread)" if unread else ""), item.read_timeout) > (
        item.read_timeout
    ):
        raise ClusterError(
            f"{where}: no data for {item.read_timeout:.0f} s while reading offsets {item.start}..{item.end - 1} from "
            f"{redact(item.client).get('bootstrap.servers')}"
            + (f" ({count(unread, 'partition')} of this task unread)" if unread else "")
        )


def read_range(
    task: KafkaRange, consumer: Any, *, batch_rows: int = 10_000, incarnations: Incarnations | None = None
) -> Iterator[pa.RecordBatch]:
    """Read offsets ``[start, end)`` of one partition as Arrow batches, with ``consumer`` assigned to it alone."""
    check = incarnations if incarnations is not None else Incarnations((task,))
    from confluent_kafka import KafkaError, TopicPartition

    schema = to_arrow_schema(kafka_schema(task.include_headers), timezone="UTC")
    columns = _Columns(task, schema)
    consumer.assign([TopicPartition(task.topic, task.partition, task.start)])
    stall = Stall()
    done = False
    while not done:
        messages = consumer.consume(num_messages=5000, timeout=1.0)
        if not messages:
            no_data(stall, task)
            continue
        stall.progressed()
        try:
            done = columns.add_all(messages, task.end, KafkaError._PARTITION_EOF)
        except _OffsetResetError as reset:
            resume = _deleted_under(consumer, task, reset.position)
            done = resume >= task.end
            if not done:
                consumer.assign([TopicPartition(task.topic, task.partition, resume)])
        if columns.rows >= batch_rows:
            yield from check.confirmed([columns.batch()])
            stall.progressed()  # the time the batch's taker spent (writing it, waiting for a lock) is not a stall
            if task.topic in check.refused:
                return
    if columns.rows:
        yield from check.confirmed([columns.batch()])


#: librdkafka's event for a fetch position the broker no longer has (``auto.offset.reset=error``).
AUTO_OFFSET_RESET = -140


class _OffsetResetError(Exception):
    """The broker does not have ``position`` of the partition being read (internal to the reading loops)."""

    def __init__(self, position: int) -> None:
        super().__init__(position)
        self.position = position


def _deleted_under(consumer: Any, task: KafkaRange, position: int) -> int:
    """:func:`deleted_under` with a confluent-kafka consumer."""
    from confluent_kafka import TopicPartition

    return deleted_under(
        lambda: consumer.get_watermark_offsets(TopicPartition(task.topic, task.partition), timeout=30), task, position
    )


def deleted_under(watermarks: Callable[[], tuple[int, int]], task: KafkaRange, position: int) -> int:
    """The partition's offsets from ``position`` on are gone at the source: record that, and return where the
    range goes on (its log start now). The source's earliest offset must have moved past ``position``; an offset
    out of range above the log's end is a truncated or re-created partition, which ends the task.
    ``watermarks``: the partition's log start and end now (a client error if they cannot be read)."""
    from confluent_kafka import KafkaException

    where = f"topic {task.topic!r} partition {task.partition}"
    if position >= task.end:
        return position  # past the range: not its gap (the range holding those offsets records it)
    try:
        low, high = watermarks()
    except (KafkaException, RuntimeError) as exc:
        raise ClusterError(f"{where}: offset {position} is gone and the log start cannot be read: {exc}") from exc
    if low <= position:
        raise ClusterError(
            f"{where}: offset {position} is out of range on {redact(task.client).get('bootstrap.servers')}, whose log "
            f"holds offsets {low}..{high - 1}: the partition was truncated (an unclean leader election) or the topic "
            "deleted and created again"
        )
    last = min(low, task.end) - 1
    message = (
        f"{where}: offsets {position}..{last} were deleted at the source (retention or deleted records) before the "
        "backup read them"
    )
    if task.fail_on_data_loss:
        raise SparkKafkaBackupError(message + " (set failOnDataLoss=false to go on)")
    if task.gaps_root is not None:
        record_gap(parse_location(task.gaps_root), task.topic, task.partition, position, last, how=READ)
        log.info("%s: recorded as lost at the source", message)
    else:
        log.warning("%s", message)
    return int(low)


class _Columns:
    """Column lists for one Arrow batch of Kafka messages.

    Each field is pulled from a whole ``consume`` result by one list
    comprehension and converted by Arrow in C++ (headers included), rather
    than handled message by message in a Python loop.
    """

    def __init__(self, task: KafkaRange, schema: pa.Schema) -> None:
        self.task = task
        self.schema = schema
        self._headers_type = schema.field("headers").type if task.include_headers else None
        self._reset()

    def _reset(self) -> None:
        self.rows = 0
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.timestamps: list[tuple[int, int]] = []
        self.headers: list[list[tuple[str, bytes | None]] | None] = []

    def add_all(self, messages: list[Any], end: int, eof_code: int) -> bool:
        """Add the messages below ``end``; return whether the range is complete.

        The range is complete at offset ``end - 1``, at the first offset
        ``>= end``, or at a partition-EOF event at or past ``end`` (committed
        data ends there; the last offsets were transaction markers).
        """
        if not messages:
            return False
        if any([message.error() is not None for message in messages]):
            return self._add_with_events(messages, end, eof_code)
        mine = (self.task.topic, self.task.partition)
        if (messages[0].topic(), messages[0].partition()) != mine or (
            messages[-1].topic(),
            messages[-1].partition(),
        ) != mine:
            # Left from the range this consumer read before (a new assignment drops them; never trust it).
            messages = [m for m in messages if (m.topic(), m.partition()) == mine]
            if not messages:
                return False
        offsets = [message.offset() for message in messages]
        cut = bisect.bisect_left(offsets, end)  # one partition's messages come in offset order
        complete = cut < len(offsets) or (cut > 0 and offsets[cut - 1] >= end - 1)
        if cut < len(messages):
            messages, offsets = messages[:cut], offsets[:cut]
        self.offsets += offsets
        self.keys += [message.key() for message in messages]
        self.values += [message.value() for message in messages]
        self.timestamps += [message.timestamp() for message in messages]
        if self._headers_type is not None:
            self.headers += [message.headers() for message in messages]
        self.rows += len(messages)
        return complete

    def _add_with_events(self, messages: list[Any], end: int, eof_code: int) -> bool:
        """:meth:`add_all` for a result holding events (partition EOF) or errors, message by message."""
        for at, message in enumerate(messages):
            error = message.error()
            if error is None:
                continue
            if is_transient(error):
                # A connection or leader event: the client recovers by itself; readTimeoutSeconds bounds the wait.
                log.info(
                    "topic %r partition %d: %s (the client retries)", self.task.topic, self.task.partition, error.str()
                )
                return self.add_all([*messages[:at], *messages[at + 1 :]], end, eof_code)
            if error.code() == AUTO_OFFSET_RESET:
                if self.add_all(messages[:at], end, eof_code) or message.offset() >= end:
                    # The range was read whole before the fetch ahead of it (librdkafka prefetches past the range)
                    # met offsets the broker no longer has: the range that holds them meets the gap.
                    return True
                raise _OffsetResetError(message.offset())
            if error.code() != eof_code:
                raise ClusterError(f"topic {self.task.topic!r} partition {self.task.partition}: {error.str()}")
            if self.add_all(messages[:at], end, eof_code):
                return True
            if message.offset() >= end:
                return True
            return self.add_all(messages[at + 1 :], end, eof_code)
        return self.add_all(messages, end, eof_code)

    def batch(self) -> pa.RecordBatch:
        n = self.rows
        times = np.array(self.timestamps, dtype=np.int64).reshape(n, 2)
        kinds = _TIMESTAMP_KINDS[np.clip(times[:, 0], 0, 2)]
        arrays = [
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            pa.array([self.task.topic] * n, pa.string()),
            pa.array(np.full(n, self.task.partition, dtype=np.int32)),
            pa.array(np.array(self.offsets, dtype=np.int64)),
            pa.array(times[:, 1] * 1000, pa.timestamp("us", tz="UTC")),
            pa.array(kinds),
        ]
        if self._headers_type is not None:
            arrays.append(pa.array(self.headers, self._headers_type))
        batch = pa.RecordBatch.from_arrays(arrays, schema=self.schema)
        self._reset()
        return batch
