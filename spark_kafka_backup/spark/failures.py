"""Turning a Spark job failure into the one line a user needs."""

from __future__ import annotations

import re

_KBACKUP_ERROR = re.compile(r"(spark_kafka_backup\.[\w.]+Error): (.+)")
# py4j puts the JVM's exception on a line of its own after ": ".
_PYTHON_ERROR = re.compile(r"^(?::\s*)?((?:\w+\.)*\w*(?:Error|Exception)): (.+)$", re.M)
_WRAPPERS = ("org.", "java.", "scala.", "py4j.", "pyspark.")


#: How PySpark reports an error raised in a Python process of Spark's (a task's, a planner's), not the driver's own.
_FROM_A_WORKER = "An exception was thrown from the Python worker"
#: What a module missing in a Spark Python process means for a job, and what to do.
MISSING_ON_EXECUTORS = (
    "in a Python process of Spark's (an executor's, or the driver's for planning): the Python Spark runs there lacks "
    "what spark-kafka-backup needs; on a cluster, ship it with --archive FILE (made by spark-kafka-backup pack, "
    "docs/deploy.md) or install spark-kafka-backup there"
)


def failure_cause(failure: BaseException | object) -> str:
    """spark-kafka-backup's own error if the failure carries one, else the Python worker's last error line, else the
    first line."""
    text = str(failure)
    # The last one: a traceback prints the causes of an error before it. A private helper's error is only a cause.
    ours = [match for match in _KBACKUP_ERROR.finditer(text) if not match[1].rsplit(".", 1)[-1].startswith("_")]
    if ours:
        return f"{ours[-1][1].rsplit('.', 1)[-1]}: {ours[-1][2].strip()}"
    errors = _PYTHON_ERROR.findall(text)
    # The Python worker's own error is the cause; the JVM's exceptions only wrap it.
    python = [(name, message) for name, message in errors if not name.startswith(_WRAPPERS)]
    if python or errors:
        name, message = (python or errors)[-1]
        line = f"{name.rsplit('.', 1)[-1]}: {message.strip()}"[:500]
        if name.endswith("ModuleNotFoundError") and _FROM_A_WORKER in text:
            line += f" {MISSING_ON_EXECUTORS}"
        return line
    return next((line.strip() for line in text.splitlines() if line.strip()), type(failure).__name__)[:500]


#: What Spark says when a Python process it started did not connect back to it in time. Spark waits a fixed 10 s
#: for that (in its code, not a setting): on a machine whose cores are all busy a process can take longer to start.
#: Nothing of the data is wrong, and a streaming query started again from its checkpoint goes on exactly.
_WORKER_START_FAILURES = (
    "Python worker failed to connect back",
    "Timed out while waiting for the Python worker to connect back",
    "Python daemon failed to launch worker",
    "Failed to open socket to Python daemon",
)


def is_worker_start_failure(failure: BaseException | object) -> bool:
    """Whether a failure is Spark failing to start a Python process in time (and not spark-kafka-backup's own error)."""
    text = str(failure)
    return _KBACKUP_ERROR.search(text) is None and any(sign in text for sign in _WORKER_START_FAILURES)


class QueryRestarts:
    """When a streaming query that Spark stopped because a Python process did not start in time is started
    again: up to ``limit`` times in a row without a micro-batch completing in between (a machine that cannot
    start one in any of them is told to the user, as any other failure)."""

    def __init__(self, limit: int = 5) -> None:
        self.limit = limit
        self._in_a_row = 0
        self._batch = -1

    def allow(self, failure: BaseException | object, *, completed_batch: int) -> bool:
        """Whether to start the query again after ``failure``; ``completed_batch`` is the last one finished."""
        if not is_worker_start_failure(failure):
            return False
        if completed_batch > self._batch:
            self._batch, self._in_a_row = completed_batch, 0
        if self._in_a_row >= self.limit:
            return False
        self._in_a_row += 1
        return True

    @property
    def count(self) -> int:
        """Restarts in a row so far."""
        return self._in_a_row
