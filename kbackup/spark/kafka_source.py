"""A Kafka source for Spark Structured Streaming on the Python Data Source API.

Spark's own Kafka source is a JVM package that cannot be installed everywhere;
this one reads Kafka with confluent-kafka and offers the same output schema and
the same option names, so the backup sink works behind either::

    spark.readStream.format("kbackup_kafka")
        .option("kafka.bootstrap.servers", "host:9092")
        .option("subscribe", "orders,payments")      # or subscribePattern
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
        .load()

Options (unknown ones are an error):

- ``kafka.<setting>``: passed to the Kafka client without the prefix
  (``kafka.bootstrap.servers`` is required). ``kafka.isolation.level``
  defaults to ``read_committed`` here (Kafka's default is read_uncommitted).
- ``subscribe`` / ``subscribePattern``: a comma-separated topic list or a
  regex that must match whole topic names. Topics and partitions that appear
  later are picked up at the next micro-batch, from their earliest offset.
- ``startingOffsets``: ``earliest`` (default), ``latest`` or JSON
  ``{"topic": {"0": 42, "1": -2}}`` (-2 earliest, -1 latest).
- ``maxOffsetsPerTrigger``: at most this many offsets per micro-batch, split
  across partitions in proportion to what each has available.
- ``includeHeaders``: add the ``headers`` column (default false, as in Spark).
- ``failOnDataLoss``: when offsets the query still needed were deleted by
  retention, fail (true, the default) or log a warning naming the topic,
  partition and lost range and go on (false).
- ``readTimeoutSeconds``: how long a task waits without progress before it
  fails naming its partition (default 120).
- ``snapshotUnreachableSeconds``: how long a snapshot (``Trigger.AvailableNow``)
  waits for a cluster that stopped answering before it fails (default 300).
  A continuous query's planning waits as long as it takes: a trigger that
  cannot reach the cluster plans no new data and says so in a warning (tasks
  already reading still fail after ``readTimeoutSeconds`` without data).
- ``minPartitions``: the number of tasks a micro-batch should have at least,
  when it reads that many Kafka partitions (default 1; the backup job passes
  Spark's default parallelism). See "Tasks" below.

Broker failures: a leader change or a node going down is handled by the
Kafka clients (metadata refresh, fetch from the new leader); connection and
leader events a task's consumer reports are not errors, and a task fails only
when it gets no data for ``readTimeoutSeconds``. On the driver side, a trigger
whose offset requests fail logs how long the cluster has not answered; see
``snapshotUnreachableSeconds`` for what happens next.

Where things run (see the PySpark notes): every method but ``read`` runs in
one long-lived driver-side process; ``read`` runs on executors with only the
picklable :class:`KafkaTask` it is given, and builds its own consumer.

Tasks: work is planned by records, not by partitions. A Kafka partition with
at least :data:`PACK_RECORDS` offsets to read is a task of its own; smaller
ones are packed together (at most :data:`PACK_RECORDS` offsets and
:data:`PACK_RANGES` partitions per task, but in at least ``minPartitions``
tasks when there are that many), and a task assigns all its partitions to one
consumer at once (one fetch brings records of many). Each Kafka partition is
read by one task, in offset order, and handed to the sink in batches of that
partition alone (batches of different partitions may alternate), so a task of
many small partitions costs one consumer and one Spark task instead of one
each per partition.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import json
import logging
import math
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
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

from kbackup.errors import ClusterError, KbackupError, UsageError
from kbackup.kafka.admin_session import AdminSession
from kbackup.kafka.client_settings import consumer_settings, redact
from kbackup.kafka.cluster import TopicPartitionKey, is_transient, list_offsets, partition_counts
from kbackup.kafka.outage import OutageReport
from kbackup.kafka.topics import TopicSelection
from kbackup.logsetup import ensure_console_logging

log = logging.getLogger("kbackup.source")

SOURCE_NAME = "kbackup_kafka"

#: How often a snapshot asks a cluster that stopped answering again.
UNREACHABLE_RETRY_SECONDS = 2.0
#: At most one "not answering" warning per this many seconds (Spark asks every trigger).
UNREACHABLE_LOG_SECONDS = 30.0
#: How long one planning step goes on asking (with a new admin client after a failure) before it plans nothing.
PLANNING_PATIENCE_SECONDS = 12.0

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


#: The version of the offset JSON this source writes into Spark checkpoints.
OFFSETS_VERSION = 1

_KNOWN_OPTIONS = {
    "logformat",
    "subscribe",
    "subscribepattern",
    "startingoffsets",
    "maxoffsetspertrigger",
    "includeheaders",
    "failondataloss",
    "snapshotunreachableseconds",
    "readtimeoutseconds",
    "minpartitions",
    "path",
}

# confluent-kafka's timestamp types (0 none, 1 CreateTime, 2 LogAppendTime) -> Kafka's ids, as Spark reports them.
_TIMESTAMP_KINDS = np.array([-1, 0, 1], dtype=np.int32)


def encode_offsets(offsets: Mapping[TopicPartitionKey, int]) -> dict[str, Any]:
    """Canonical offset JSON: sorted topics, partitions sorted by number, string keys.

    Spark compares offsets as JSON strings, so the same offsets must always
    give the same text.
    """
    topics: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        topics.setdefault(topic, {})[str(partition)] = offset
    return {"v": OFFSETS_VERSION, "topics": topics}


def decode_offsets(data: Mapping[str, Any]) -> dict[TopicPartitionKey, int]:
    version = data.get("v")
    if version != OFFSETS_VERSION:
        raise KbackupError(
            f"the checkpoint holds Kafka offsets of version {version!r}; this kbackup reads version {OFFSETS_VERSION}"
        )
    return {
        (topic, int(partition)): int(offset)
        for topic, partitions in data["topics"].items()
        for partition, offset in partitions.items()
    }


@dataclass(frozen=True)
class SourceOptions:
    """The source's options, parsed and checked."""

    client: dict[str, str]
    selection: TopicSelection
    starting: str | dict[TopicPartitionKey, int]
    max_offsets_per_trigger: int | None
    include_headers: bool
    fail_on_data_loss: bool
    read_timeout: float
    min_partitions: int = 1
    snapshot_unreachable: float = 300
    #: The job's ``--log-format`` for what the source logs on the driver (None: text).
    log_format: str | None = None

    @property
    def read_committed(self) -> bool:
        return self.client.get("isolation.level", "read_committed") == "read_committed"

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        client: dict[str, str] = {}
        other: dict[str, str] = {}
        for key, value in options.items():
            if key.lower().startswith("kafka."):
                client[key[len("kafka.") :]] = value
            elif key.lower() in _KNOWN_OPTIONS:
                other[key.lower()] = value
            else:
                raise UsageError(f"unknown option {key!r} for the {SOURCE_NAME} source")
        if "bootstrap.servers" not in client:
            raise UsageError("option kafka.bootstrap.servers is required")
        client.setdefault("isolation.level", "read_committed")
        if ("subscribe" in other) == ("subscribepattern" in other):
            raise UsageError("give exactly one of the options subscribe and subscribePattern")
        selection = (
            TopicSelection.from_list(other["subscribe"])
            if "subscribe" in other
            else TopicSelection(pattern=other["subscribepattern"])
        )
        return cls(
            client=client,
            selection=selection,
            starting=_parse_starting(other.get("startingoffsets", "earliest")),
            max_offsets_per_trigger=_positive_int(other, "maxoffsetspertrigger"),
            include_headers=_boolean(other, "includeheaders", False),
            fail_on_data_loss=_boolean(other, "failondataloss", True),
            read_timeout=float(_positive_int(other, "readtimeoutseconds") or 120),
            min_partitions=_positive_int(other, "minpartitions") or 1,
            snapshot_unreachable=float(_positive_int(other, "snapshotunreachableseconds") or 300),
            log_format=other.get("logformat"),
        )


