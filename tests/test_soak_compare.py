"""The soak benchmark's verdict (benchmarks/soak/compare.py): a restore is a contiguous run of what the source held,
ending where asked, starting no later than needed; groups read the same next record. And its memory figures: slopes,
a JVM's heap from its performance data."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from benchmarks.soak.compare import compare
from benchmarks.soak.figures import floor_slope_per_hour, slope_per_hour
from benchmarks.soak.jvm_heap import counters
from benchmarks.soak.shadow import Truth, record_name

KEY = ("t", 0)
# Offsets 0..19 at the source; 5 and 6 are a transaction's marker and an aborted record (not in the truth).
TRUTH: Truth = {KEY: {o: b"t:%d" % o for o in range(20) if o not in (5, 6)}}


def _restored(offsets: list[int]) -> dict[tuple[str, int], list[tuple[int, bytes]]]:
    return {KEY: [(n, b"t:%d" % o) for n, o in enumerate(offsets)]}


def test_a_contiguous_run_from_the_need_to_the_cut_is_exact() -> None:
    run = [3, 4, 7, 8, 9]
    result = compare("c", TRUTH, _restored(run), ends={KEY: 10}, needed_from={KEY: 4}, source_groups={},
                     restored_groups={})  # fmt: skip
    assert result.exact, result.problems
    assert (result.records, result.pruned) == (5, 3)


def test_a_hole_a_copy_a_late_start_a_record_past_the_cut_are_each_found() -> None:
    def verdict(run: list[int], need: int = 0) -> tuple[int, int, int]:
        r = compare("c", TRUTH, _restored(run), ends={KEY: 10}, needed_from={KEY: need}, source_groups={},
                    restored_groups={})  # fmt: skip
        assert not r.exact
        return r.missing, r.duplicates, r.foreign

    assert verdict([0, 1, 2, 4, 7, 8, 9]) == (1, 0, 0)  # 3 lost
    assert verdict([0, 1, 2, 3, 3, 4, 7, 8, 9])[1] == 1
    assert verdict([4, 7, 8, 9], need=2) == (2, 0, 0)  # 2 and 3 were still needed
    assert verdict([0, 1, 2, 3, 4, 7, 8, 9, 10])[2] == 1  # 10 is past the cut
    assert verdict([0, 1, 2, 3, 4, 7, 8])[0] == 1  # stops short of the cut


def test_a_group_must_read_the_same_next_record() -> None:
    run = list(TRUTH[KEY])
    groups = {"g": {KEY: 5}}  # committed on the marker: the next record is 7
    right = compare("latest", TRUTH, _restored(run), ends=None, needed_from={}, source_groups=groups,
                    restored_groups={"g": {KEY: run.index(7)}})  # fmt: skip
    assert right.exact and right.groups_checked == 1
    wrong = compare("latest", TRUTH, _restored(run), ends=None, needed_from={}, source_groups=groups,
                    restored_groups={"g": {KEY: run.index(8)}})  # fmt: skip
    assert wrong.groups_wrong == 1


def test_a_group_past_a_cuts_end_goes_on_at_the_restored_end() -> None:
    run = [0, 1, 2, 3, 4, 7, 8, 9]
    result = compare("c", TRUTH, _restored(run), ends={KEY: 10}, needed_from={KEY: 0},
                     source_groups={"g": {KEY: 12}}, restored_groups={"g": {KEY: len(run)}})  # fmt: skip
    assert result.exact and result.groups_checked == 1


def test_record_names_and_slopes() -> None:
    assert record_name(b"soak-01:42:......") == b"soak-01:42"
    assert slope_per_hour([0, 1800, 3600], [100, 110, 120]) == 20
    assert slope_per_hour([0, 1800, 3600], [100, 100, 100]) == 0


def test_the_floor_slope_follows_what_stays_after_each_collection() -> None:
    # A sawtooth rising 300 MiB within each 5 minutes and falling back to a floor that itself rises 10 MiB per 5 min.
    times = [float(t) for t in range(0, 3600, 10)]
    values = [100 + 10 * (t // 300) + (t % 300) for t in times]
    assert slope_per_hour(times, values) > 100
    assert floor_slope_per_hour(times, values) == pytest.approx(120, abs=1)
    assert floor_slope_per_hour(times, [500.0] * len(times)) == 0
    # A flat sawtooth over a part window at the end: still flat (only whole windows count); too short: no figure.
    flat = [float(t) for t in range(600, 3611, 10)]
    assert floor_slope_per_hour(flat, [100 + (t % 300) for t in flat]) == pytest.approx(0, abs=1)
    assert floor_slope_per_hour(flat[:80], [1.0] * 80) is None


def _perf_data(order: str, longs: dict[str, int]) -> bytes:
    """A JVM performance-data file with these long counters (layout of benchmarks/soak/jvm_heap.py)."""
    entries = b""
    for name, value in longs.items():
        encoded = name.encode() + b"\0"
        encoded += b"\0" * (-len(encoded) % 8)
        header = struct.calcsize(f"{order}iiiBBBBi")
        entry_length = header + len(encoded) + 8
        entries += struct.pack(f"{order}iiiBBBBi", entry_length, header, 0, ord("J"), 0, 0, 0, header + len(encoded))
        entries += encoded + struct.pack(f"{order}q", value)
    prologue = struct.Struct(f"{order}IBBBBiiqii")
    magic = 0xCAFEC0C0 if order == ">" else 0xC0C0FECA
    return prologue.pack(magic, 1 if order == "<" else 0, 2, 0, 1, 0, 0, 0, prologue.size, len(longs)) + entries


@pytest.mark.parametrize("order", ["<", ">"])
def test_a_jvm_heap_is_read_from_its_performance_data(tmp_path: Path, order: str) -> None:
    mib = 2**20
    path = tmp_path / "4242"
    path.write_bytes(_perf_data(order, {
        "sun.gc.generation.0.capacity": 64 * mib,
        "sun.gc.generation.0.space.0.used": 10 * mib,
        "sun.gc.generation.1.capacity": 256 * mib,
        "sun.gc.generation.1.space.0.used": 200 * mib,
        "sun.gc.generation.1.space.0.capacity": 256 * mib,
    }))  # fmt: skip
    found = counters(path)
    assert found["sun.gc.generation.1.space.0.used"] == 200 * mib
    assert found["sun.gc.generation.0.capacity"] == 64 * mib
    # Not a performance-data file, cut short, missing: nothing, no error.
    (tmp_path / "garbage").write_bytes(b"\0" * 100)
    assert counters(tmp_path / "garbage") == {}
    (tmp_path / "cut").write_bytes(path.read_bytes()[:60])
    assert len(counters(tmp_path / "cut")) < len(found)
    assert counters(tmp_path / "absent") == {}


def test_a_group_is_placed_no_earlier_than_the_backup_held_when_its_offset_was_first_read() -> None:
    from benchmarks.soak_bench import BackedUpPositions

    key, other = ("soak-02", 2), ("soak-01", 5)
    # A prune ending at t=100 let go of soak-02/2 below 2122; one ending at t=300 of 2122-2999. soak-01/5 was added
    # later and the backup has it from 40 only (never held below: not a prune's doing).
    positions = BackedUpPositions(
        [(100.0, {key: 0}, {key: 2122}), (300.0, {key: 2122, other: 40}, {key: 3000, other: 40})],
        {
            ("late", "soak-02", 2, 2000): 150.0,
            ("early", "soak-02", 2, 2000): 50.0,
            ("during", "soak-02", 2, 2000): 99.0,
            ("later", "soak-02", 2, 2500): 200.0,
            ("latest", "soak-02", 2, 2500): 400.0,
            ("new", "soak-01", 5, 10): 400.0,
        },
    )
    groups = {
        name: {key: offset}
        for name, offset in [
            ("late", 2000),
            ("early", 2000),
            ("during", 2000),
            ("later", 2500),
            ("latest", 2500),
            ("unknown", 10),
        ]
    }
    placed = positions.groups({**groups, "new": {other: 10}}, "latest")  # fmt: skip
    # First read after a prune that had let go of it: the backup can only place it at what it held.
    assert placed["late"][key] == 2122
    assert placed["latest"][key] == 3000
    # Read before any prune, or before the prune had ended (it may have seen it): held to it, as committed.
    assert placed["early"][key] == 2000
    assert placed["during"][key] == 2000
    # Read between the prunes, above what the first had left: as committed (the second had to keep it).
    assert placed["later"][key] == 2500
    # Never read by a stored round; below what the backup ever held of a partition: as committed (strict).
    assert placed["unknown"][key] == 10
    assert placed["new"][other] == 10
    assert len(positions.raised) == 2
    assert positions.raised[0].startswith("latest: late on soak-02/2 committed 2000, let go by a prune")


def test_a_damaged_or_strange_performance_data_file_gives_what_it_can_never_an_error(tmp_path: Path) -> None:
    import os

    good = _perf_data("<", {"sun.gc.generation.1.space.0.used": 7})
    header = struct.calcsize("<iiiBBBBi")
    prologue = good[:32]
    # An entry whose value would lie before the file's start, one whose name would, one longer than the file.
    for fields in [(40, header, 0, ord("J"), 0, 0, 0, -1000), (40, -30, 0, ord("J"), 0, 0, 0, header),
                   (1 << 30, header, 0, ord("J"), 0, 0, 0, header + 8)]:  # fmt: skip
        path = tmp_path / "bad"
        path.write_bytes(prologue + struct.pack("<iiiBBBBi", *fields) + b"abc\0" + b"\0" * 20)
        found = counters(path)
        assert all(name.startswith("sun.") or name == "abc" for name in found)
        assert found.get("abc", 0) == 0
    # A FIFO is not waited on; a link is not followed.
    os.mkfifo(tmp_path / "fifo")
    assert counters(tmp_path / "fifo") == {}
    (tmp_path / "real").write_bytes(good)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert counters(tmp_path / "real") == {"sun.gc.generation.1.space.0.used": 7}
    assert counters(tmp_path / "link") == {}


def test_a_jvms_native_memory_summary_is_read_by_category() -> None:
    from benchmarks.soak.native_memory import parse_summary

    # As `jcmd PID VM.native_memory summary` printed it for a JDK 17 started with -XX:NativeMemoryTracking=summary.
    found = parse_summary((Path(__file__).parent / "data" / "nmt-summary-jdk17.txt").read_text())
    assert found["Java Heap"] == 256.0
    assert found["Total"] == pytest.approx(344704 / 1024)
    assert found["Code"] == pytest.approx(7745 / 1024)
    assert found["Metaspace"] == pytest.approx(8230 / 1024)
    assert "Shared class space" in found
    # Tracking off: jcmd says so, nothing is made up.
    assert parse_summary("12345:\nNative memory tracking is not enabled\n") == {}
