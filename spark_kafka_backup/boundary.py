"""Where a failure becomes one line: the ``spark-kafka-backup`` commands and the Spark jobs all end here.

- an error raised on purpose (:class:`~spark_kafka_backup.errors.SparkKafkaBackupError`) prints its message, which names
  the file, partition, offset or option and what was expected;
- an ``OSError`` prints what the system said about which path;
- anything else (Spark, py4j, a client library, a bug) prints its cause in one line and that ``--debug`` shows where;
- Ctrl-C prints that what was committed stays (exit 130); a job stopped by a signal before it was done
  (:class:`~spark_kafka_backup.errors.StoppedEarlyError`) says how far it got and exits ``128 + signal``.

With ``--debug`` the traceback is logged too, every chained cause with it (errors are raised ``from`` their cause).
Exit codes: 0 done, 1 failed, 130 interrupted (SIGINT), 143 stopped by SIGTERM before done; the callers keep 2 for a
command line that does not parse.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

from spark_kafka_backup.errors import SparkKafkaBackupError, StoppedEarlyError

#: Exit code of a run interrupted with Ctrl-C (128 + SIGINT), as a shell reports it.
INTERRUPTED = 130

_log = logging.getLogger("spark_kafka_backup")


# A BaseException, as KeyboardInterrupt: no ``except Exception`` on the way swallows it.
class Stopped(BaseException):
    """SIGTERM to a job before it installed a stop of its own (:func:`stop_on_sigterm`): what was committed stays."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_stopped(signum: int, frame: FrameType | None) -> None:
    raise Stopped(signum)


@contextmanager
def stop_on_sigterm() -> Iterator[None]:
    """SIGTERM raises :class:`Stopped` (in the main thread) instead of ending the process at once: a job stopped while
    it starts says so and exits 143 like one stopped later, and its ``finally`` blocks (Spark's stop, the target's
    lease) run. The handler before is put back after."""
    try:
        previous = signal.signal(signal.SIGTERM, _raise_stopped)
    except ValueError:  # not the main thread: the process's default stays
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def first_line(exc: BaseException) -> str:
    """The first line of an unexpected error, named by its type."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def exit_code(
    prog: str,
    body: Callable[[], int],
    *,
    say: Callable[[str], None],
    debug: bool = False,
    cause: Callable[[BaseException], str] = first_line,
    interrupted: str = "interrupted (what was committed stays; run it again to go on)",
) -> int:
    """Run ``body`` and turn what it raises into one line said through ``say`` and an exit code."""
    try:
        return body()
    except KeyboardInterrupt:
        say(f"{prog}: error: {interrupted}")
        return INTERRUPTED
    except Stopped as stop:
        say(f"{prog}: error: stopped by {stop} ({interrupted.removeprefix('interrupted (')}")
        return 128 + stop.signum
    except StoppedEarlyError as exc:  # a stop asked for: no traceback, even with --debug
        say(f"{prog}: error: {exc}")
        return exc.exit_status
    except SparkKafkaBackupError as exc:
        failure: BaseException = exc
        line = str(exc)
    except OSError as exc:
        failure = exc
        line = str(exc)
    except Exception as exc:
        failure = exc
        line = f"{cause(exc)} (--debug shows where)"
    if debug:
        _log.error("%s failed", prog, exc_info=failure)
    say(f"{prog}: error: {line}")
    return 1
