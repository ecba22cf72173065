"""Console logging for kbackup's jobs (driver and the driver-side Spark workers)."""

from __future__ import annotations

import logging
import os
import sys
from typing import TextIO


def ensure_console_logging(*, debug: bool = False) -> None:
    """Send the ``kbackup`` loggers to stdout, once per process (errors go to stderr separately).

    The Kafka client's own log (``kbackup.librdkafka``) is shown only with ``debug``:
    its connection errors reach the user as kbackup's one-line errors.
    """
    logging.getLogger("kbackup.librdkafka").setLevel(logging.DEBUG if debug else logging.CRITICAL)
    logger = logging.getLogger("kbackup")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter("%(asctime)s kbackup %(levelname)s %(message)s", "%H:%M:%S"))
        logger.addHandler(handler)
        logger.propagate = False
    logger.setLevel(logging.DEBUG if debug else logging.INFO)


def print_error(line: str) -> None:
    """Print a job's one error line where the user sees errors: the standard error of ``spark-submit``.

    spark-submit runs the Python driver with its standard error merged into
    its standard output (PythonRunner's ``redirectErrorStream``), so under
    spark-submit the line is written to the launching JVM's own standard error
    (``/proc/<parent>/fd/2``), and to this process's otherwise.
    """
    stream = _submitter_stderr()
    try:
        print(line, file=stream or sys.stderr, flush=True)
    finally:
        if stream is not None:
            stream.close()


def _submitter_stderr() -> TextIO | None:
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return None  # not started by spark-submit
    try:
        return open(f"/proc/{os.getppid()}/fd/2", "w", encoding="utf-8")
    except OSError:
        return None


def spark_log_level(*, debug: bool) -> str:
    """Spark's own log level for kbackup's jobs.

    Spark logs a failed task or query as pages of JVM and Python stack traces;
    kbackup reports every failure as one ``error:`` line with its cause, so
    Spark's log is off unless ``--debug`` asks for its warnings and errors.
    """
    return "WARN" if debug else "OFF"
