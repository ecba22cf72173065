"""The end of the driver's streaming-source runner: a closed socket ends it silently, any other error is printed."""

from __future__ import annotations

import sys
from types import TracebackType

import pytest

from spark_kafka_backup.spark.runner_exit import only_closed_socket, quiet_closed_socket_on_exit


def _runner_end(last: BaseException | None = None) -> BaseException:
    """As PySpark's runner ends when the JVM closed its socket: end of file, then a broken pipe reporting it (and
    ``last`` raised while handling those, if given)."""
    try:
        try:
            try:
                raise EOFError
            except EOFError:
                raise BrokenPipeError(32, "Broken pipe")  # noqa: B904 (as the runner: raised while handling)
        finally:
            if last is not None:
                raise last
    except BaseException as error:
        return error


def test_a_runner_ended_by_a_closed_socket_prints_nothing_after_the_readers_stop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    printed: list[BaseException] = []

    def default(kind: type[BaseException], error: BaseException, traceback: TracebackType | None) -> None:
        printed.append(error)

    monkeypatch.setattr(sys, "excepthook", default)
    closed = _runner_end()
    sys.excepthook(type(closed), closed, closed.__traceback__)
    assert printed == [closed]  # before the reader's stop: PySpark's own end, as it was
    quiet_closed_socket_on_exit()
    quiet_closed_socket_on_exit()  # twice: one hook
    sys.excepthook(type(closed), closed, closed.__traceback__)
    assert printed == [closed]
    failed = _runner_end(ValueError("the reader failed"))
    sys.excepthook(type(failed), failed, failed.__traceback__)
    assert printed == [closed, failed]


def test_only_errors_made_of_closed_sockets_are_quiet() -> None:
    assert only_closed_socket(_runner_end()) and only_closed_socket(ConnectionResetError())
    chained = BrokenPipeError()
    chained.__context__ = KeyError("x")
    assert not only_closed_socket(chained)
    assert not only_closed_socket(_runner_end(ValueError("the reader failed")))
