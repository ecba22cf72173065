"""One read of a repartitioned topic feeds its target partitions as reads of their own would (no broker).

:func:`fan_out` hands every target partition the chunks :func:`routed_chunks` gives a task of its own (random topics,
selections, modes, target counts, a target much slower than the others, queues of one chunk); a read stopped at a
record whose schema id cannot be rewritten stops every target after the same records; a target that fails abandons
the others (each raises :class:`Abandoned` into its transactions); a target that leaves (fenced, its producer stuck)
does not stop the others; a read that fails reaches every target.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from spark_kafka_backup.errors import SchemaIdError
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.selection import Window
from spark_kafka_backup.restore import fanout
from spark_kafka_backup.restore.fanout import Abandoned, fan_out
from spark_kafka_backup.restore.repartition import MURMUR2, ROUND_ROBIN, Repartition, Source
from spark_kafka_backup.restore.stream_columns import Chunk, routed_chunks
from spark_kafka_backup.schema_registry.wire import IdRewrite
from spark_kafka_backup.schema_registry.wire_columns import ColumnIdRewrite
from tests.unit.test_stream_columns import WINDOWS, _topic

Rows = list[tuple[int, int, int, bytes | None]]


def _rows(chunks: Iterator[Chunk | None], *, slow: float = 0.0) -> Rows:
    found: Rows = []
    for chunk in chunks:
        if chunk is None:  # none came for a while
            continue
        values = chunk.columns.column("value").to_pylist()
        found.extend((int(chunk.positions[i]), int(chunk.partitions[i]), int(chunk.offsets[i]), values[i])
                     for i in range(len(chunk)))  # fmt: skip
        time.sleep(slow)
    return found


@pytest.mark.parametrize("seed", range(4))
def test_every_target_gets_the_chunks_a_read_of_its_own_gives(
    tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed)
    monkeypatch.setattr(fanout, "QUEUE_CHUNKS", rng.choice([1, 2, 4]))
    for trial in range(4):
        readers = _topic(tmp_path / str(trial), rng, rng.randrange(1, 5))
        sources = tuple(Source(p, rng.choice(WINDOWS)) for p in readers)
        repartition = Repartition(rng.choice([MURMUR2, ROUND_ROBIN]), rng.randrange(1, 6), sources)
        targets = list(range(repartition.partitions))
        slowest = rng.choice(targets)
        outcomes = fan_out(repartition, readers, targets,
                           lambda target, chunks: _rows(chunks, slow=0.002 if target == slowest else 0.0))  # noqa: B023  # fmt: skip
        for target in targets:
            expected = _rows(routed_chunks(repartition, readers, target))
            assert outcomes[target] == expected


def test_a_read_stopped_at_a_schema_id_stops_every_target_after_the_same_records(tmp_path: Path) -> None:
    rng = random.Random(7)
    stopped = 0
    for trial in range(8):
        readers = _topic(tmp_path / str(trial), rng, 3)
        repartition = Repartition(MURMUR2, 3, tuple(Source(p, Window()) for p in readers))
        rewrite = ColumnIdRewrite(IdRewrite({1: 7, 2: 2}, key=True, value=False, check_value=True))
        given: dict[int, Rows] = {}

        def work(target: int, chunks: Iterator[Chunk | None], given: dict[int, Rows] = given) -> Rows:
            given[target] = []
            for chunk in chunks:
                given[target].extend(_rows(iter([chunk])))
            return given[target]

        outcomes = fan_out(repartition, readers, [0, 1, 2], work, rewrite=rewrite, topic="t")
        for target in range(3):
            expected: Rows = []
            stop: SchemaIdError | None = None
            try:
                for chunk in routed_chunks(repartition, readers, target, rewrite=rewrite, topic="t"):
                    expected.extend(_rows(iter([chunk])))
            except SchemaIdError as exc:
                stop = exc
            if stop is None:
                assert outcomes[target] == expected
            else:
                assert isinstance(outcomes[target], SchemaIdError) and str(outcomes[target]) == str(stop)
                stopped += 1
            assert given[target] == expected
    assert stopped  # a key naming id 9 was met at least once


def test_a_target_that_fails_abandons_the_others(tmp_path: Path) -> None:
    readers = _big_topic(tmp_path)
    repartition = Repartition(ROUND_ROBIN, 3, tuple(Source(p, Window()) for p in readers))
    seen: dict[int, int] = {}

    def work(target: int, chunks: Iterator[Chunk | None]) -> int:
        seen[target] = 0
        for chunk in chunks:
            seen[target] += chunk is not None
            if target == 1 and seen[target] == 2:
                raise RuntimeError("the target refused a record")
        return seen[target]

    outcomes = fan_out(repartition, readers, [0, 1, 2], work)
    assert isinstance(outcomes[1], RuntimeError)
    assert isinstance(outcomes[0], Abandoned) and isinstance(outcomes[2], Abandoned)
    whole = sum(1 for _ in routed_chunks(repartition, readers, 0))
    assert seen[0] < whole and seen[2] < whole  # abandoned before the end of the read


def test_a_target_that_leaves_does_not_stop_the_others(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fanout, "QUEUE_CHUNKS", 1)
    readers = _big_topic(tmp_path)
    repartition = Repartition(MURMUR2, 3, tuple(Source(p, Window()) for p in readers))

    class StuckError(Exception):
        pass

    def work(target: int, chunks: Iterator[Chunk | None]) -> Rows:
        if target == 0:
            _first(chunks)
            return []  # fenced: ends without reading on (the read must not wait for it)
        if target == 1:
            _first(chunks)
            raise StuckError
        return _rows(chunks)

    outcomes = fan_out(repartition, readers, [0, 1, 2], work, leaving=(StuckError,))
    assert outcomes[0] == [] and isinstance(outcomes[1], StuckError)
    assert outcomes[2] == _rows(routed_chunks(repartition, readers, 2))


def test_a_read_that_fails_reaches_every_target(tmp_path: Path) -> None:
    readers = _big_topic(tmp_path)
    failing = _FailingReader(readers[1])
    repartition = Repartition(ROUND_ROBIN, 2, tuple(Source(p, Window()) for p in readers))
    outcomes = fan_out(repartition, {**readers, 1: failing}, [0, 1], lambda target, chunks: _rows(chunks))  # type: ignore[dict-item]
    for target in (0, 1):
        assert isinstance(outcomes[target], OSError) and "segment 00000" in str(outcomes[target])
    assert threading.active_count() < 20  # the reader and the targets' threads ended


def _first(chunks: Iterator[Chunk | None]) -> Chunk:
    return next(chunk for chunk in chunks if chunk is not None)


class _FailingReader:
    """A partition reader whose second batch cannot be read (a disk error)."""

    def __init__(self, reader: PartitionReader) -> None:
        self._reader = reader

    def record_batches(self, *args: object, **kwargs: object) -> Iterator[object]:
        batches = self._reader.record_batches(*args, **kwargs)  # type: ignore[arg-type]
        yield next(batches)
        raise OSError("segment 00000: input/output error")


def _big_topic(root: Path) -> dict[int, PartitionReader]:
    """Two partitions of many small batches (segments of 2,000 bytes), every record stamped in order."""
    from spark_kafka_backup.format.record import Record
    from spark_kafka_backup.partition.writer import PartitionWriter

    for partition in range(2):
        with PartitionWriter(root / "t", "t", partition, fsync=False, max_segment_size=2000) as writer:
            for offset in range(3000):
                writer.append(Record(offset, 0, 1000 + offset, b"k%d" % (offset % 17), b"v%d" % offset, ()))
    return {p: PartitionReader(root / "t", p) for p in range(2)}


def test_a_bundle_target_whose_producer_got_stuck_goes_on_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spark_kafka_backup.restore import task as task_module
    from spark_kafka_backup.restore.partition_task import PartitionResult, PartitionTask
    from spark_kafka_backup.restore.producer_calls import StuckProducerError

    readers = _big_topic(tmp_path)
    repartition = Repartition(ROUND_ROBIN, 3, tuple(Source(p, Window()) for p in readers))
    bundle = [
        PartitionTask(str(tmp_path / "t"), "t", -1, "u", target, Window(), "restore-id", 0, 0, 0, None, {}, {}, 1 << 20,
                      repartition=repartition)
        for target in range(3)
    ]  # fmt: skip
    attempts: list[tuple[int, bool]] = []

    def run(
        task: PartitionTask,
        readers: dict[int, PartitionReader],
        result: PartitionResult,
        *,
        chunks: Iterator[Chunk | None] | None = None,
        rewrite: object = None,
        sharing: int = 1,
    ) -> PartitionResult:
        shared = chunks is not None
        attempts.append((task.target_partition, shared))
        assert sharing == (3 if shared else 1)
        given = chunks if chunks is not None else routed_chunks(repartition, readers, task.target_partition)
        rows = []
        for chunk in given:
            rows.extend(_rows(iter([chunk])))
            if task.target_partition == 1 and shared and chunk is not None:
                raise StuckProducerError("send_offsets_to_transaction did not return")
        result.produced = len(rows)
        result.selected = rows[-1][0] if rows else -1  # the last position: the whole share was given
        return result

    monkeypatch.setattr(task_module, "_producer_path", lambda task: (run, "fake"))
    results = task_module.restore_bundle(bundle)
    assert [r.target_partition for r in results] == [0, 1, 2]
    for result in results:
        expected = _rows(routed_chunks(repartition, readers, result.target_partition))
        assert (result.produced, result.selected) == (len(expected), expected[-1][0])
    assert sorted(attempts) == [(0, True), (1, False), (1, True), (2, True)]  # target 1 read again on its own


def test_a_repartitioned_topics_targets_share_a_task_only_on_the_native_edge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spark_kafka_backup.restore.job import BUNDLE_TARGETS, bundle_size, bundles_of
    from spark_kafka_backup.restore.partition_task import PartitionTask

    spread = Repartition(ROUND_ROBIN, 20, (Source(0, Window()),))

    def task(topic: str, target: int, repartition: Repartition | None) -> PartitionTask:
        return PartitionTask(str(tmp_path), topic, -1 if repartition else target, topic, target, Window(), "id", 0, 0,
                             0, None, {}, {}, 1 << 20, repartition=repartition)  # fmt: skip

    tasks = [task("a", 0, None), *[task("s", p, spread) for p in range(20)], task("a", 1, None)]
    shapes = [[(t.target_topic, t.target_partition) for t in bundle] for bundle in bundles_of(tasks, 16)]
    assert shapes == [[("a", 0)], [("s", p) for p in range(16)], [("s", p) for p in range(16, 20)], [("a", 1)]]
    assert [len(bundle) for bundle in bundles_of(tasks, 1)] == [1] * 22
    monkeypatch.setenv("KBACKUP_KAFKA_EDGE", "reference")  # confluent-kafka: a Python call per record
    assert bundle_size() == 1
    monkeypatch.setenv("KBACKUP_KAFKA_EDGE", "native")
    assert bundle_size() == BUNDLE_TARGETS  # built here (./dev setup)
