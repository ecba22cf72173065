"""Consumer group offsets read in a child process: a crash of the Kafka client there is one transient failure of an
offset round, not the end of the job (spark_kafka_backup/kafka/isolated_groups.py). Real child processes; no broker.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from spark_kafka_backup.errors import ClusterError
from spark_kafka_backup.kafka import isolated_groups
from spark_kafka_backup.kafka.admin_session import AdminSession, GroupReaderError
from spark_kafka_backup.kafka.isolated_groups import IsolatedGroupOffsets

#: A stand-in child speaking the protocol: ready, then for each request ``BEHAVIOUR`` (formatted in).
CHILD = """
import os, sys, time
from spark_kafka_backup.kafka.isolated_groups import _read_frame, _write_frame
answers = int(sys.argv[-1])
_read_frame(sys.stdin.buffer)
_write_frame(answers, ("ready", None))
while True:
    _read_frame(sys.stdin.buffer)
{behaviour}
"""


def child(behaviour: str) -> list[str]:
    return [sys.executable, "-c", CHILD.format(behaviour="\n".join("    " + line for line in behaviour.splitlines()))]


def test_answers_come_back_from_one_child_through_progress_lines() -> None:
    reader = IsolatedGroupOffsets({}, command=child(
        "_write_frame(answers, ('progress', None))\n_write_frame(answers, ('ok', ({'g': {('t', 0): 5}}, True)))"
    ))  # fmt: skip
    try:
        assert reader(timeout=1) == ({"g": {("t", 0): 5}}, True)
        assert reader(timeout=1) == ({"g": {("t", 0): 5}}, True)
        assert reader.children_started == 1
    finally:
        reader.close()


@pytest.mark.parametrize(
    ("behaviour", "said"),
    [
        ("os.abort()", "died of SIGABRT"),  # librdkafka's failed assertion (issue #3663)
        ("os.kill(os.getpid(), 11)", "died of SIGSEGV"),  # its NULL dereference (issue #5040)
        ("os.write(answers, b'WARN: not a frame at all')", "sent what it should not"),
        ("print('a library printing'); sys.stdout.flush(); os.write(answers, b'\\x00\\x00')\ntime.sleep(60)",
         "gave no answer in time"),
    ],
)  # fmt: skip
def test_a_child_that_fails_is_one_transient_failure_and_the_next_call_starts_another(
    behaviour: str, said: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(isolated_groups, "QUIET_GRACE_SECONDS", 1.0)
    reader = IsolatedGroupOffsets({}, command=child(behaviour))
    for started in (1, 2):
        with pytest.raises(GroupReaderError, match=said) as raised:
            reader(timeout=0.5)
        assert raised.value.transient
        assert reader.children_started == started
    reader.close()
    with pytest.raises(GroupReaderError, match="no longer read"):
        reader(timeout=0.5)
    assert reader.children_started == 2


def test_a_child_whose_answers_leave_groups_out_for_a_minute_is_replaced_by_one_with_a_new_client(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A whole cluster restarted under a continuous backup (tests/test_broker_failures.py): a client whose connection
    to one node stays broken would leave that node's groups out of every round; after INCOMPLETE_SECONDS of
    incomplete listings a new child (a new client) reads them, and the log says why."""
    monkeypatch.setattr(isolated_groups, "INCOMPLETE_SECONDS", 0.5)
    reader = IsolatedGroupOffsets({}, command=child("_write_frame(answers, ('ok', ({}, False)))"))
    caplog.set_level("WARNING", logger="spark_kafka_backup.kafka")
    try:
        assert reader(timeout=1) == ({}, False)
        assert reader(timeout=1) == ({}, False)
        assert reader.children_started == 1  # a node missing for a moment (one restarting) is not a reason
        time.sleep(0.6)
        assert reader(timeout=1) == ({}, False)  # answered, then this child is done
        assert reader(timeout=1) == ({}, False)
        assert reader.children_started == 2
        assert "has not answered the listing of groups" in caplog.text
    finally:
        reader.close()
    complete = IsolatedGroupOffsets({}, command=child("_write_frame(answers, ('ok', ({}, True)))"))
    try:
        for _ in range(3):
            complete(timeout=1)
            time.sleep(0.3)
        assert complete.children_started == 1
    finally:
        complete.close()


def test_a_child_that_cannot_start_is_said_once_not_asked_again(tmp_path: Path) -> None:
    reader = IsolatedGroupOffsets({}, command=[sys.executable, "-c", "import sys; sys.exit(3)"])
    with pytest.raises(GroupReaderError, match=r"could not start \(exit 3") as raised:
        reader(timeout=1)
    assert not raised.value.transient


def test_the_child_failing_does_not_replace_the_drivers_admin_client() -> None:
    """A session's client is replaced when *it* fails; a failure in the reader's own process leaves it."""
    made: list[str] = []

    def factory(settings: object) -> str:
        made.append(f"client-{len(made) + 1}")
        return made[-1]

    session = AdminSession({}, factory=factory, patience=0)
    with pytest.raises(GroupReaderError):
        session.call(lambda admin, timeout: (_ for _ in ()).throw(GroupReaderError("died", transient=True)))
    assert session.client == "client-1" and len(made) == 1
    with pytest.raises(ClusterError):
        session.call(lambda admin, timeout: (_ for _ in ()).throw(ClusterError("stale", transient=True)))
    assert session.client == "client-2"


def test_the_real_child_started_from_anywhere_answers_and_lives_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The child as a backup runs it, from a directory holding a module named like one it imports (``-P``: the
    working directory is not on its path) and without PYTHONPATH (it is given the driver's sys.path). A listing no
    node answered is incomplete, never "no groups" (so --prune-groups deletes nothing)."""
    (tmp_path / "confluent_kafka.py").write_text("raise SystemExit('the wrong confluent_kafka was imported')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    reader = IsolatedGroupOffsets({"bootstrap.servers": "127.0.0.1:1", "log_level": "0"})
    try:
        assert reader(timeout=1) == ({}, False)
        assert reader(timeout=1) == ({}, False)
        assert reader.children_started == 1
        assert os.getcwd() == str(tmp_path)
    finally:
        reader.close()
