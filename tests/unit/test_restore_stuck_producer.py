"""A transactional call that never returns (librdkafka #5456/#5511) costs one producer, not the restore.

librdkafka can wait for ever in ``send_offsets_to_transaction`` when the group
coordinator's broker left the cluster, whatever timeout it was given; on a real
cluster that happens only with a badly timed broker failure, so here a stand-in
for the Kafka client plays a small transactional log: offsets, commit and abort
markers, fencing by a newer producer of the same transactional id. Everything
else (the backup files, the task, its marker logic) is real.
"""

from __future__ import annotations

import functools
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from spark_kafka_backup.format.record import Record
from spark_kafka_backup.kafka.columnar_producer import Deliveries, ProducerError
from spark_kafka_backup.partition.selection import Window
from spark_kafka_backup.partition.writer import PartitionWriter
from spark_kafka_backup.restore import marker as markers
from spark_kafka_backup.restore import partition_task, transaction_run
from spark_kafka_backup.restore import producer_calls as calls
from spark_kafka_backup.restore import task as task_module
from spark_kafka_backup.restore.partition_task import NATIVE_PRODUCER, REFERENCE_PRODUCER
from spark_kafka_backup.restore.reference_producer import ReferenceProducer
from spark_kafka_backup.restore.task import PartitionTask, restore_partition


