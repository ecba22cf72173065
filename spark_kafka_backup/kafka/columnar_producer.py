"""The native Kafka edge's producer: Arrow batches in, delivery reports kept in C (see ``_native/produce.c``).

confluent-kafka takes one ``produce()`` call per record and calls Python once per delivery report; here a whole
batch is one call, librdkafka's reports are counted in C, and Python asks for them when it needs them: how many
came, the last offset, the offset of any record by its delivery index, and the failures by index and code.

Transactions (the restore's fencing and progress markers) go through librdkafka's transactional API; a refused
call raises :class:`ProducerError` with librdkafka's flags (fatal, retriable, requires abort).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from spark_kafka_backup.kafka.columnar import _native_kafka  # None when the native module is not built


class ProducerError(Exception):
    """librdkafka refused a call or a record (internal to the jobs, which say what it means for them)."""

    def __init__(
        self,
        code: int,
        text: str,
        *,
        fatal: bool = False,
        retriable: bool = False,
        requires_abort: bool = False,
        produced: int = 0,
    ) -> None:
        super().__init__(f"{text} (librdkafka error {code})")
        self.code, self.text = code, text
        self.fatal, self.retriable, self.requires_abort = fatal, retriable, requires_abort
        #: For a refused record: how many rows of the batch before it were queued.
        self.produced = produced


@dataclass(frozen=True)
class Deliveries:
    """The delivery reports so far. ``offsets[i]``: the offset of the record of delivery index ``base + i`` (-1 when
    it is not delivered, or not yet); ``failures``: (delivery index, librdkafka error code) of records refused."""

    reported: int
    last_offset: int
    base: int
    offsets: npt.NDArray[np.int64]
    failures: list[tuple[int, int]]
    fatal: tuple[int, str] | None

    def offset_of(self, index: int) -> int:
        at = index - self.base
        return int(self.offsets[at]) if 0 <= at < len(self.offsets) else -1


class ColumnarProducer:
    """A producer of Arrow batches; see the module docstring."""

    def __init__(self, settings: dict[str, str]) -> None:
        """A producer of the native module, which :func:`~spark_kafka_backup.kafka.columnar.native_edge` has
        loaded."""
        self._handle: Any = _native_kafka.producer({"log_level": "2", **settings})

    def produce(self, topic: str, partition: int, batch: pa.RecordBatch, first_index: int) -> None:
        """Queue every row of ``batch`` (``key``, ``value``: binary; ``timestamp``: int64 milliseconds, -1 for none;
        ``headers``, optional: list of struct of ``key`` string and ``value`` binary), the first as delivery index
        ``first_index``. A record librdkafka refuses raises :class:`ProducerError` (the rows before it are queued)."""
        _check_schema(batch.schema)
        rows = batch.num_rows
        key_valid, key_offsets, key_data = _binary(batch.column("key"))
        value_valid, value_offsets, value_data = _binary(batch.column("value"))
        stamp_column = batch.column("timestamp")
        if stamp_column.null_count:
            raise ValueError("produce: a null timestamp (a record without one is -1)")
        stamps = np.ascontiguousarray(stamp_column.to_numpy(zero_copy_only=False), dtype=np.int64)
        headers: tuple[Any, ...] = (None,) * 7
        count = 0
        if "headers" in batch.schema.names:
            headers, count = _headers(batch.column("headers"))
        header_buffers = dict(zip(_HEADER_BUFFERS, headers, strict=True))
        queued = _native_kafka.produce(
            self._handle, topic, partition, first_index, rows, count,
            key_valid=key_valid, key_offsets=key_offsets, key_data=key_data, value_valid=value_valid,
            value_offsets=value_offsets, value_data=value_data, timestamps=stamps, **header_buffers,
        )  # fmt: skip
        produced, code = queued.produced, queued.error_code
        if code:
            text = f"record {first_index + produced} refused: {self.error_text(code)}"
            raise ProducerError(code, text, fatal=code == _FATAL, produced=produced)

    def error_text(self, code: int) -> str:
        """librdkafka's description of error ``code`` (of a delivery report, say)."""
        return _native_kafka.error_text(code)

    def poll(self, timeout: float = 0) -> int:
        return _native_kafka.wait(self._handle, False, int(timeout * 1000))

    def flush(self, timeout: float) -> int:
        """Wait for every queued record's report; how many are still without one."""
        return _native_kafka.wait(self._handle, True, int(timeout * 1000))

    def deliveries(self, forget_below: int = 0) -> Deliveries:
        """The reports so far; offsets of delivery indexes below ``forget_below`` are forgotten first."""
        reports = _native_kafka.deliveries(self._handle, forget_below)
        offsets = np.frombuffer(reports.offsets, dtype=np.int64)
        return Deliveries(reports.reported, reports.last_offset, reports.base, offsets, reports.failures, reports.fatal)

    def init_transactions(self, timeout: float) -> None:
        self._transaction("init", timeout)

    def begin_transaction(self) -> None:
        self._transaction("begin", 0)

    def commit_transaction(self, timeout: float) -> None:
        self._transaction("commit", timeout)

    def abort_transaction(self, timeout: float) -> None:
        self._transaction("abort", timeout)

    def send_offsets_to_transaction(
        self, topic: str, partition: int, offset: int, metadata: str, group: str, timeout: float
    ) -> None:
        """Commit ``offset`` (with ``metadata``) for ``group`` with the open transaction."""
        _raise(_native_kafka.send_offsets(self._handle, topic, partition, offset, metadata, group, int(timeout * 1000)))

    def close(self) -> None:
        _native_kafka.close_producer(self._handle)

    def _transaction(self, what: str, timeout: float) -> None:
        _raise(_native_kafka.transaction(self._handle, what, int(timeout * 1000)))


