"""The native Kafka edge: a consumer that gives Arrow batches of one partition, without a Python object per record.

confluent-kafka hands out one ``Message`` per record and Python pulls each field out of it (~2 µs a record); the
native edge (``_native/``, C built at install when a C compiler is there) fills the Arrow buffers in C,
from the same librdkafka, the one confluent-kafka's wheel ships (found where the running process has it mapped,
so both paths always run the same client). The reference path (confluent-kafka) stays: the native one is tested
against it, and it is what runs where the native module is missing.

``KBACKUP_KAFKA_EDGE`` chooses: ``native`` (fail if the module cannot be used), ``reference``, or unset (native when
it loads). The choice is read where a consumer is made, on the executor: set it in the executors' environment.
"""

from __future__ import annotations

import ctypes.util
import functools
import glob
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from spark_kafka_backup.errors import SparkKafkaBackupError
from spark_kafka_backup.logsetup import ensure_console_logging
from spark_kafka_backup.packed import packed_environment

#: Why the native module did not import ("": it did).
_NATIVE_IMPORT_ERROR = ""
if TYPE_CHECKING:
    from spark_kafka_backup.kafka import _native_kafka as _native_kafka  # typed by _native_kafka.pyi; the one import
else:
    try:
        from spark_kafka_backup.kafka import _native_kafka
    except ImportError as _missing:  # not built (no C compiler at install), or built for another machine
        _native_kafka = None
        _NATIVE_IMPORT_ERROR = str(_missing)


log = logging.getLogger("spark_kafka_backup.source")

EDGE_ENV = "KBACKUP_KAFKA_EDGE"

#: The Kafka source's columns (Spark's Kafka schema) as Arrow types, headers last.
HEADER_TYPE = pa.struct([("key", pa.string()), ("value", pa.binary())])
HEADERS_TYPE = pa.list_(HEADER_TYPE)

#: librdkafka's file (``librdkafka.so.1``, a wheel's ``librdkafka-HASH.so.1``), not ``librdkafka++``.
_LIBRDKAFKA = re.compile(r"librdkafka([-.]|$)")

#: librdkafka's partition-EOF event.
PARTITION_EOF = -191
#: :meth:`ColumnarConsumer.poll`'s end when there is none (several partitions: each has its own).
NO_END = (1 << 63) - 1


class NativeEdgeError(SparkKafkaBackupError):
    """The native edge was asked for (``KBACKUP_KAFKA_EDGE=native``) and cannot be used here."""


def librdkafka_path() -> str | None:
    """The file of the librdkafka confluent-kafka runs: mapped into this process once confluent-kafka is imported
    (its wheel's own copy, or the system's when it was built against that)."""
    import confluent_kafka  # maps librdkafka

    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rstrip("\n").split(maxsplit=5)[-1]
                if _LIBRDKAFKA.match(os.path.basename(path)) and os.path.exists(path):
                    return path
    except OSError:
        pass
    package = Path(confluent_kafka.__file__).parent
    for pattern in (
        str(package.parent / "confluent_kafka.libs" / "librdkafka*"),
        str(package / ".dylibs" / "librdkafka*"),
    ):
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    return ctypes.util.find_library("rdkafka")


@functools.cache
def _native() -> tuple[ModuleType | None, str]:
    """The loaded native module, or ``None`` and why not."""
    if _native_kafka is None:
        if any(Path(__file__).parent.glob("_native_kafka.*.so")):  # there, yet it did not import
            return None, f"the native module does not load here: {_NATIVE_IMPORT_ERROR}"
        if packed_environment() is not None:
            return None, "the packed environment does not carry the native module (packed --without-native)"
        return None, "the native module is not built (no C compiler when spark-kafka-backup was installed)"
    path = librdkafka_path()
    if path is None:
        return None, "librdkafka was not found"
    try:
        _native_kafka.load(path)
    except OSError as exc:
        return None, str(exc)
    return _native_kafka, ""


def edge_setting() -> str:
    """``KBACKUP_KAFKA_EDGE`` as given here: ``native``, ``reference`` or empty; anything else is refused (the jobs
    ask on the driver before they change anything, so that a mistyped value is not first met by a task)."""
    wanted = os.environ.get(EDGE_ENV, "").strip().lower()
    if wanted not in ("", "native", "reference"):
        raise NativeEdgeError(f"{EDGE_ENV}={wanted!r}: expected 'native', 'reference' or nothing")
    return wanted


def native_edge() -> ModuleType | None:
    """The native module when the edge is to be native (see the module docstring), else ``None``."""
    wanted = edge_setting()
    if wanted == "reference":
        _say_edge(None, f"{EDGE_ENV}=reference")
        return None
    module, why = _native()
    if module is None and wanted == "native":
        raise NativeEdgeError(f"{EDGE_ENV}=native, but the native Kafka edge cannot be used here: {why}")
    _say_edge(module, why)
    return module


@functools.cache
def _say_edge(module: ModuleType | None, why: str) -> None:
    """In a packed environment (an executor of a cluster with nothing installed), which edge this process uses, once:
    its log is the executor's (stdout in its work directory)."""
    environment = packed_environment()
    if environment is not None:
        ensure_console_logging()  # a task's Python process: no handler of the job's yet (a restore's task)
        edge = "the native Kafka edge" if module is not None else f"confluent-kafka's client (reference path: {why})"
        log.info("this executor's Python runs the packed environment %s: Kafka through %s", environment, edge)