def _parse_starting(text: str) -> str | dict[TopicPartitionKey, int]:
    if text in ("earliest", "latest"):
        return text
    try:
        parsed = json.loads(text)
        return {
            (topic, int(partition)): int(offset)
            for topic, partitions in parsed.items()
            for partition, offset in partitions.items()
        }
    except (ValueError, AttributeError, TypeError):
        raise UsageError(
            f'startingOffsets must be earliest, latest or JSON like {{"topic": {{"0": 42}}}}, not {text!r}'
        ) from None


def _positive_int(options: Mapping[str, str], key: str) -> int | None:
    if key not in options:
        return None
    try:
        value = int(options[key])
    except ValueError:
        value = 0
    if value <= 0:
        raise UsageError(f"option {key} must be a whole number > 0, not {options[key]!r}")
    return value


def _boolean(options: Mapping[str, str], key: str, default: bool) -> bool:
    if key not in options:
        return default
    value = options[key].strip().lower()
    if value not in ("true", "false"):
        raise UsageError(f"option {key} must be true or false, not {options[key]!r}")
    return value == "true"


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


#: A partition with at least this many offsets to read is a task of its own; smaller ones are packed up to it.
PACK_RECORDS = 200_000
#: At most this many partitions in one task.
PACK_RANGES = 500


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


