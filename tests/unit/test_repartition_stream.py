"""The merged stream of a repartitioned restore (pure logic over real backup files, no broker)."""

from __future__ import annotations

from pathlib import Path

from spark_kafka_backup.format.record import Record
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.selection import Window
from spark_kafka_backup.partition.writer import PartitionWriter
from spark_kafka_backup.restore.plan import _pinned
from spark_kafka_backup.restore.repartition import ROUND_ROBIN, Repartition, Source, count_routed, routed_records


def _write(root: Path, partition: int, offsets: range) -> None:
    with PartitionWriter(root / "t", "t", partition, fsync=False) as writer:
        for offset in offsets:
            writer.append(Record(offset, 0, 1000 + offset * 10 + partition, None, b"p%do%d" % (partition, offset)))


def _plan(root: Path) -> tuple[Repartition, dict[int, PartitionReader]]:
    readers = {p: PartitionReader(root / "t", p) for p in (0, 1)}
    sources = tuple(Source(p, _pinned(readers[p], Window())) for p in (0, 1))
    return Repartition(ROUND_ROBIN, 2, sources), readers


def test_records_backed_up_after_the_plan_do_not_move_positions_and_change_the_identity(tmp_path: Path) -> None:
    """A position names one record on every run: the plan pins each partition's range; a backup that grew or was
    pruned since has another identity (the rerun is refused rather than producing a record twice or never)."""
    _write(tmp_path, 0, range(0, 10))
    _write(tmp_path, 1, range(0, 4))  # a lagging partition: its later records have timestamps among p0's
    plan, readers = _plan(tmp_path)
    before = {t: [r.value for _, _, r in routed_records(plan, readers, t)] for t in (0, 1)}
    assert count_routed(plan, readers)[0] == [7, 7]
    _write(tmp_path, 1, range(4, 10))
    readers = {p: PartitionReader(tmp_path / "t", p) for p in (0, 1)}
    assert {t: [r.value for _, _, r in routed_records(plan, readers, t)] for t in (0, 1)} == before
    grown, _ = _plan(tmp_path)
    assert grown.identity_part() != plan.identity_part()
    assert count_routed(grown, readers)[0] == [10, 10]


def test_an_empty_partition_selects_nothing(tmp_path: Path) -> None:
    _write(tmp_path, 0, range(0, 3))
    with PartitionWriter(tmp_path / "t", "t", 1, fsync=False) as writer:
        writer.ensure_segment(0)
    plan, readers = _plan(tmp_path)
    assert plan.sources[1].window.to_offset == -1
    values = [r.value or b"" for t in (0, 1) for _, _, r in routed_records(plan, readers, t)]
    assert sorted(values) == [b"p0o0", b"p0o1", b"p0o2"]
