"""One error boundary for the commands and the jobs: one line, exit codes, causes kept for ``--debug``."""

from __future__ import annotations

import ast
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any, NoReturn

import pytest

from spark_kafka_backup.backup.access import backup_permissions
from spark_kafka_backup.boundary import INTERRUPTED, exit_code
from spark_kafka_backup.cli import main
from spark_kafka_backup.errors import ClusterError, FormatError
from tests.conftest import VECTORS

PACKAGE = Path(__file__).resolve().parents[2] / "spark_kafka_backup"


def _reaching_caplog(monkeypatch: pytest.MonkeyPatch) -> None:
    """The package's records reach caplog (on the root logger) once, whatever an earlier test in this process did:
    the jobs' console logging stops their propagation."""
    logger = logging.getLogger("spark_kafka_backup")
    monkeypatch.setattr(logger, "propagate", True)
    monkeypatch.setattr(logger, "handlers", [])


def _raising(exc: BaseException) -> Any:
    def body() -> NoReturn:
        raise exc

    return body


@pytest.mark.parametrize(
    ("raised", "code", "line"),
    [
        (FormatError("not a v1 file", file="/b/t/x"), 1, "job: error: /b/t/x: not a v1 file"),
        (FileNotFoundError(2, "No such file or directory"), 1, "job: error: [Errno 2] No such file or directory"),
        (ValueError("bad thing\nmore"), 1, "job: error: ValueError: bad thing (--debug shows where)"),
        (KeyboardInterrupt(), INTERRUPTED, "job: error: interrupted (what was committed stays; run it again to go on)"),
    ],
)
def test_every_failure_is_one_line_and_an_exit_code(raised: BaseException, code: int, line: str) -> None:
    said: list[str] = []
    assert exit_code("job", _raising(raised), say=said.append) == code
    assert said == [line]


def test_a_success_says_nothing() -> None:
    said: list[str] = []
    assert exit_code("job", lambda: 0, say=said.append) == 0 and said == []


