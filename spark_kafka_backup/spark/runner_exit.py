"""The end of the Python process Spark runs a streaming source in on the driver, without a traceback.

PySpark's runner of a Python streaming source (``pyspark.sql.streaming.python_streaming_source_runner``) serves the
JVM's calls in a loop that only ends by an exception: when a query stops, the JVM closes the runner's socket, the
runner reads end of file, calls the reader's ``stop()``, then tries to report that end to the JVM through the closed
socket and dies of ``BrokenPipeError``, printing three chained tracebacks on the driver's standard error. A
backup stopped by SIGTERM or SIGINT (or a snapshot that ends while the JVM is mid-call) showed them, as if it had
failed.

The reader's ``stop()`` is the runner's last call into this package: :func:`quiet_closed_socket_on_exit` replaces the
process's ``sys.excepthook`` there with one that says nothing of an error whose chain holds only a closed socket
(end of file, broken pipe, reset connection: the JVM is gone or done), and prints any other as before. The JVM learns
of a real failure through the socket, not this output.
"""

from __future__ import annotations

import sys
from types import TracebackType

#: Errors that only say the JVM's end of the socket is closed.
_CLOSED = (EOFError, BrokenPipeError, ConnectionResetError)


def quiet_closed_socket_on_exit() -> None:
    """From now on, an uncaught error of this process made only of a closed socket ends it silently."""
    if getattr(sys.excepthook, "_kbackup_quiet", False):
        return
    printed = sys.excepthook

    def hook(kind: type[BaseException], error: BaseException, traceback: TracebackType | None) -> None:
        if not only_closed_socket(error):
            printed(kind, error, traceback)

    hook._kbackup_quiet = True  # type: ignore[attr-defined]
    sys.excepthook = hook


def only_closed_socket(error: BaseException | None) -> bool:
    """Whether ``error`` and every error it was raised from or while handling is a closed socket's."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if not isinstance(error, _CLOSED):
            return False
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return True
