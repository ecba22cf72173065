"""Console logging for spark-kafka-backup's jobs (driver and the driver-side Spark workers)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
import sys
import time
from collections.abc import Iterator
from typing import TextIO

from spark_kafka_backup.text import shown, shown_json

#: ``--log-format``: ``text`` (``12:00:01 spark-kafka-backup INFO ...``) or ``json`` (:class:`JsonLines`).
LOG_FORMATS = ("text", "json")

#: Set by :func:`ensure_console_logging` for the processes a job starts after it (Spark's Python workers).
LOG_FORMAT_VARIABLE = "KBACKUP_LOG_FORMAT"


class JsonLines(logging.Formatter):
    """One JSON object per line: ``{"time": ISO 8601 UTC, "level", "logger", "message"}``."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"
        entry = {"time": stamp, "level": record.levelname, "logger": record.name, "message": record.getMessage()}
        if record.exc_info:
            entry["traceback"] = self.formatException(record.exc_info)
        return shown_json(json.dumps(entry, ensure_ascii=False))


class TextLines(logging.Formatter):
    """``12:00:01 spark-kafka-backup INFO message``: the message on one line, its control characters shown
    (:func:`spark_kafka_backup.text.shown`); a traceback (``--debug``) follows as Python prints it."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s spark-kafka-backup %(levelname)s %(message)s", "%H:%M:%S")

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 (logging's name)
        record.message = shown(record.message)
        return super().formatMessage(record)


def _py4j_interrupt(record: logging.LogRecord) -> bool:
    """py4j logs a Ctrl-C that arrives while it talks to the JVM with ``logging.exception`` on the root logger (a
    traceback on stderr); the job turns that interrupt into its own one line, so the record is dropped."""
    return not (record.name == "root" and record.msg == "KeyboardInterrupt while sending command.")


def ensure_console_logging(*, debug: bool = False, log_format: str | None = None) -> None:
    """Send the ``spark-kafka-backup`` loggers to stdout (errors go to stderr separately).

    The Kafka client's own log (``spark_kafka_backup.librdkafka``) is shown only with ``debug``:
    its connection errors reach the user as spark-kafka-backup's one-line errors.
    ``log_format`` (:data:`LOG_FORMATS`) replaces the format; None keeps the
    one chosen before in this process, or in the environment the job set.
    """
    logging.getLogger("spark_kafka_backup.librdkafka").setLevel(logging.DEBUG if debug else logging.CRITICAL)
    root = logging.getLogger()
    if _py4j_interrupt not in root.filters:
        root.addFilter(_py4j_interrupt)
    logger = logging.getLogger("spark_kafka_backup")
    if log_format is not None:
        os.environ[LOG_FORMAT_VARIABLE] = log_format
    chosen = os.environ.get(LOG_FORMAT_VARIABLE, "text")
    if not logger.handlers:
        logger.addHandler(logging.StreamHandler(sys.stdout))
        logger.propagate = False
    for handler in logger.handlers:
        if chosen == "json":
            handler.setFormatter(JsonLines())
        else:
            handler.setFormatter(TextLines())
    logger.setLevel(logging.DEBUG if debug else logging.INFO)


def print_error(line: str) -> None:
    """Print a job's one error line where the user sees errors: the standard error of ``spark-submit``.

    spark-submit runs the Python driver with its standard error merged into
    its standard output (PythonRunner's ``redirectErrorStream``), so under
    spark-submit the line is written to the launching JVM's own standard error
    (``/proc/<parent>/fd/2``), and to this process's otherwise.
    """
    if os.environ.get(LOG_FORMAT_VARIABLE) == "json":
        logging.getLogger("spark_kafka_backup").error("%s", line)  # the log collector sees the failure too
    with user_stderr(midway=False) as stream, contextlib.suppress(OSError, ValueError):
        # Nobody reading the standard error any more (a closed pipe) loses the line: the exit code still says it.
        print(shown(line), file=stream, flush=True)


@contextlib.contextmanager
def user_stderr(*, midway: bool = True) -> Iterator[TextIO]:
    """Where a job's progress (``midway``: while the JVM goes on writing) or last error line goes, off its log:
    ``spark-submit``'s standard error under spark-submit where what is written there stays where it lands (see
    :func:`_submitter_stderr`), else this process's (under spark-submit merged into the log on standard output, in
    order)."""
    stream = _submitter_stderr(safe_midway=midway)
    try:
        yield stream or sys.stderr
    finally:
        if stream is not None:
            with contextlib.suppress(OSError, ValueError):
                stream.close()


def _submitter_stderr(*, safe_midway: bool = False) -> TextIO | None:
    """``spark-submit``'s standard error (``/proc/<parent>/fd/2``), opened to append, or None (not under
    spark-submit, or it cannot be opened: a journald socket, ``/proc`` hidden).

    ``safe_midway``: for lines written while the JVM goes on writing its own. A regular file the JVM holds open
    without ``O_APPEND`` (``> job.log``) is written at the JVM's own position, over what was appended meanwhile: then
    None, and so when it is the same file as the standard output (``> job.log 2>&1``: the merged standard output
    reaches it in order). A job's last error line is written there all the same: the JVM adds nothing after it.
    """
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return None  # not started by spark-submit
    parent = os.getppid()
    try:
        if safe_midway and stat.S_ISREG(os.stat(f"/proc/{parent}/fd/2").st_mode):
            err, out = os.stat(f"/proc/{parent}/fd/2"), os.stat(f"/proc/{parent}/fd/1")
            if (err.st_dev, err.st_ino) == (out.st_dev, out.st_ino) or not _opened_to_append(parent, 2):
                return None
        # Appending: opened for writing, a standard error redirected to a file ("> job.log 2>&1") would be cut to
        # nothing first, and the job's whole log with it.
        return open(f"/proc/{parent}/fd/2", "a", encoding="utf-8")
    except OSError:
        return None


def _opened_to_append(pid: int, fd: int) -> bool:
    """Whether ``fd`` of process ``pid`` was opened with ``O_APPEND`` (``/proc/PID/fdinfo/FD``'s octal flags)."""
    with open(f"/proc/{pid}/fdinfo/{fd}", encoding="ascii") as info:
        for line in info:
            name, _, value = line.partition(":")
            if name == "flags":
                return bool(int(value.strip(), 8) & os.O_APPEND)
    return False


def spark_log_level(*, debug: bool) -> str:
    """Spark's own log level for spark-kafka-backup's jobs.

    Spark logs a failed task or query as pages of JVM and Python stack traces;
    spark-kafka-backup reports every failure as one ``error:`` line with its cause, so
    Spark's log is off unless ``--debug`` asks for its warnings and errors.
    """
    return "WARN" if debug else "OFF"