class KafkaSource(DataSource):
    """``format("kbackup_kafka")``: see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        return kafka_schema(_boolean({k.lower(): v for k, v in self.options.items()}, "includeheaders", False))

    def streamReader(self, schema: StructType) -> KafkaStreamReader:
        return KafkaStreamReader(SourceOptions.parse(self.options))


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans micro-batches from Kafka offsets and reads them (see module docstring)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._session: AdminSession | None = None  # made on the driver at first use, never pickled
        self._latest: dict[TopicPartitionKey, int] = {}
        self._target: dict[TopicPartitionKey, int] | None = None
        self._outage = OutageReport(log, every=UNREACHABLE_LOG_SECONDS)
        self._leaderless_logged = -math.inf

    # -- driver side -------------------------------------------------------

    def _current(self, *, partial: bool = False) -> tuple[dict[TopicPartitionKey, int], dict[TopicPartitionKey, int]]:
        """Earliest and latest offsets of every selected partition now.

        A client that stops answering is replaced by a new one (see
        :mod:`kbackup.kafka.admin_session`) for up to
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
            return self._offsets_now(admin, timeout, partial=partial)

        return self._session.call(offsets_now, patience=PLANNING_PATIENCE_SECONDS)

    def _offsets_now(
        self, admin: Any, timeout: float, *, partial: bool
    ) -> tuple[dict[TopicPartitionKey, int], dict[TopicPartitionKey, int]]:
        counts = partition_counts(admin, timeout=timeout)
        if self.options.selection.topics is not None:
            missing = [t for t in self.options.selection.topics if t not in counts]
            if missing and not any(t in counts for t in self.options.selection.topics):
                raise KbackupError(
                    f"none of the topics {', '.join(self.options.selection.topics)} exists on "
                    f"{self.options.client['bootstrap.servers']}"
                )
        keys = [(t, p) for t in self.options.selection.select(counts) for p in range(counts[t])]
        earliest = list_offsets(admin, keys, latest=False, timeout=timeout, partial=partial)
        latest = list_offsets(
            admin, keys, latest=True, read_committed=self.options.read_committed, timeout=timeout, partial=partial
        )
        answered = earliest.keys() & latest.keys()
        if len(answered) < len(keys):
            self._report_leaderless(sorted(set(keys) - answered), len(keys))
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

    def initialOffset(self) -> dict[str, Any]:
        ensure_console_logging(log_format=self.options.log_format)
        earliest, latest = self._current()
        for (topic, partition), low in sorted(earliest.items()):
            if low > 0:
                log.warning(
                    "topic %r partition %d: offsets 0..%d no longer exist on the cluster "
                    "(deleted by retention before this backup started)",
                    topic,
                    partition,
                    low - 1,
                )
        starting = self.options.starting
        if starting == "earliest":
            start = earliest
        elif starting == "latest":
            start = latest
        else:
            assert isinstance(starting, dict)
            start = {}
            for key in latest:
                wanted = starting.get(key, -2)
                start[key] = earliest[key] if wanted == -2 else latest[key] if wanted == -1 else wanted
        return encode_offsets(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._current()[1]
        log.info("snapshot target: %d partitions, %d offsets", len(self._target), sum(self._target.values()))

    def _current_or_wait(self) -> tuple[dict[TopicPartitionKey, int], dict[TopicPartitionKey, int]] | None:
        """:meth:`_current` through an outage: ``None`` (continuous) or waiting up to the snapshot's limit."""
        while True:
            asked = time.monotonic()
            try:
                current = self._current(partial=self._target is None)
            except ClusterError as exc:
                if not exc.transient:
                    raise  # a refusal (authorization, a bad request): asking again changes nothing
                waited = self._outage.failed(asked, exc, "no new data planned, waiting for it to answer")
                if self._target is not None and waited > self.options.snapshot_unreachable:
                    raise ClusterError(
                        f"the source cluster did not answer for {waited:.0f} s during the snapshot ({exc}); "
                        "run it again: it goes on from what is already backed up"
                    ) from None
                if self._target is None:
                    return None  # Spark asks again at the next trigger
                time.sleep(UNREACHABLE_RETRY_SECONDS)
                continue
            self._outage.answered()
            return current

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        ensure_console_logging(log_format=self.options.log_format)
        begin = decode_offsets(start)
        current = self._current_or_wait()
        if current is None:
            return start
        earliest, latest = current
        self._latest = latest
        if self._target is not None:
            # Snapshot: nothing beyond what existed when the query started.
            latest = {key: min(offset, self._target[key]) for key, offset in latest.items() if key in self._target}
        self._check_data_loss(begin, earliest)
        end = dict(begin)
        available: dict[TopicPartitionKey, int] = {}
        for key, offset in latest.items():
            first = max(begin.get(key, 0), earliest.get(key, 0))
            if offset > first:
                available[key] = offset - first
            end.setdefault(key, begin.get(key, first))
        end.update(_admit(begin, earliest, available, limit))
        return encode_offsets(end)

    def _check_data_loss(
        self, begin: Mapping[TopicPartitionKey, int], earliest: Mapping[TopicPartitionKey, int]
    ) -> None:
        for key, low in sorted(earliest.items()):
            needed = begin.get(key, 0)
            if needed < low:
                topic, partition = key
                message = (
                    f"topic {topic!r} partition {partition}: offsets {needed}..{low - 1} were deleted "
                    "(retention or deleted records) before the backup read them"
                )
                if self.options.fail_on_data_loss and key in begin:
                    raise KbackupError(message + " (set failOnDataLoss=false to go on)")
                log.warning(message)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return encode_offsets(self._latest) if self._latest else None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[KafkaTask]:
        begin = decode_offsets(start)
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
                    )
                )
        return pack_ranges(ranges, self.options.min_partitions)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: offsets live in Spark's checkpoint, never in Kafka."""

    # -- executor side -----------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, KafkaTask):
            raise TypeError(f"expected a KafkaTask, got {type(partition).__name__}")
        return read_task(partition)


