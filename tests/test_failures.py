"""A Spark job failure becomes the one line a user needs: the Python worker's own error, not its wrappers."""

from __future__ import annotations

from spark_kafka_backup.spark.failures import QueryRestarts, failure_cause, is_worker_start_failure

# What str() of a failed restore's collect() looks like (Py4JJavaError), shortened.
RESTORE_FAILURE = """An error occurred while calling z:org.apache.spark.api.python.PythonRDD.collectAndServe.
: org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 0.0 failed 1 times, \
most recent failure: Lost task 0.0 in stage 0.0 (TID 0) (192.0.2.2 executor driver): \
org.apache.spark.api.python.PythonException: Traceback (most recent call last):
  File "/work/kbackup/restore/task.py", line 105, in restore_partition
    produce(topic, record.value, record.key, partition, timestamp=timestamp, headers=headers)
cimpl.KafkaException: KafkaError{code=_UNKNOWN_PARTITION,val=-190,str="Local: Unknown partition"}

\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(PythonRunner.scala:651)
\tat org.apache.spark.scheduler.Task.run(Task.scala:147)

Driver stacktrace:
\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(DAGScheduler.scala:2935)
Caused by: org.apache.spark.api.python.PythonException: Traceback (most recent call last):
  File "/work/kbackup/restore/task.py", line 105, in restore_partition
cimpl.KafkaException: KafkaError{code=_UNKNOWN_PARTITION,val=-190,str="Local: Unknown partition"}
"""

# A streaming query stopped by spark-kafka-backup's own error in the sink (StreamingQueryException), shortened.
BACKUP_FAILURE = """[STREAM_FAILED] Query [id = e3017ac0, runId = f40f288b] terminated with exception: \
[PYTHON_EXCEPTION] An exception was thrown from the Python worker: Traceback (most recent call last):
  File "/work/kbackup/partition/writer.py", line 89, in check_replayed
    raise OffsetConflictError(
spark_kafka_backup.errors.OffsetConflictError: topic 'conf' partition 0 offset 0: offset is already stored with \
different content
 SQLSTATE: 38000 SQLSTATE: XXKST
=== Streaming Query ===
"""


def test_the_python_workers_error_is_the_cause() -> None:
    assert failure_cause(RESTORE_FAILURE) == (
        'KafkaException: KafkaError{code=_UNKNOWN_PARTITION,val=-190,str="Local: Unknown partition"}'
    )


def test_kbackups_own_error_is_named_as_such() -> None:
    assert failure_cause(BACKUP_FAILURE) == (
        "OffsetConflictError: topic 'conf' partition 0 offset 0: offset is already stored with different content"
    )


def test_without_a_python_error_the_first_line() -> None:
    assert failure_cause("org.apache.spark.SparkException: Job 3 cancelled\n\tat x") == (
        "SparkException: Job 3 cancelled"
    )
    assert failure_cause("something odd\nmore") == "something odd"


def test_the_jvm_exception_py4j_reports_is_the_cause() -> None:
    py4j = (
        "An error occurred while calling None.org.apache.spark.api.java.JavaSparkContext.\n"
        ": org.apache.spark.SparkException: Could not parse Master URL: 'no-such-master://x'\n"
        "\tat org.apache.spark.SparkContext$.createTaskScheduler(SparkContext.scala:3300)\n"
    )
    assert failure_cause(py4j) == "SparkException: Could not parse Master URL: 'no-such-master://x'"


# What the backup query's failure said on a loaded machine (CI), shortened.
WORKER_START_FAILURE = """[STREAM_FAILED] Query [id = c9e1ddf4, runId = e1e3750c] terminated with exception: \
Python worker failed to connect back. SQLSTATE: XXKST"""


def test_a_python_worker_that_did_not_start_in_time_is_told_apart_from_kbackups_own_errors() -> None:
    assert is_worker_start_failure(WORKER_START_FAILURE)
    assert is_worker_start_failure("java.net.SocketTimeoutException: Timed out while waiting for the Python worker "
                                   "to connect back after 10000 ms")  # fmt: skip
    assert not is_worker_start_failure(BACKUP_FAILURE)
    assert not is_worker_start_failure(RESTORE_FAILURE)
    # spark-kafka-backup's own error wins even when the text also holds a worker failure (a refusal is never retried).
    assert not is_worker_start_failure(BACKUP_FAILURE + "\nPython worker failed to connect back")


def test_a_query_is_started_again_up_to_the_limit_in_a_row_and_a_finished_batch_resets_it() -> None:
    restarts = QueryRestarts(limit=2)
    assert not restarts.allow(BACKUP_FAILURE, completed_batch=-1)  # a real failure: never
    assert restarts.allow(WORKER_START_FAILURE, completed_batch=-1)
    assert restarts.allow(WORKER_START_FAILURE, completed_batch=-1)
    assert not restarts.allow(WORKER_START_FAILURE, completed_batch=-1)  # the third in a row without progress
    assert restarts.allow(WORKER_START_FAILURE, completed_batch=4)  # a batch finished since: counting again
    assert restarts.count == 1
