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

Where things run (see the PySpark notes): every method but ``read`` runs in
one long-lived driver-side process; ``read`` runs on executors with only the
picklable :class:`KafkaRange` it is given, and builds its own consumer.
One input partition covers one Kafka partition's offset range, so a
micro-batch reads each Kafka partition in one task, in offset order.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

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

from kbackup.errors import KbackupError, UsageError
from kbackup.kafka.client_settings import consumer_settings, redact
from kbackup.kafka.cluster import ClusterError, TopicPartitionKey, admin_client, list_offsets, partition_counts
from kbackup.kafka.topics import TopicSelection
from kbackup.logsetup import ensure_console_logging

log = logging.getLogger("kbackup.source")

SOURCE_NAME = "kbackup_kafka"

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
    "subscribe",
    "subscribepattern",
    "startingoffsets",
    "maxoffsetspertrigger",
    "includeheaders",
    "failondataloss",
    "readtimeoutseconds",
    "path",
}

# confluent-kafka's timestamp types -> Kafka's TimestampType ids, as Spark reports them.
_TIMESTAMP_TYPES = {0: -1, 1: 0, 2: 1}


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
        self._admin: Any = None
        self._latest: dict[TopicPartitionKey, int] = {}
        self._target: dict[TopicPartitionKey, int] | None = None

    # -- driver side -------------------------------------------------------

    def _cluster(self) -> Any:
        if self._admin is None:
            self._admin = admin_client(self.options.client)
        return self._admin

    def _current(self) -> tuple[dict[TopicPartitionKey, int], dict[TopicPartitionKey, int]]:
        """Earliest and latest offsets of every selected partition now."""
        admin = self._cluster()
        counts = partition_counts(admin)
        if self.options.selection.topics is not None:
            missing = [t for t in self.options.selection.topics if t not in counts]
            if missing and not any(t in counts for t in self.options.selection.topics):
                raise ClusterError(
                    f"none of the topics {', '.join(self.options.selection.topics)} exists on "
                    f"{self.options.client['bootstrap.servers']}"
                )
        keys = [(t, p) for t in self.options.selection.select(counts) for p in range(counts[t])]
        earliest = list_offsets(admin, keys, latest=False)
        latest = list_offsets(admin, keys, latest=True, read_committed=self.options.read_committed)
        return earliest, latest

    def initialOffset(self) -> dict[str, Any]:
        ensure_console_logging()
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

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        ensure_console_logging()
        begin = decode_offsets(start)
        earliest, latest = self._current()
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

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[KafkaRange]:
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
        return ranges

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: offsets live in Spark's checkpoint, never in Kafka."""

    # -- executor side -----------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, KafkaRange):
            raise TypeError(f"expected a KafkaRange, got {type(partition).__name__}")
        return read_range(partition)


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


def read_range(task: KafkaRange, *, batch_rows: int = 10_000) -> Iterator[pa.RecordBatch]:
    """Read offsets ``[start, end)`` of one partition as Arrow batches (executor side)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    schema = to_arrow_schema(kafka_schema(task.include_headers), timezone="UTC")
    consumer = Consumer(
        consumer_settings(task.client, isolation_level=task.client.get("isolation.level", "read_committed"))
    )
    columns = _Columns(task, schema)
    try:
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
    finally:
        consumer.close()


class _Columns:
    """Column lists for one Arrow batch of Kafka messages."""

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
        self.timestamps: list[int] = []
        self.timestamp_types: list[int] = []
        self.header_offsets: list[int] = [0]
        self.header_keys: list[str] = []
        self.header_values: list[bytes | None] = []

    def add_all(self, messages: list[Any], end: int, eof_code: int) -> bool:
        """Add the messages below ``end``; return whether the range is complete.

        The range is complete at offset ``end - 1``, at the first offset
        ``>= end``, or at a partition-EOF event at or past ``end`` (committed
        data ends there; the last offsets were transaction markers).
        """
        keys, values, offsets = self.keys, self.values, self.offsets
        timestamps, timestamp_types = self.timestamps, self.timestamp_types
        kinds = _TIMESTAMP_TYPES
        with_headers = self._headers_type is not None
        header_offsets, header_keys, header_values = self.header_offsets, self.header_keys, self.header_values
        added = 0
        complete = False
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() == eof_code:
                    if message.offset() >= end:
                        complete = True
                        break
                    continue
                raise ClusterError(f"topic {self.task.topic!r} partition {self.task.partition}: {error.str()}")
            offset = message.offset()
            if offset >= end:
                complete = True
                break
            keys.append(message.key())
            values.append(message.value())
            offsets.append(offset)
            kind, timestamp = message.timestamp()
            timestamp_types.append(kinds.get(kind, -1))
            timestamps.append(timestamp * 1000)
            if with_headers:
                headers = message.headers()
                if headers:
                    for key, value in headers:
                        header_keys.append(key)
                        header_values.append(value)
                header_offsets.append(len(header_keys))
            added += 1
            if offset >= end - 1:
                complete = True
                break
        self.rows += added
        return complete

    def batch(self) -> pa.RecordBatch:
        n = self.rows
        arrays = [
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            pa.array([self.task.topic] * n, pa.string()),
            pa.array([self.task.partition] * n, pa.int32()),
            pa.array(self.offsets, pa.int64()),
            pa.array(self.timestamps, pa.timestamp("us", tz="UTC")),
            pa.array(self.timestamp_types, pa.int32()),
        ]
        if self._headers_type is not None:
            entries = pa.StructArray.from_arrays(
                [pa.array(self.header_keys, pa.string()), pa.array(self.header_values, pa.binary())],
                fields=list(self._headers_type.value_type),
            )
            arrays.append(
                pa.ListArray.from_arrays(pa.array(self.header_offsets, pa.int32()), entries, type=self._headers_type)
            )
        batch = pa.RecordBatch.from_arrays(arrays, schema=self.schema)
        self._reset()
        return batch
