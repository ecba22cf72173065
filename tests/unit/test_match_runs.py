"""``restore --where``'s runs of matching records, without Spark: the flags of a task's rows, in batches cut anywhere,
give runs that select exactly the flagged records."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_kafka_backup.datasource.match_runs import matched_runs
from spark_kafka_backup.partition.selection import MatchedRuns, Window


def _batches(partition: int, offsets: list[int], flags: list[bool | None], cuts: list[int]) -> list[pa.RecordBatch]:
    bounds = sorted({0, len(offsets), *[c for c in cuts if 0 < c < len(offsets)]})
    return [
        pa.RecordBatch.from_pydict({
            "topic": ["t"] * (b - a), "partition": pa.array([partition] * (b - a), pa.int32()),
            "offset": pa.array(offsets[a:b], pa.int64()), "matched": pa.array(flags[a:b], pa.bool_()),
        })
        for a, b in itertools.pairwise(bounds)
    ]  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4), st.sampled_from([True, False, None])), max_size=60),
       st.lists(st.integers(0, 60), max_size=6))  # fmt: skip
def test_runs_select_exactly_the_matching_records(rows: list[tuple[int, bool | None]], cuts: list[int]) -> None:
    offsets = np.cumsum([gap for gap, _ in rows]).tolist()  # increasing, with gaps
    flags = [flag for _, flag in rows]
    found = [run for batch in matched_runs(iter(_batches(3, offsets, flags, cuts))) for run in batch.to_pylist()]
    assert all((run["topic"], run["partition"]) == ("t", 3) for run in found)
    runs = MatchedRuns.of([(run["first"], run["last"]) for run in found])
    chosen = runs.holds(np.array(offsets, dtype=np.int64)).tolist()
    assert chosen == [flag is True for flag in flags]  # null: not matched
    assert sum(run["records"] for run in found) == sum(flag is True for flag in flags)
    # Runs are maximal: between two runs lies a record that did not match.
    for before, after in itertools.pairwise(found):
        assert any(before["last"] < o < after["first"] for o, f in zip(offsets, flags, strict=True) if f is not True)


def test_a_window_with_matches_selects_only_them_and_names_the_predicate() -> None:
    from spark_kafka_backup.format.record import Record

    runs = MatchedRuns.of([(10, 12), (20, 20)], "key = 'a'")
    window = Window(from_offset=11, matched=runs)
    assert window.by_records and not window.by_time
    picked = [o for o in range(0, 25) if window.selects(Record(o, 0, 1, None, None, ()))]
    assert picked == [11, 12, 20]
    assert runs == MatchedRuns.of([(20, 20), (10, 12)], "key = 'a'") and 13 not in runs and 20 in runs
    assert not MatchedRuns.of([]).holds(np.array([1, 2], dtype=np.int64)).any()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 400), st.integers(0, 30)), max_size=8),
       st.one_of(st.none(), st.integers(0, 400)), st.one_of(st.none(), st.integers(0, 400)),
       st.one_of(st.none(), st.integers(0, 420)))  # fmt: skip
def test_counting_and_finding_matches_from_the_indexes_agrees_with_reading_the_records(
    spans: list[tuple[int, int]], low: int | None, high: int | None, below: int | None
) -> None:
    import tempfile
    from pathlib import Path

    from spark_kafka_backup.format.record import Record
    from spark_kafka_backup.partition.reader import PartitionReader
    from spark_kafka_backup.partition.selection import count_selected, nth_selected, selected_records
    from spark_kafka_backup.partition.writer import PartitionWriter

    with tempfile.TemporaryDirectory() as directory:
        with PartitionWriter(Path(directory) / "t", "t", 0, max_segment_size=600, fsync=False) as writer:
            for offset in range(0, 400, 3):
                writer.append(Record(offset, 0, offset % 7, b"k", b"v%d" % offset, ()))
        reader = PartitionReader(Path(directory) / "t", 0)
        window = Window(low, high, matched=MatchedRuns.of([(a, a + n) for a, n in spans]))
        reference = [r for r in reader.records() if window.selects(r)]
        assert [r.offset for r in selected_records(reader, window)] == [r.offset for r in reference]
        assert count_selected(reader, window) == len(reference)
        assert count_selected(reader, window, below=below) == sum(
            1 for r in reference if below is None or r.offset < below
        )
        for n in {0, len(reference) // 2, max(len(reference) - 1, 0), len(reference)}:
            assert nth_selected(reader, window, n) == (reference[n] if 0 <= n < len(reference) else None)
        # With a time window too: counted on the columns, the records read.
        timed = Window(low, high, from_time=3, matched=window.matched)
        in_time = [r for r in reader.records() if timed.selects(r)]
        assert [r.offset for r in selected_records(reader, timed)] == [r.offset for r in in_time]
        assert count_selected(reader, timed, below=below) == sum(
            1 for r in in_time if below is None or r.offset < below
        )


def test_flags_out_of_offset_order_are_refused_never_a_run_over_them() -> None:
    import pytest

    from spark_kafka_backup.errors import SparkKafkaBackupError

    shuffled = _batches(0, [5, 100, 7], [True, True, False], [])
    with pytest.raises(SparkKafkaBackupError, match="partition 0 reached the matching out of offset order"):
        list(matched_runs(iter(shuffled)))
    back_and_forth = [*_batches(0, [1, 2], [True, True], []), *_batches(1, [1], [True], []),
                      *_batches(0, [3], [True], [])]  # fmt: skip
    with pytest.raises(SparkKafkaBackupError, match="out of offset order"):
        list(matched_runs(iter(back_and_forth)))


def test_runs_are_cut_around_offsets_left_out() -> None:
    runs = MatchedRuns.of([(0, 11), (20, 30)], "w")
    cut = runs.without([(3, 9), (25, None)])
    assert list(zip(cut.firsts.tolist(), cut.lasts.tolist(), strict=True)) == [(0, 2), (10, 11), (20, 24)]
    assert cut.where == "w" and MatchedRuns.of([(1, 2)], "a") != MatchedRuns.of([(1, 2)], "b")
