"""A standby follower's pure parts: its hold on the backup (and prune keeping to it), its lag, its options."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from spark_kafka_backup.catalog.holds import Hold, live_holds, read_holds, write_hold
from spark_kafka_backup.catalog.ledger import CatalogLedger
from spark_kafka_backup.catalog.offset_history import HistoryEntry, HistoryTail, append_round, history_file
from spark_kafka_backup.catalog.prune import plan_prune
from spark_kafka_backup.errors import FormatError, UsageError
from spark_kafka_backup.format.record import Record
from spark_kafka_backup.partition.writer import PartitionWriter
from spark_kafka_backup.restore.settings import parse_restore_args
from spark_kafka_backup.restore.standby_lag import (
    CatalogedEnd,
    RoundLag,
    cataloged_end,
    lag_samples,
    partition_lag,
    worst,
)

NOW = int(time.time() * 1000)
OLD = NOW - 10 * 86_400_000


def old_backup(root: Path) -> None:
    """Topic 't' partition 0: 40 records, 10 days old, in small cataloged segments."""
    with PartitionWriter(root / "t", "t", 0, max_segment_size=300, fsync=False, ledger=CatalogLedger(root)) as writer:
        for i in range(40):
            writer.append(Record(i, 0, OLD + i, b"k%d" % i, b"v" * 40))


def hold(next_offsets: dict[tuple[str, int], int], *, updated_at: int | None = None, expires: float = 3600) -> Hold:
    """East's hold, renewed now unless ``updated_at`` says when."""
    when = int(time.time() * 1000) if updated_at is None else updated_at
    return Hold("east", "host-a", 42, when, expires, next_offsets)


def test_a_hold_is_written_and_read_back_whole_and_expires_when_not_renewed(tmp_path: Path) -> None:
    write_hold(tmp_path, hold({("t", 0): 17, ("other.topic", 3): 5}))
    write_hold(tmp_path, Hold("north", "host-c", 9, int(time.time() * 1000), 3600, {}, topics=("t", "u")))
    write_hold(tmp_path, Hold("south", "host-d", 9, int(time.time() * 1000), 3600, {}, pattern="orders-.*"))
    write_hold(tmp_path, Hold("west", "host-b", 7, NOW - 7200_000, 3600, {}))
    found = {h.name: h for h in read_holds(tmp_path)}
    assert found["east"].next == {("t", 0): 17, ("other.topic", 3): 5}
    live, expired = live_holds(tmp_path)
    assert [h.name for h in live] == ["east", "north", "south"] and [h.name for h in expired] == ["west"]
    assert found["north"].topics == ("t", "u") and found["south"].pattern == "orders-.*"
    assert found["north"].needs_from("v", 0) is None and found["south"].needs_from("orders-1", 2) == 0
    assert found["east"].needs_from("t", 0) == 17
    assert found["east"].needs_from("t", 1) == 0  # a partition it has not reached: held whole


def test_a_damaged_hold_is_an_error_naming_its_file_never_taken_as_none(tmp_path: Path) -> None:
    write_hold(tmp_path, hold({}))
    path = tmp_path / "kbackup~state" / "followers" / "east.json"
    path.write_text('{"v": 1, "name": "east"}')
    with pytest.raises(FormatError, match=r"east\.json: not a follower hold"):
        read_holds(tmp_path)


def test_prune_keeps_every_segment_a_live_hold_needs_and_nothing_for_an_expired_one(tmp_path: Path) -> None:
    old_backup(tmp_path)
    cutoff = NOW - 86_400_000
    unheld, _ = plan_prune(tmp_path, ["t"], cutoff_ms=cutoff, keep_checkpoints=None, holds=[])
    assert len(unheld) >= 5
    held, _ = plan_prune(tmp_path, ["t"], cutoff_ms=cutoff, keep_checkpoints=None, holds=[hold({("t", 0): 12})])
    assert held and all((item.entry.last_offset or 0) < 12 for item in held)
    assert len(held) < len(unheld)
    # Read from the backup: the live one counts, the expired one does not.
    write_hold(tmp_path, hold({("t", 0): 12}))
    assert plan_prune(tmp_path, ["t"], cutoff_ms=cutoff, keep_checkpoints=None)[0] == held
    write_hold(tmp_path, hold({("t", 0): 12}, updated_at=NOW - 7200_000, expires=60))
    assert plan_prune(tmp_path, ["t"], cutoff_ms=cutoff, keep_checkpoints=None)[0] == unheld
    write_hold(tmp_path, hold({}))  # reached no partition yet: holds them whole
    assert plan_prune(tmp_path, ["t"], cutoff_ms=cutoff, keep_checkpoints=None)[0] == []
    # A follower of other topics holds nothing of this one, by list or by regex.
    other = Hold("west", "host-b", 7, NOW, 3600, {}, topics=("orders",))
    assert plan_prune(tmp_path, ["t"], cutoff_ms=cutoff, keep_checkpoints=None, holds=[other])[0] == unheld
    by_pattern = Hold("west", "host-b", 7, NOW, 3600, {}, pattern="orders.*")
    assert plan_prune(tmp_path, ["t"], cutoff_ms=cutoff, keep_checkpoints=None, holds=[by_pattern])[0] == unheld
    assert Hold("west", "host-b", 7, NOW, 3600, {}, pattern="t|u").needs_from("t", 0) == 0