@dataclass(frozen=True)
class Polled:
    """What one :meth:`ColumnarConsumer.poll` brought.

    ``batch``: the records, in offset order (``None`` when none came). ``event``: librdkafka's error code of an event
    met after them (partition EOF, an error), 0 when none, with ``event_offset`` and ``event_text``; without an
    event, ``event_offset`` is the offset that reached the range's end (its last, or a first one past it), else -1.
    ``topic`` and ``partition``: whose records and event they are ("" and -1: an event of no partition, or nothing).
    """

    batch: pa.RecordBatch | None
    event: int
    event_offset: int
    event_text: str
    topic: str = ""
    partition: int = -1

    @property
    def reached_end(self) -> bool:
        return self.event == 0 and self.event_offset >= 0


class ColumnarConsumer:
    """A consumer that never commits, of one partition at a time (:meth:`assign`) or of several (:meth:`add`,
    :meth:`remove`; each :meth:`poll` then hands out records of one of them, named); see the module docstring."""

    def __init__(self, settings: dict[str, str], schema: pa.Schema) -> None:
        """A consumer of the native module, which :func:`native_edge` has loaded."""
        self._schema = schema
        self._headers = schema.get_field_index("headers") >= 0
        self._handle: Any = _native_kafka.consumer({"log_level": "2", **settings})

    def assign(self, topic: str, partition: int, offset: int) -> None:
        """Read this partition alone, from ``offset``."""
        _native_kafka.assign(self._handle, topic, partition, offset)

    def add(self, ranges: list[tuple[str, int, int, int]]) -> None:
        """Read these partitions too: ``(topic, partition, offset, end)``, from ``offset`` up to ``end``, exclusive
        (the first call ends an :meth:`assign`; a partition added again after :meth:`remove` takes the new ones)."""
        _native_kafka.add(self._handle, ranges)

    def remove(self, topic: str, partition: int) -> None:
        """Stop reading a partition :meth:`add` gave (what was fetched of it is dropped, never handed out)."""
        _native_kafka.remove(self._handle, topic, partition)

    def poll(self, max_rows: int, timeout: float, end: int = NO_END, max_bytes: int = 64 << 20) -> Polled:
        """Records of one partition, up to ``end`` (exclusive; of several partitions, up to the end each was added
        with)."""
        got = _native_kafka.poll(self._handle, max_rows, int(timeout * 1000), end, max_bytes)
        batch = self._batch(got.rows, got.header_count, got.buffers, got.topic, got.partition) if got.rows else None
        return Polled(batch, got.event, got.event_offset, got.event_text, got.topic, got.partition)

    def watermarks(self, topic: str, partition: int, timeout: float) -> tuple[int, int]:
        marks = _native_kafka.watermarks(self._handle, topic, partition, int(timeout * 1000))
        return marks.low, marks.high

    def close(self) -> None:
        _native_kafka.close(self._handle)

    def _batch(
        self, rows: int, headers: int, b: _native_kafka.ColumnBuffers, topic: str, partition: int
    ) -> pa.RecordBatch:
        buf = pa.py_buffer
        columns = [
            pa.Array.from_buffers(pa.binary(), rows, [buf(b.key_valid), buf(b.key_offsets), buf(b.key_data)]),
            pa.Array.from_buffers(pa.binary(), rows, [buf(b.value_valid), buf(b.value_offsets), buf(b.value_data)]),
            repeated_string(topic, rows),
            pa.array(np.full(rows, partition, dtype=np.int32)),
        ]
        columns.append(pa.Array.from_buffers(pa.int64(), rows, [None, buf(b.offsets)]))
        columns.append(pa.Array.from_buffers(pa.timestamp("us", tz="UTC"), rows, [None, buf(b.timestamps)]))
        columns.append(pa.Array.from_buffers(pa.int32(), rows, [None, buf(b.kinds)]))
        if self._headers:
            names = pa.Array.from_buffers(
                pa.string(), headers, [None, buf(b.header_key_offsets), buf(b.header_key_data)]
            )
            try:
                names.validate(full=True)  # a header key is a string: UTF-8, as the reference path requires
            except pa.ArrowInvalid as exc:
                first, last = offsets_of(columns[4])
                raise SparkKafkaBackupError(
                    f"topic {topic!r} partition {partition}: a record at offsets {first}..{last} has a "
                    "header key that is not UTF-8"
                ) from exc
            values = [buf(b.header_value_valid), buf(b.header_value_offsets), buf(b.header_value_data)]
            pairs = pa.StructArray.from_arrays(
                [names, pa.Array.from_buffers(pa.binary(), headers, values)], fields=list(HEADER_TYPE)
            )
            lists = [buf(b.headers_valid), buf(b.headers_offsets)]
            columns.append(pa.ListArray.from_buffers(HEADERS_TYPE, rows, lists, children=[pairs]))
        return pa.RecordBatch.from_arrays(columns, schema=self._schema)


def offsets_of(column: pa.Array) -> tuple[int, int]:
    """The first and last offset of a batch's offset column."""
    return int(column[0].as_py()), int(column[len(column) - 1].as_py())


def repeated_string(text: str, rows: int) -> pa.Array:
    """``rows`` copies of ``text`` as an Arrow string array, built from its buffers."""
    encoded = text.encode()
    offsets = np.arange(rows + 1, dtype=np.int32) * len(encoded)
    return pa.Array.from_buffers(pa.string(), rows, [None, pa.py_buffer(offsets), pa.py_buffer(encoded * rows)])