#: librdkafka's "the producer has a fatal error" (fencing, among others).
_FATAL = -150

_BINARY = (pa.binary(), pa.large_binary())
#: The header buffers :func:`_headers` gives, by the names the native ``produce`` takes them under.
_HEADER_BUFFERS = (
    "headers_valid", "headers_offsets", "header_key_offsets", "header_key_data", "header_value_valid",
    "header_value_offsets", "header_value_data",
)  # fmt: skip
_HEADER_FIELDS = ("key", "value")


def _check_schema(schema: pa.Schema) -> None:
    """Refuse columns this producer would misread (a wrong type is a bug of the caller, never bytes altered)."""
    wrong = []
    for name in ("key", "value"):
        if schema.field(name).type not in _BINARY:
            wrong.append(f"{name}: {schema.field(name).type}, expected binary")
    if schema.field("timestamp").type != pa.int64():
        wrong.append(f"timestamp: {schema.field('timestamp').type}, expected int64 milliseconds")
    if "headers" in schema.names:
        kind = schema.field("headers").type
        ok = pa.types.is_list(kind) and pa.types.is_struct(kind.value_type)
        if ok:
            fields = kind.value_type
            ok = tuple(fields.field(i).name for i in range(fields.num_fields)) == _HEADER_FIELDS
            ok = ok and pa.types.is_string(fields.field(0).type) and fields.field(1).type in _BINARY
        if not ok:
            wrong.append(f"headers: {kind}, expected list<struct<key: string, value: binary>>")
    if wrong:
        raise TypeError("produce: " + "; ".join(wrong))


def _raise(refusal: _native_kafka.Refusal | None) -> None:
    if refusal is not None:
        raise ProducerError(
            refusal.code, refusal.text, fatal=bool(refusal.fatal), retriable=bool(refusal.retriable),
            requires_abort=bool(refusal.requires_abort),
        )  # fmt: skip


def _whole(array: pa.Array) -> pa.Array:
    """``array`` with offset 0 (a slice's buffers start before its first row)."""
    return pa.concat_arrays([array]) if array.offset else array


def _binary(column: pa.Array | pa.ChunkedArray) -> tuple[Any, Any, Any]:
    """Validity (or ``None``), int32 offsets and data of a binary or string column."""
    array = _whole(column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column)
    if pa.types.is_large_binary(array.type) or pa.types.is_large_string(array.type):
        array = array.cast(pa.binary())
    validity, offsets, data = array.buffers()
    if array.null_count == 0:
        validity = None
    return validity, offsets, data if data is not None else b""


def _headers(column: pa.Array | pa.ChunkedArray) -> tuple[tuple[Any, ...], int]:
    """The seven header buffers of a list<struct<key, value>> column, and how many headers it holds."""
    array = _whole(column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column)
    validity, list_offsets = array.buffers()[:2]
    if array.null_count == 0:
        validity = None
    offsets = np.frombuffer(list_offsets, dtype=np.int32)[: len(array) + 1]
    if len(offsets) and offsets[0] != 0:  # list offsets of a slice: rebase them on its own values
        values = array.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
        list_offsets = pa.py_buffer(np.ascontiguousarray(offsets - offsets[0]))
    else:
        values = array.values.slice(0, int(offsets[-1]) if len(offsets) else 0)
    pairs = values.flatten()
    name_valid, name_offsets, names = _binary(pairs[0])
    if name_valid is not None:
        raise ValueError("a header without a key")
    value_valid, value_offsets, header_values = _binary(pairs[1])
    return (validity, list_offsets, name_offsets, names, value_valid, value_offsets, header_values), len(values)