def _admit(
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


def read_task(task: KafkaTask, *, batch_rows: int = 10_000) -> Iterator[pa.RecordBatch]:
    """Read the ranges of ``task`` with one consumer, as Arrow batches of one partition each (executor side).

    One range is read alone. Several (small partitions packed together) are
    assigned at once, so one fetch brings data of many of them: each
    partition's rows gather in its own columns, which become a batch when the
    range is complete or holds ``batch_rows`` rows, and a complete partition
    is unassigned.
    """
    from confluent_kafka import Consumer

    if not task.ranges:
        return
    first = task.ranges[0]
    ensure_console_logging()  # a Python worker of Spark's: librdkafka's own log (a line per reconnect) stays quiet
    consumer = Consumer(
        consumer_settings(first.client, isolation_level=first.client.get("isolation.level", "read_committed")),
        logger=logging.getLogger("kbackup.librdkafka"),
    )
    try:
        if len(task.ranges) == 1:
            yield from read_range(first, consumer, batch_rows=batch_rows)
        else:
            yield from _read_together(task.ranges, consumer, batch_rows=batch_rows)
    finally:
        consumer.close()


def _read_together(ranges: tuple[KafkaRange, ...], consumer: Any, *, batch_rows: int) -> Iterator[pa.RecordBatch]:
    from confluent_kafka import KafkaError, TopicPartition

    schema = to_arrow_schema(kafka_schema(ranges[0].include_headers), timezone="UTC")
    pending = {(r.topic, r.partition): _Columns(r, schema) for r in ranges}
    consumer.incremental_assign([TopicPartition(r.topic, r.partition, r.start) for r in ranges])
    last_progress = time.monotonic()
    while pending:
        messages = consumer.consume(num_messages=5000, timeout=1.0)
        if not messages:
            if time.monotonic() - last_progress > ranges[0].read_timeout:
                stuck = min(pending)
                item = pending[stuck].task
                raise ClusterError(
                    f"topic {item.topic!r} partition {item.partition}: no data for {item.read_timeout:.0f} s "
                    f"while reading offsets {item.start}..{item.end - 1} from "
                    f"{redact(item.client).get('bootstrap.servers')} ({len(pending)} partitions of this task unread)"
                )
            continue
        last_progress = time.monotonic()
        keys = [(message.topic(), message.partition()) for message in messages]
        cuts = [0, *(i for i in range(1, len(keys)) if keys[i] != keys[i - 1]), len(keys)]
        for start, stop in itertools.pairwise(cuts):
            columns = pending.get(keys[start])
            if columns is None:
                error = messages[start].error()
                if error is not None and error.code() != KafkaError._PARTITION_EOF and not is_transient(error):
                    raise ClusterError(f"reading {len(pending)} partitions: {error.str()}")
                continue  # a partition already complete: what was fetched past its range is not ours
            done = columns.add_all(messages[start:stop], columns.task.end, KafkaError._PARTITION_EOF)
            if columns.rows and (done or columns.rows >= batch_rows):
                yield columns.batch()
            if done:
                del pending[keys[start]]
                item = columns.task
                consumer.incremental_unassign([TopicPartition(item.topic, item.partition)])


def read_range(task: KafkaRange, consumer: Any, *, batch_rows: int = 10_000) -> Iterator[pa.RecordBatch]:
    """Read offsets ``[start, end)`` of one partition as Arrow batches, with ``consumer`` assigned to it alone."""
    from confluent_kafka import KafkaError, TopicPartition

    schema = to_arrow_schema(kafka_schema(task.include_headers), timezone="UTC")
    columns = _Columns(task, schema)
    consumer.assign([TopicPartition(task.topic, task.partition, task.start)])
    last_progress = time.monotonic()
    done = False
    while not done:
        messages = consumer.consume(num_messages=5000, timeout=1.0)
        if not messages:
            if time.monotonic() - last_progress > task.read_timeout:
                raise ClusterError(
                    f"topic {task.topic!r} partition {task.partition}: no data for {task.read_timeout:.0f} s "
                    f"while reading offsets {task.start}..{task.end - 1} from "
                    f"{redact(task.client).get('bootstrap.servers')}"
                )
            continue
        last_progress = time.monotonic()
        done = columns.add_all(messages, task.end, KafkaError._PARTITION_EOF)
        if columns.rows >= batch_rows:
            yield columns.batch()
    if columns.rows:
        yield columns.batch()


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