def test_debug_logs_the_traceback_with_the_chained_cause(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    _reaching_caplog(monkeypatch)

    def body() -> int:
        found: dict[str, int] = {}
        try:
            found["missing"]
        except KeyError as exc:
            raise FormatError("not a valid intent", file="/b/i.json") from exc
        return 0

    said: list[str] = []
    with caplog.at_level(logging.ERROR, logger="spark_kafka_backup"):
        assert exit_code("job", body, say=said.append, debug=True) == 1
    assert said == ["job: error: /b/i.json: not a valid intent"]
    (record,) = caplog.records
    assert record.exc_info is not None and isinstance(record.exc_info[1], FormatError)
    assert isinstance(record.exc_info[1].__cause__, KeyError)
    assert "The above exception was the direct cause" in caplog.text and "KeyError: 'missing'" in caplog.text


def test_a_corrupt_intent_reaches_the_cli_user_as_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _reaching_caplog(monkeypatch)
    import shutil

    root = tmp_path / "b"
    shutil.copytree(VECTORS / "backup", root)
    (root / "kbackup~state").mkdir()
    intent = root / "kbackup~state" / "merge-intent.json"
    intent.write_text("[]")
    assert main(["merge", str(root)]) == 1
    err = capsys.readouterr().err
    assert err.splitlines() == [f"spark-kafka-backup: error: {intent}: not a valid merge intent "
                                "(TypeError: list indices must be integers or slices, not str)"]  # fmt: skip
    for debug_first in (True, False):  # before the command or after it, as the jobs take it
        caplog.clear()
        arguments = ["--debug", "merge", str(root)] if debug_first else ["merge", str(root), "--debug"]
        with caplog.at_level(logging.ERROR, logger="spark_kafka_backup"):
            assert main(arguments) == 1
        assert "merge_intent.py" in caplog.text and "The above exception was the direct cause" in caplog.text


@pytest.mark.parametrize("job", ["backup", "restore"])
def test_debug_before_a_job_is_the_jobs_own(job: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``spark-kafka-backup --debug backup ...`` reaches the job (its --help here: nothing starts)."""
    assert main(["--debug", job, "--help"]) == 0
    assert capsys.readouterr().out.startswith(f"usage: spark-kafka-backup {job} ")


def test_a_spark_failure_is_named_by_the_error_raised_not_by_its_cause() -> None:
    """A task's traceback prints the causes first; the line names the outermost of our errors, never a private
    helper's."""
    from spark_kafka_backup.spark.failures import failure_cause

    trace = (
        "Traceback (most recent call last):\n"
        '  File "record.py", line 350, in _read_length\n'
        "spark_kafka_backup.format.record._BadLengthError: (20, -2147483647, 64, 'key')\n\n"
        "The above exception was the direct cause of the following exception:\n\n"
        "spark_kafka_backup.errors.InvalidRecordError: b/t/x_records at byte 21: invalid key length\n"
    )
    assert failure_cause(trace) == "InvalidRecordError: b/t/x_records at byte 21: invalid key length"


def test_no_error_raised_while_handling_another_drops_its_cause() -> None:
    """``raise ... from None`` inside an ``except`` hides the cause from ``--debug``."""
    dropped = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for handler in ast.walk(ast.parse(path.read_text())):
            if isinstance(handler, ast.ExceptHandler):
                for node in ast.walk(handler):
                    if (
                        isinstance(node, ast.Raise)
                        and isinstance(node.cause, ast.Constant)
                        and node.cause.value is None
                    ):
                        dropped.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert dropped == []


class _Admin:
    """Answers the two questions of the permission check's group listing."""

    def __init__(self, listing: Any = None, failure: BaseException | None = None) -> None:
        self.listing, self.failure = listing, failure

    def list_consumer_groups(self, request_timeout: float) -> Any:
        if self.failure is not None:
            raise self.failure
        return SimpleNamespace(result=lambda: self.listing)


def test_the_backup_checks_every_listed_group_and_never_skips_a_failed_listing() -> None:
    group = SimpleNamespace(group_id="billing")
    needed = backup_permissions(_Admin(SimpleNamespace(valid=[group], errors=[])), ["orders"])
    assert [(p.operation, p.resource_type, p.name) for p in needed][-1] == ("DESCRIBE", "GROUP", "billing")
    with pytest.raises(ClusterError, match="cannot list the consumer groups") as failed:
        backup_permissions(_Admin(failure=TimeoutError()), ["orders"])
    assert failed.value.transient  # asked again by the admin session, then the job stops: nothing is skipped
    partial = SimpleNamespace(valid=[group], errors=[RuntimeError("node 2 did not answer")])
    with pytest.raises(ClusterError, match="1 of the cluster's nodes did not answer") as failed:
        backup_permissions(_Admin(partial), ["orders"])
    assert failed.value.transient


def test_a_job_stopped_before_it_was_done_exits_128_plus_the_signal_in_one_line() -> None:
    import signal

    from spark_kafka_backup.backup.job import _stopped_snapshot
    from spark_kafka_backup.boundary import Stopped
    from spark_kafka_backup.errors import StoppedEarlyError

    planned = {("orders", 0): 100, ("orders", 1): 50, ("orders", 2): 0}
    text = _stopped_snapshot(signal.SIGTERM, planned, {("orders", 0): 100, ("orders", 1): 20})
    assert text.startswith(
        "the snapshot was stopped by SIGTERM before it was complete: 2 of 3 partitions backed up to the end offsets "
        "it planned, 30 offsets still to read; what it backed up is kept"
    )
    assert "no micro-batch of it had been committed" in _stopped_snapshot(signal.SIGINT, planned, {})
    said: list[str] = []
    stopped = StoppedEarlyError(text, signum=signal.SIGTERM)
    assert exit_code("spark-kafka-backup backup", _raising(stopped), say=said.append, debug=True) == 143
    assert said == [f"spark-kafka-backup backup: error: {text}"]
    said.clear()
    assert exit_code("job", _raising(Stopped(signal.SIGTERM)), say=said.append) == 143
    assert said == ["job: error: stopped by SIGTERM (what was committed stays; run it again to go on)"]
    assert exit_code("job", _raising(KeyboardInterrupt()), say=said.append) == 130


class _SignalledWhenCollected:
    """Sends ``signum`` to this process from its finalizer, as a signal lands while py4j's finalizer runs."""

    def __init__(self, signum: int) -> None:
        self.signum = signum

    def __del__(self) -> None:
        import signal

        signal.raise_signal(self.signum)


class _FailingWhenCollected:
    def __del__(self) -> None:
        raise ValueError("a finalizer's own failure")


@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT"])
def test_a_stop_whose_raise_a_finalizer_swallowed_is_raised_again_at_the_next_check(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tests/test_stop_signals.py saw a SIGTERM at 'backing up topics' raised inside py4j's finalizer: Python printed
    'Exception ignored in' with a traceback and the snapshot ran to its end with exit 0."""
    import signal
    import sys

    from spark_kafka_backup.boundary import Stopped, check_stop, stop_on_signals, take_stop

    reported: list[type[BaseException] | None] = []  # what Python would print under "Exception ignored in"
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: reported.append(unraisable.exc_type))

    signum = signal.Signals[name]
    raised = KeyboardInterrupt if signum == signal.SIGINT else Stopped
    # Python's own SIGINT handler, as in a job's driver (an xdist worker ignores SIGINT, and an ignored one stays so).
    outer = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
        hook = sys.unraisablehook
        with stop_on_signals():
            check_stop()  # nothing asked
            _SignalledWhenCollected(signum)  # collected at once: the raise happens in __del__ and is lost
            assert reported == []  # no traceback: the job's one line will say the stop
            _FailingWhenCollected()
            assert reported == [ValueError]  # any other lost exception is reported as before
            with pytest.raises(raised):
                check_stop()
            with pytest.raises(raised):
                check_stop()  # until a job takes it
            assert take_stop() == signum
            check_stop()
            assert take_stop() is None
            _SignalledWhenCollected(signum)
        check_stop()  # forgotten when the job's boundary ends: the next job in this process starts clean
        assert {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)} == before
        assert sys.unraisablehook is hook
    finally:
        signal.signal(signal.SIGINT, outer)


def test_py4js_log_of_a_ctrl_c_while_it_talks_to_the_jvm_is_no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    """py4j calls logging.exception on the root logger when SIGINT lands inside a JVM call; the job says the
    interrupt in one line itself (tests/test_stop_signals.py met the traceback at 'backing up topics')."""
    import logging

    from spark_kafka_backup.logsetup import _py4j_interrupt, ensure_console_logging

    root = logging.getLogger()
    handlers, filters = list(root.handlers), list(root.filters)
    try:
        ensure_console_logging()
        ensure_console_logging()  # once only
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            logging.exception("KeyboardInterrupt while sending command.")  # as py4j.java_gateway does
            logging.error("another library's error")
        said = [record.getMessage() for record in caplog.records if record.name == "root"]
        assert said == ["another library's error"]  # the root logger's handlers never see py4j's record
        assert root.filters.count(_py4j_interrupt) == 1  # however many times the jobs set logging up
    finally:
        root.handlers[:], root.filters[:] = handlers, filters