def test_the_committed_end_and_the_newest_time_held_come_from_the_catalog(tmp_path: Path) -> None:
    old_backup(tmp_path)
    end = cataloged_end(tmp_path, "t", 0)
    assert end.next == 40
    assert end.newest_time_below(40) == OLD + 39
    assert end.newest_time_below(0) is None
    first_last = end.pieces[0][0]
    assert end.newest_time_below(first_last + 1) == OLD + first_last  # the first piece wholly held
    assert end.newest_time_below(first_last) is None  # not wholly: its newest time is not known to be held


def test_lag_is_what_the_standby_lacks_and_the_age_of_what_it_holds() -> None:
    end = CatalogedEnd(100, ((49, 5_000), (99, 9_000)))
    caught_up = partition_lag("t", 0, end, backlog=30, restored_next=100, records_behind=0)
    behind = partition_lag("t", 1, end, backlog=80, restored_next=50, records_behind=42)
    empty = partition_lag("t", 2, end, backlog=100, restored_next=None, records_behind=97)
    assert (caught_up.records_behind, behind.records_behind, empty.records_behind) == (0, 42, 97)
    assert caught_up.seconds_behind(19_000) == 10.0 and behind.seconds_behind(19_000) == 14.0
    assert empty.seconds_behind(19_000) is None
    assert worst([caught_up, behind, empty], 19_000) == (14.0, "t/1")
    samples = lag_samples({("t", 0): caught_up, ("t", 1): behind}, 19_000, passes=3, last_pass_at=18.0,
                          pass_seconds=1.5, frozen=False, up=True)  # fmt: skip
    by_name = {(s.name, s.labels.get("partition")): s.value for s in samples}
    assert by_name[("kbackup_standby_records_behind_backup", "1")] == 42
    assert by_name[("kbackup_standby_backlog_records", "1")] == 80
    assert by_name[("kbackup_standby_seconds_behind_source", "0")] == 10.0
    assert by_name[("kbackup_standby_passes_total", None)] == 3


BASE = ["--bootstrap-server", "localhost:9092", "--source-dir", "/backup"]


