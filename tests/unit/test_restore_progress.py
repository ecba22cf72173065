"""The restore's progress follows Spark's task counts and ends complete when the job succeeded."""

from __future__ import annotations

import io
import itertools
import threading

from spark_kafka_backup.progress import Progress
from spark_kafka_backup.restore.job import follow_tasks


def _finished_job() -> threading.Thread:
    job = threading.Thread(target=lambda: None)
    job.start()
    job.join()
    return job


def test_a_succeeded_job_shows_every_partition_even_when_the_tracker_lags() -> None:
    stream = io.StringIO()
    polled: list[int] = []
    shown = Progress("restore", 4, "partitions", stream=stream, terminal=False, min_interval=3600)
    follow_tasks(_finished_job(), lambda: 0, shown, polled.append, succeeded=lambda: True, every=0)
    assert stream.getvalue().splitlines()[-1] == "restore: 4/4 partitions"
    assert shown.done == 4


def test_a_failed_job_shows_only_what_the_tracker_counted() -> None:
    stream = io.StringIO()
    shown = Progress("restore", 4, "partitions", stream=stream, terminal=False, min_interval=0)
    follow_tasks(_finished_job(), lambda: 1, shown, lambda _: None, succeeded=lambda: False, idle=1, every=0)
    assert shown.done == 1
    assert "4/4" not in stream.getvalue()


def test_counts_and_polls_while_the_job_runs() -> None:
    release = threading.Event()
    job = threading.Thread(target=release.wait)
    job.start()
    counts = itertools.chain([1, 2], itertools.repeat(3))
    polled: list[int] = []

    def finished() -> int:
        count = next(counts)
        if count == 3:
            release.set()
        return count

    shown = Progress("restore", 5, "partitions", stream=io.StringIO(), terminal=False, min_interval=0)
    follow_tasks(job, finished, shown, polled.append, succeeded=lambda: True, idle=2, every=0.01)
    assert polled[:3] == [3, 4, 5]
    assert shown.done == 5
