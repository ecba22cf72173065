"""KBACKUP_DUMP_STACKS_AFTER: a task that runs too long says where it is; one that ends in time says nothing."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import time
from spark_kafka_backup.spark.stack_dumps import stacks_if_slow
def waiting_for_the_broker():
    time.sleep({seconds})
with stacks_if_slow():
    waiting_for_the_broker()
"""


def run(seconds: float, after: str | None) -> str:
    env = {"PATH": "/usr/bin:/bin"}
    if after is not None:
        env["KBACKUP_DUMP_STACKS_AFTER"] = after
    done = subprocess.run([sys.executable, "-c", SCRIPT.format(seconds=seconds)], capture_output=True, text=True,
                          env=env, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_a_slow_task_prints_its_stack_repeatedly() -> None:
    printed = run(1.3, "0.5")
    assert printed.count("in waiting_for_the_broker") == 2  # at 0.5 s and 1.0 s, then the task ended


def test_nothing_when_the_task_ends_in_time_or_it_is_not_asked() -> None:
    assert run(0.2, "5") == ""
    assert run(0.6, None) == ""
    assert run(0.6, "not-a-number") == ""
