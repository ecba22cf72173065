"""Where a failure becomes one line: the ``spark-kafka-backup`` commands and the Spark jobs all end here.

- an error raised on purpose (:class:`~spark_kafka_backup.errors.KbackupError`) prints its message, which names
  the file, partition, offset or option and what was expected;
- an ``OSError`` prints what the system said about which path;
- anything else (Spark, py4j, a client library, a bug) prints its cause in one line and that ``--debug`` shows where;
- Ctrl-C prints that what was committed stays (exit 130).

With ``--debug`` the traceback is logged too, every chained cause with it (errors are raised ``from`` their cause).
Exit codes: 0 done, 1 failed, 130 interrupted; the callers keep 2 for a command line that does not parse.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from spark_kafka_backup.errors import KbackupError

#: Exit code of a run interrupted with Ctrl-C (128 + SIGINT), as a shell reports it.
INTERRUPTED = 130

_log = logging.getLogger("spark_kafka_backup")


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
    except KbackupError as exc:
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