def test_follow_options_are_parsed_and_checked() -> None:
    settings = parse_restore_args([*BASE, "--follow", "--follow-interval", "5", "--until", "3",
                                   "--follower-name", "dr-site"])  # fmt: skip
    following = settings.following
    assert following is not None
    assert (following.failover, following.interval, following.until_checkpoint, following.name) == (
        False, 5.0, 3, "dr-site"
    )  # fmt: skip
    failover = parse_restore_args([*BASE, "--failover", "--until", "2026-12-01T00:00:00Z"]).following
    assert failover is not None and failover.failover and failover.until_time == 1_796_083_200_000
    assert parse_restore_args(BASE).following is None


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--until", "3"], "--until goes with --follow or --failover"),
        (["--follow", "--failover"], "--follow and --failover are two steps"),
        (["--follow", "--where", "key = 'a'"], "--where does not go with --follow"),
        (["--failover", "--checkpoint", "2"], "--checkpoint does not go with --failover"),
        (["--follow", "--repartition", "murmur2"], "--repartition does not go with --follow"),
        (["--follow", "--follower-name", "a/b"], "--follower-name takes 1 to 120 letters"),
        (["--follow", "--until", "yesterday"], "--until"),
    ],
)
def test_follow_options_that_cannot_hold_are_refused_in_one_line(extra: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_restore_args([*BASE, *extra])


def test_a_follow_interval_must_be_a_positive_number_of_seconds(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_restore_args([*BASE, "--follow", "--follow-interval", "0"])
    assert "expected a positive number of seconds" in capsys.readouterr().err


def test_the_history_tail_gives_each_round_once_as_the_backup_appends_and_reads_on_after_a_torn_append(
    tmp_path: Path,
) -> None:
    day = 86_400_000
    append_round(tmp_path, NOW - 3 * day, {"g": {("t", 0): 1}})  # before the follower's window: never given
    append_round(tmp_path, NOW - 1000, {"g": {("t", 0): 5}, "h": {("t", 1): 2}})
    tail = HistoryTail(tmp_path, NOW - 2 * day)
    assert [(e.round_time, e.group, e.offset) for e in tail.entries()] == [
        (NOW - 1000, "g", 5),
        (NOW - 1000, "h", 2),
    ]
    assert list(tail.entries()) == []  # nothing new: nothing given again
    append_round(tmp_path, NOW, {"g": {("t", 0): 9}})
    assert [(e.round_time, e.offset) for e in tail.entries()] == [(NOW, 9)]
    # A crash tears the next append: the torn block is not given (nor is one cut inside its length fields, which
    # fastavro reads as an IndexError), and the next append (which cuts it, rewriting the file with a new header)
    # gives only rounds not given before.
    path = history_file(tmp_path, NOW)
    assert isinstance(path, Path)  # a local backup's file
    whole = path.read_bytes()
    append_round(tmp_path, NOW + 1, {"g": {("t", 0): 10}})
    for torn in (2, 20):
        path.write_bytes(path.read_bytes()[: len(whole) + torn])
        assert list(tail.entries()) == []
    append_round(tmp_path, NOW + 2, {"g": {("t", 0): 11}})
    assert [(e.round_time, e.offset) for e in tail.entries()] == [(NOW + 2, 11)]


def test_a_round_is_one_block_so_a_reader_never_sees_part_of_one(tmp_path: Path) -> None:
    import fastavro

    groups = {f"group-{g}": {("t", p): 1000 + p for p in range(50)} for g in range(40)}  # 2,000 entries, ~60 KB
    append_round(tmp_path, NOW, groups)
    append_round(tmp_path, NOW + 1, groups)
    with open(str(history_file(tmp_path, NOW)), "rb") as handle:
        assert [block.num_records for block in fastavro.block_reader(handle)] == [2000, 2000]


def test_the_history_tail_of_an_object_store_reads_only_new_objects_listed_by_day(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On an object store each round is an object; the tail lists them by their day's prefix (a store lists a prefix,
    not the folder's every object) and reads each once. A stand-in store over a directory (pure logic)."""
    from spark_kafka_backup.catalog import offset_history
    from spark_kafka_backup.storage import ObjectPath

    listed: list[str] = []
    folder = tmp_path / "history"
    folder.mkdir()

    class Store:
        def list_files(self, directory: object, *, starting_with: str = "") -> list[str] | None:
            listed.append(starting_with)
            return [path.name for path in folder.glob(f"{starting_with}*")] or None

    def read(path: ObjectPath) -> tuple[list[dict[str, object]], bool]:
        at = int(path.name[len("offsets-YYYY-MM-DD-") : -len(".avro")])
        return [{"roundTimeMs": at, "group": "g", "topic": "t", "partition": 0, "offset": 1}], False

    monkeypatch.setattr(offset_history, "storage_for", lambda location: Store())
    monkeypatch.setattr(offset_history, "history_dir", lambda root: root / "kbackup~state" / "offsets-history")
    monkeypatch.setattr(offset_history, "_read_file", read)
    root = ObjectPath("s3", "bucket", "backup")
    for at in (NOW - 86_400_000, NOW - 2000, NOW - 1000):
        (folder / offset_history.history_file(root, at).name).touch()
    tail = HistoryTail(root, NOW - 3600_000, first_objects=1)
    assert [e.round_time for e in tail.entries()] == [NOW - 1000]  # the newest one only, at the first look
    (folder / offset_history.history_file(root, NOW).name).touch()
    assert [e.round_time for e in tail.entries()] == [NOW]
    assert list(tail.entries()) == []
    assert f"offsets-{offset_history._day(NOW)}" in listed
    assert all(re.fullmatch(r"offsets-\d{4}-\d{2}-\d{2}", prefix) for prefix in listed)  # never the whole folder


def test_lag_by_offset_rounds_is_the_newest_round_whose_group_offsets_the_standby_holds_records_below() -> None:
    def entry(at: int, group: str, partition: int, offset: int) -> HistoryEntry:
        return HistoryEntry(at, group, "t", partition, offset)

    lag = RoundLag()
    lag.add([entry(1000, "g", 0, 10), entry(1000, "h", 1, 4)])
    lag.add([entry(2000, "g", 0, 20), entry(2000, "h", 1, 4), entry(2000, "h", 0, 12)])
    lag.add([entry(3000, "g", 0, 31), entry(3000, "other", 7, 99)])  # partition 7 is not followed
    # The backup holds every offset of partition 0 but 30 (a transaction's commit marker).
    backup = {("t", 0): set(range(30)) | {31, 32}, ("t", 1): set(range(10))}
    looked: list[tuple[tuple[str, int], int]] = []
    counted: list[tuple[tuple[str, int], int, int]] = []

    def first_from(key: tuple[str, int], start: int) -> int | None:
        looked.append((key, start))
        return min((offset for offset in backup[key] if offset >= start), default=None)

    def missing(key: tuple[str, int], start: int, end: int) -> int:
        counted.append((key, start, end))
        return len([offset for offset in backup[key] if start <= offset < end])

    behind = lag.behind({("t", 0): 15, ("t", 1): None}, first_from, missing)
    assert (behind.newest, behind.covered, behind.rounds) == (3000, None, 3)
    assert behind.at_least == 1000 and behind.seconds(5000) == 4.0  # a lower bound: not even the first is covered
    assert behind.records == {("t", 0): 15}  # 15..29 held by the backup below 31 (30 is not), not on the standby
    # One look a partition and one count for the newest round, however many rounds are judged.
    assert sorted(looked) == [(("t", 0), 15), (("t", 1), 0)] and counted == [(("t", 0), 15, 31)]
    assert lag.behind({("t", 0): 15, ("t", 1): 4}, first_from, missing).covered == 1000
    covered = lag.behind({("t", 0): 20, ("t", 1): 4}, first_from, missing)
    assert (covered.covered, covered.rounds, covered.seconds(5000)) == (2000, 1, 3.0)
    # At 30 the only offset below 31 it lacks is the marker: the newest round is covered, though 30 < 31.
    looked.clear()
    counted.clear()
    done = lag.behind({("t", 0): 30, ("t", 1): 4}, first_from, missing)
    assert (done.covered, done.rounds, done.records) == (3000, 0, {("t", 0): 0})
    assert looked == [(("t", 0), 30)] and counted == []
    # Older rounds are let go once a newer one is covered; a round older than those kept is never taken back in.
    lag.add([entry(500, "g", 0, 99)])
    assert [time for time, _ in lag.rounds] == [3000]


def test_rounds_kept_are_bounded_and_an_uncovered_standby_is_said_at_least_that_far_behind() -> None:
    lag = RoundLag(keep=3)
    lag.add(HistoryEntry(at, "g", "t", 0, at) for at in range(1000, 11000, 1000))
    assert [time for time, _ in lag.rounds] == [8000, 9000, 10000]
    behind = lag.behind({("t", 0): 0}, lambda key, start: start, lambda key, start, end: end - start)
    assert (behind.covered, behind.at_least, behind.seconds(12000)) == (None, 8000, 4.0)


def test_round_lag_is_exported_only_for_a_backup_with_rounds() -> None:
    lag = RoundLag()
    none = lag.behind({("t", 0): 3}, lambda key, start: None, lambda key, start, end: 0)
    names = {sample.name for sample in lag_samples({}, NOW, passes=1, last_pass_at=None, pass_seconds=None,
                                                   frozen=False, up=True, rounds=none)}  # fmt: skip
    assert not any("round" in name for name in names)
    lag.add([HistoryEntry(NOW - 5000, "g", "t", 0, 3)])
    rounds = lag.behind({("t", 0): 3}, lambda key, start: None, lambda key, start, end: 0)
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for s in lag_samples({}, NOW, passes=1, last_pass_at=None, pass_seconds=None, frozen=False, up=True,
                                    rounds=rounds)}  # fmt: skip
    assert samples[("kbackup_standby_round_seconds_behind", ())] == 5.0
    assert samples[("kbackup_standby_rounds_behind", ())] == 0
    assert samples[("kbackup_standby_records_behind_round", (("partition", "0"), ("topic", "t")))] == 0


def test_counting_a_window_opens_only_the_segments_that_may_hold_it(tmp_path: Path) -> None:
    """A follower's pass counts what the backup added since the standby's position: the indexes of the segments
    below it are not opened (on an object store, a request or more each, at every pass)."""
    from spark_kafka_backup.partition.reader import PartitionReader
    from spark_kafka_backup.partition.selection import Window, count_selected

    old_backup(tmp_path)  # 40 records in small segments
    reader = PartitionReader(tmp_path / "t", 0)
    assert len(reader.segments) > 4
    assert count_selected(reader, Window(from_offset=30, to_offset=39)) == 10
    starts = [segment.start_offset for segment in reader.segments]
    for segment in reader.segments:
        if segment.start_offset < 30 and starts[starts.index(segment.start_offset) + 1] <= 30:
            index = reader.segment_paths(segment)[1]
            assert isinstance(index, Path)
            index.unlink()  # wholly below the window: must not be needed
    assert count_selected(reader, Window(from_offset=30, to_offset=39)) == 10
    assert count_selected(reader, Window(from_offset=30, to_offset=39), below=35) == 5
    assert count_selected(reader, Window(from_offset=40, to_offset=39)) == 0