class FakeKafkaError(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(self)
        self.reason = reason

    def code(self) -> int:
        return 47  # INVALID_PRODUCER_EPOCH: fenced

    def str(self) -> str:
        return self.reason


@dataclass
class Position:
    topic: str
    partition: int
    offset: int
    metadata: str | None = None


@dataclass
class TargetLog:
    """One target partition: every record with its offset, which are committed, and the progress marker."""

    records: list[tuple[int, bytes | None, bool]] = field(default_factory=list)  # offset, key, committed
    next_offset: int = 0
    marker: Position | None = None
    epoch: int = 0
    open_transaction: bool = False
    producers: int = 0
    closed: int = 0
    hang_sends: int = 0  # how many send_offsets_to_transaction calls never return
    release: threading.Event = field(default_factory=threading.Event)

    def committed_keys(self) -> list[bytes | None]:
        return [key for _, key, committed in self.records if committed]


class Message:
    def __init__(self, offset: int) -> None:
        self._offset = offset

    def offset(self) -> int:
        return self._offset


def fake_kafka(log: TargetLog) -> tuple[type, type]:
    from confluent_kafka import KafkaException

    class Producer:
        def __init__(self, config: dict[str, Any]) -> None:
            self.on_delivery = config["on_delivery"]
            self.pending: list[tuple[int, bytes | None]] = []  # this transaction's records, offsets given
            self.queued: list[bytes | None] = []
            self.epoch = -1
            log.producers += 1

        def _check(self) -> None:
            if self.epoch != log.epoch:
                raise KafkaException(FakeKafkaError("producer fenced by a newer epoch"))

        def init_transactions(self, timeout: float) -> None:
            # A newer epoch aborts the open transaction of the older producer: its records stay, uncommitted.
            if log.open_transaction:
                log.next_offset += 1  # the abort marker
                log.open_transaction = False
            log.epoch += 1
            self.epoch = log.epoch

        def begin_transaction(self) -> None:
            self._check()

        def produce(self, topic: str, value: Any, key: Any, partition: int, **_: Any) -> None:
            self.queued.append(key)

        def poll(self, timeout: float) -> int:
            return self.flush(timeout)

        def flush(self, timeout: float) -> int:
            for key in self.queued:
                offset = log.next_offset
                log.next_offset += 1
                log.records.append((offset, key, False))
                log.open_transaction = True
                self.pending.append((offset, key))
                self.on_delivery(None, Message(offset))
            self.queued = []
            return 0

        def send_offsets_to_transaction(self, positions: list[Any], metadata: Any, timeout: float) -> None:
            if log.hang_sends:
                log.hang_sends -= 1
                log.release.wait()  # the coordinator is never asked again
            self._check()
            self.marker = Position(
                positions[0].topic, positions[0].partition, positions[0].offset, positions[0].metadata
            )

        def commit_transaction(self, timeout: float) -> None:
            self._check()
            offsets = {offset for offset, _ in self.pending}
            log.records = [(o, k, committed or o in offsets) for o, k, committed in log.records]
            log.next_offset += 1  # the commit marker
            log.open_transaction = False
            log.marker = self.marker
            self.pending = []

        def abort_transaction(self, timeout: float) -> None:
            self.pending = []

    class Consumer:
        def committed(self, wanted: list[Any], timeout: float) -> list[Any]:
            marker = log.marker
            return [marker] if marker is not None else [Position(w.topic, w.partition, -1001) for w in wanted]

        def consumer_group_metadata(self) -> object:
            return object()

        def close(self) -> None:
            pass

    return Producer, Consumer


@pytest.fixture
def backup(tmp_path: Path) -> Path:
    root = tmp_path / "backup"
    with PartitionWriter(root / "t", "t", 0, fsync=False) as writer:
        for offset in range(120):
            writer.append(Record(offset, 0, 1_700_000_000_000 + offset, b"k%d" % offset, b"v%d" % offset))
    return root


def _task(backup: Path) -> PartitionTask:
    return PartitionTask(
        source_dir=str(backup / "t"), source_topic="t", source_partition=0, target_topic="t", target_partition=0,
        window=Window(None, None, None, None), identity="restore-1", resume_from=0, baseline=0, after_last=0,
        replaces=None, groups={}, client={}, batch_size=1024,
    )  # fmt: skip


def fake_columnar(log: TargetLog) -> type:
    """The native producer's face (:class:`ColumnarProducer`) over the same transactional log."""

    class Columnar:
        def __init__(self, settings: dict[str, str]) -> None:
            self.pending: list[tuple[int, bytes | None]] = []
            self.queued: list[tuple[int, bytes | None]] = []  # (delivery index, key)
            self.offsets: dict[int, int] = {}
            self.last = -1
            self.epoch = -1
            self.marker: Position | None = None
            log.producers += 1

        def _check(self) -> None:
            if self.epoch != log.epoch:
                raise ProducerError(47, "producer fenced by a newer epoch")

        def init_transactions(self, timeout: float) -> None:
            if log.open_transaction:
                log.next_offset += 1
                log.open_transaction = False
            log.epoch += 1
            self.epoch = log.epoch

        def begin_transaction(self) -> None:
            self._check()

        def produce(self, topic: str, partition: int, batch: Any, first_index: int) -> None:
            keys = batch.column("key").to_pylist()
            self.queued += [(first_index + i, key) for i, key in enumerate(keys)]

        def poll(self, timeout: float = 0) -> int:
            return self.flush(timeout)

        def flush(self, timeout: float) -> int:
            for index, key in self.queued:
                offset = log.next_offset
                log.next_offset += 1
                log.records.append((offset, key, False))
                log.open_transaction = True
                self.pending.append((offset, key))
                self.offsets[index] = self.last = offset
            self.queued = []
            return 0

        def deliveries(self, forget_below: int = 0) -> Deliveries:
            for index in [i for i in self.offsets if i < forget_below]:
                del self.offsets[index]
            base = min(self.offsets, default=forget_below)
            top = max(self.offsets, default=base - 1)
            offsets = np.array([self.offsets.get(i, -1) for i in range(base, top + 1)], dtype=np.int64)
            return Deliveries(len(self.offsets), self.last, base, offsets, [], None)

        def send_offsets_to_transaction(
            self, topic: str, partition: int, offset: int, metadata: str, group: str, timeout: float
        ) -> None:
            if log.hang_sends:
                log.hang_sends -= 1
                log.release.wait()  # the coordinator is never asked again
            self._check()
            self.marker = Position(topic, partition, offset, metadata)

        def commit_transaction(self, timeout: float) -> None:
            self._check()
            offsets = {offset for offset, _ in self.pending}
            log.records = [(o, k, committed or o in offsets) for o, k, committed in log.records]
            log.next_offset += 1
            log.open_transaction = False
            log.marker = self.marker
            self.pending = []

        def abort_transaction(self, timeout: float) -> None:
            self.pending = []

        def error_text(self, code: int) -> str:
            return f"error {code}"

        def close(self) -> None:
            log.closed += 1

    return Columnar


@pytest.fixture(params=["reference", "columnar"])
def path(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def log(monkeypatch: pytest.MonkeyPatch, path: str) -> Any:
    import confluent_kafka

    target = TargetLog()
    producer, consumer = fake_kafka(target)
    # The one transaction protocol, through confluent-kafka's producer (adapted) or the native one's face.
    if path == "reference":
        monkeypatch.setattr(confluent_kafka, "Producer", producer)
        made: Any = ReferenceProducer
        name = REFERENCE_PRODUCER
    else:
        columnar = fake_columnar(target)
        made = lambda settings, group: columnar(settings)  # noqa: E731
        name = NATIVE_PRODUCER
    run = functools.partial(transaction_run.restore_transactions, producer=made)
    monkeypatch.setattr(task_module, "_producer_path", lambda task: (run, name))

    def written_since(task: PartitionTask, marker: Any, where: str) -> None:
        """The check of records past the marker (a read_committed consumer on a cluster), on the stand-in's log."""
        if any(committed and offset >= marker.next for offset, _, committed in target.records):
            raise AssertionError(f"{where}: a committed record past the marker")

    monkeypatch.setattr(partition_task, "_refuse_written_since", written_since)
    monkeypatch.setattr(transaction_run, "marker_consumer", lambda client: consumer())
    monkeypatch.setattr(markers, "TRANSACTION_RECORDS", 50)  # three transactions
    monkeypatch.setattr(calls, "SEND_OFFSETS_SECONDS", 0.1)
    monkeypatch.setattr(calls, "STUCK_GRACE_SECONDS", 0.2)
    # A task that waits for the call to return (the old behaviour) is let go after 20 s, and fails the checks.
    timer = threading.Timer(20, target.release.set)
    timer.start()
    yield target
    timer.cancel()
    target.release.set()


def test_a_send_offsets_call_that_never_returns_costs_one_producer_and_nothing_twice(
    log: Any, backup: Path, path: str
) -> None:
    log.hang_sends = 1  # the first commit's send_offsets hangs
    result = restore_partition(_task(backup))
    assert log.producers == 2
    if path == "columnar":
        assert log.closed == 1  # the stuck producer is left to the call that holds it, never destroyed under it
    assert log.committed_keys() == [b"k%d" % i for i in range(120)]  # each once, in order
    assert result.fenced is None and result.produced == 120


def test_after_the_second_transaction_the_new_producer_goes_on_from_the_marker(
    log: Any, backup: Path, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    commits = {"n": 0}
    run_class: Any = transaction_run._Run
    real = run_class._commit

    def commit(self: Any, *args: Any) -> None:
        commits["n"] += 1
        if commits["n"] == 2:
            log.hang_sends = 1
        real(self, *args)

    monkeypatch.setattr(run_class, "_commit", commit)
    result = restore_partition(_task(backup))
    assert log.producers == 2
    assert log.committed_keys() == [b"k%d" % i for i in range(120)]
    assert result.skipped == 50 and result.produced == 70  # the first transaction was committed before
    assert result.taken_over is None  # its own first producer's progress, not another restore's


def test_a_producer_stuck_every_time_ends_in_one_error_and_keeps_what_was_committed(log: Any, backup: Path) -> None:
    from spark_kafka_backup.errors import DeliveryError

    log.hang_sends = calls.PRODUCER_ATTEMPTS
    with pytest.raises(
        DeliveryError, match=r"did not complete a transaction with 3 producers .* run the restore again"
    ):
        restore_partition(_task(backup))
    assert log.producers == 3
    assert log.committed_keys() == []
    assert log.closed == 0


def test_a_target_waiting_for_a_shared_read_commits_its_open_transaction_in_time(
    log: Any, backup: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A repartitioned topic's targets share one read (:mod:`spark_kafka_backup.restore.fanout`): while a slow
    sibling holds it, a target gets ``None`` instead of records, and commits a transaction older than its time
    instead of holding it open past the broker's transaction timeout."""
    from spark_kafka_backup.partition.reader import PartitionReader
    from spark_kafka_backup.restore.partition_task import PartitionResult
    from spark_kafka_backup.restore.stream_columns import Chunk, partition_chunks

    monkeypatch.setattr(markers, "TRANSACTION_SECONDS", 0.05)
    (whole,) = partition_chunks(PartitionReader(backup / "t", 0), 0, Window())
    seen_while_waiting: list[list[bytes | None]] = []

    def part(start: int, stop: int) -> Chunk:
        return Chunk(whole.columns.slice(start, stop - start), whole.partitions[start:stop], whole.offsets[start:stop],
                     whole.positions[start:stop], whole.pieces, whole.piece_of[start:stop],
                     whole.piece_rows[start:stop])  # fmt: skip

    def shared_read() -> Any:
        yield part(0, 10)
        for _ in range(5):  # the read is held by a sibling for a while
            time.sleep(0.02)
            yield None
        seen_while_waiting.append(log.committed_keys())
        yield part(10, 120)

    task = _task(backup)
    run, _ = task_module._producer_path(task)
    result = run(task, {}, PartitionResult("t", 0, "t", 0), chunks=shared_read(), rewrite=None, sharing=2)
    assert seen_while_waiting == [[b"k%d" % i for i in range(10)]]  # committed while no record came
    assert log.committed_keys() == [b"k%d" % i for i in range(120)]
    assert result.produced == 120 and result.fenced is None
