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
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import NoReturn

from spark_kafka_backup.errors import SparkKafkaBackupError, StoppedEarlyError

#: Exit code of a run interrupted with Ctrl-C (128 + SIGINT), as a shell reports it.
INTERRUPTED = 130

_log = logging.getLogger("spark_kafka_backup")


# A BaseException, as KeyboardInterrupt: no ``except Exception`` on the way swallows it.
class Stopped(BaseException):
    """SIGTERM to a job before it installed a stop of its own (:func:`stop_on_signals`): what was committed stays."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


#: The stop signal received under :func:`stop_on_signals` and not yet taken by a job's own stop (:func:`take_stop`).
#: Its exception is raised where Python runs when the signal arrives, and that may be a finalizer (py4j releases Java
#: objects from one), which prints "Exception ignored in" and goes on: the job would then run to its end as if never
#: asked to stop. A job looks here at its safe points (:func:`check_stop`, :func:`take_stop`) so that it is not.
#: Process state, as the signal handlers themselves are.
_received: int | None = None


def _raise_for(signum: int) -> NoReturn:
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Stopped(signum)


def _stop(signum: int, frame: FrameType | None) -> None:
    global _received
    _received = signum
    _raise_for(signum)


def check_stop() -> None:
    """Raise the stop asked for under :func:`stop_on_signals` again, if one was: a no-op unless its first raise was
    lost in a finalizer (the job has gone on since)."""
    if _received is not None:
        _raise_for(_received)


def take_stop() -> int | None:
    """The stop signal received so far, handed to a job that now handles stops itself (the backup's query stops
    between micro-batches): it is not raised again."""
    global _received
    taken, _received = _received, None
    return taken


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGTERM raises :class:`Stopped` and SIGINT ``KeyboardInterrupt`` (in the main thread) instead of ending the
    process at once: a job stopped while it starts says so and exits 128 + signal like one stopped later, and its
    ``finally`` blocks (Spark's stop, the target's lease) run. Either is remembered until a job takes it, so one lost
    in a finalizer is raised again at the job's next safe point, and Python's report of the lost raise (a traceback
    under "Exception ignored in") is not printed: the job's one line says the stop. A SIGINT that was ignored stays
    ignored; the handlers and the report hook before are put back after."""
    global _received
    try:
        previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, _stop)}
    except ValueError:  # not the main thread: the process's defaults stay
        yield
        return
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, _stop)
    _received = None
    report = sys.unraisablehook

    def unraisable(lost: sys.UnraisableHookArgs) -> None:
        if lost.exc_type in (Stopped, KeyboardInterrupt) and _received is not None:
            return  # remembered: raised again at the next safe point
        report(lost)

    sys.unraisablehook = unraisable
    try:
        yield
    finally:
        # The handlers first: a signal from here on is the process's before, never one remembered past the job.
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        sys.unraisablehook = report
        _received = None


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
