"""Rate limits of the restore: how a whole-restore limit is shared out and kept (pure arithmetic, a fake clock)."""

from __future__ import annotations

import argparse

import pytest

from spark_kafka_backup.argtypes import byte_count
from spark_kafka_backup.restore.settings import parse_restore_args
from spark_kafka_backup.restore.throttle import Pace, Throttle


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_a_whole_restore_limit_is_split_between_the_tasks_that_run_at_once() -> None:
    whole = Throttle(records_per_second=1000, bytes_per_second=4096)
    assert whole.share(4) == Throttle(250, 1024)
    assert whole.share(0) == whole  # never divided by zero
    assert whole.share(4, per_partition_records=100) == Throttle(100, 1024)  # --max-rate caps each part
    assert Throttle(None, None).share(3, per_partition_records=50) == Throttle(50, None)
    assert not Throttle().limited and Throttle(bytes_per_second=1).limited


def test_pace_sleeps_until_the_slower_of_the_two_limits_allows_the_records() -> None:
    clock = FakeClock()
    pace = Pace(Throttle(records_per_second=100, bytes_per_second=1000), clock=clock, sleep=clock.sleep)
    pace.wait(50, 200, until=1e9)  # records bind: 0.5 s
    assert clock.slept == [pytest.approx(0.5)]
    pace.wait(60, 5000, until=1e9)  # bytes bind: 5 s from the start
    assert clock.now == pytest.approx(105.0)
    pace.wait(10, 10, until=1e9)  # already due: no sleep
    assert len(clock.slept) == 2


def test_pace_never_sleeps_past_the_open_transactions_commit_time() -> None:
    clock = FakeClock()
    pace = Pace(Throttle(records_per_second=10), clock=clock, sleep=clock.sleep)
    pace.wait(1000, 0, until=clock.now + 5)  # 100 s due, but the transaction must commit in 5 s
    assert clock.now == pytest.approx(105.0)
    pace.wait(1000, 0, until=clock.now + 5)  # after the commit it goes on sleeping towards the due time
    assert clock.now == pytest.approx(110.0)


@pytest.mark.parametrize(("text", "value"), [("1048576", 1 << 20), ("512K", 512 << 10), ("20M", 20 << 20),
                                             ("1g", 1 << 30), ("20MiB", 20 << 20), ("64KB", 64 << 10)])  # fmt: skip
def test_byte_counts_take_binary_units(text: str, value: int) -> None:
    assert byte_count(text) == value


@pytest.mark.parametrize("text", ["0", "-5M", "1.5M", "M", "", "10X"])
def test_a_bad_byte_count_names_what_is_expected(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="expected a byte count > 0 such as"):
        byte_count(text)


def test_the_flags_reach_the_settings() -> None:
    settings = parse_restore_args(["--bootstrap-server", "b:9092", "--source-dir", "/tmp/x",
                                   "--max-records-per-second", "5000", "--max-bytes-per-second", "10M",
                                   "--max-rate", "700"])  # fmt: skip
    assert settings.throttle == Throttle(5000, 10 << 20)
    assert settings.max_rate == 700


def test_time_spent_producing_nothing_is_not_saved_up_for_a_burst() -> None:
    clock = FakeClock()
    pace = Pace(Throttle(records_per_second=100), clock=clock, sleep=clock.sleep)
    clock.now += 600  # ten minutes skipping records already restored
    pace.wait(100, 0, until=1e9)  # one second of credit at most: 100 records go at once
    assert clock.slept == []
    pace.wait(300, 0, until=1e9)  # 100 more of the credit, then 100 records a second (without the cap: no sleep)
    assert clock.slept == [pytest.approx(1.0)]
    pace.wait(500, 0, until=1e9)
    assert clock.now == pytest.approx(703.0)
