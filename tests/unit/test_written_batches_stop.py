"""A micro-batch stopped under the query: the foreachBatch function says so in one short line that Spark's stream
thread takes for a stop (its pattern recursed once per character over the whole traceback it used to get, and the
thread died of StackOverflowError); any other failure before the job stops goes through unchanged."""

from __future__ import annotations

import re
import threading
import traceback
from typing import Any

import pytest

from spark_kafka_backup.spark.written_batches import BatchInterrupted, run_batch

#: The text Spark's stream thread looks for in a Python function's error to tell a stop (StreamExecution's
#: PROXY_ERROR: Py4J's error of a call, then one of the interruptions).
SPARK_STOP_PATTERN = re.compile(
    r"py4j\.protocol\.Py4JJavaError: An error occurred while calling((.|\r\n|\r|\n)*)"
    r"(java\.lang\.InterruptedException|java\.io\.InterruptedIOException|"
    r"java\.nio\.channels\.ClosedByInterruptException)"
)
#: The Java stack of a cancelled job, as Py4J hands it to Python: thousands of characters.
CANCELLED = (
    "An error occurred while calling o412.collectAsArrowToPython.\n: org.apache.spark.SparkException: Job 7 "
    "cancelled part of cancelled job group 0b7c\n"
    + "\tat org.apache.spark.scheduler.DAGScheduler.x(DAGScheduler.scala:1)\n"
    * 300
)


def _failing(error: Exception) -> Any:
    def run() -> None:
        raise error

    return run


def test_a_batch_cancelled_by_a_stop_ends_in_one_short_line_spark_takes_for_a_stop() -> None:
    with pytest.raises(BatchInterrupted) as caught:
        run_batch(_failing(RuntimeError(CANCELLED)), 7, threading.Event())
    # What Py4J hands back to the JVM: the whole traceback, as format_exc prints it.
    shown = "".join(traceback.format_exception(caught.value))
    assert len(shown) < 2000 and "DAGScheduler" not in shown, shown
    assert SPARK_STOP_PATTERN.search(shown) is not None
    assert SPARK_STOP_PATTERN.search(CANCELLED) is None  # what it replaced did not even say "stopped"


def test_once_the_job_stops_any_failure_of_the_batch_is_the_stop_s_and_before_it_goes_through_as_it_was() -> None:
    failure = RuntimeError("An error occurred while calling o12.sparkSession: py4j.Py4JException: Error while sending")
    with pytest.raises(RuntimeError) as caught:
        run_batch(_failing(failure), 3, threading.Event())
    assert caught.value is failure
    stopping = threading.Event()
    stopping.set()
    with pytest.raises(BatchInterrupted):
        run_batch(_failing(failure), 3, stopping)
    run_batch(lambda: None, 4, stopping)  # a batch that ends normally is done, stopping or not
