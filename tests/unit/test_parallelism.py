"""The cores a job's settings give it, which the backup packs small partitions for and a restore divides its rate
limits by (spark_kafka_backup.spark.parallelism, restore.job._shared_throttle)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from spark_kafka_backup.partition.selection import Window
from spark_kafka_backup.restore.partition_task import PartitionTask
from spark_kafka_backup.spark.parallelism import JobCores, backup_tasks, job_cores

STANDALONE = {"spark.master": "spark://master:7077"}
KUBERNETES = {"spark.master": "k8s://https://api:6443"}
YARN = {"spark.master": "yarn"}
DYNAMIC = {"spark.dynamicAllocation.enabled": "true"}
INSTANCES_X_CORES = "spark.executor.instances x spark.executor.cores"
MAX_EXECUTORS_X_CORES = "spark.dynamicAllocation.maxExecutors x spark.executor.cores"


@pytest.mark.parametrize(
    ("conf", "expected"),
    [
        ({"spark.master": "local[4]"}, 4),
        ({"spark.master": "local"}, 1),
        ({"spark.master": "local[*]"}, os.cpu_count()),
        ({"spark.master": "local[3,2]"}, 3),  # threads, then task failures allowed
        ({"spark.master": "local-cluster[2,3,1024]"}, 6),
        ({**STANDALONE, "spark.cores.max": "20", "spark.executor.cores": "2"}, 20),
        # Kubernetes and YARN: instances (Spark's default 2) x cores (default 1); spark.cores.max is standalone's.
        ({**KUBERNETES, "spark.executor.instances": "10", "spark.executor.cores": "2"}, 20),
        ({**YARN, "spark.executor.instances": "10"}, 10),
        ({**KUBERNETES, "spark.executor.cores": "4"}, 8),
        ({**KUBERNETES, "spark.cores.max": "64", "spark.executor.instances": "3"}, 3),
        # Dynamic allocation: its bound; the instances only start it.
        ({**KUBERNETES, **DYNAMIC, "spark.dynamicAllocation.maxExecutors": "5", "spark.executor.cores": "4",
          "spark.executor.instances": "1"}, 20),
        # Standalone: spark.cores.max, capped by dynamic allocation's bound when there is one.
        ({**STANDALONE, **DYNAMIC, "spark.dynamicAllocation.maxExecutors": "3", "spark.executor.cores": "2",
          "spark.cores.max": "20"}, 6),
        ({**STANDALONE, **DYNAMIC, "spark.dynamicAllocation.maxExecutors": "30", "spark.executor.cores": "2",
          "spark.cores.max": "20"}, 20),
        ({**STANDALONE, **DYNAMIC, "spark.dynamicAllocation.maxExecutors": "3", "spark.executor.cores": "2"}, 6),
        # A task that takes 2 CPUs: half as many at once.
        ({**KUBERNETES, "spark.executor.instances": "10", "spark.executor.cores": "4", "spark.task.cpus": "2"}, 20),
        # spark.default.parallelism is a partition count, not cores: it changes nothing here.
        ({**STANDALONE, "spark.cores.max": "40", "spark.default.parallelism": "8"}, 40),
    ],
)  # fmt: skip
def test_the_settings_say_how_many_tasks_run_at_once(conf: dict[str, str], expected: int) -> None:
    cores = job_cores(conf)
    assert cores.count == expected, cores
    assert cores.bounded


@pytest.mark.parametrize(
    ("conf", "why"),
    [
        # A standalone application without spark.cores.max takes every core of the cluster.
        (STANDALONE, "without spark.cores.max"),
        ({**STANDALONE, "spark.executor.instances": "4"}, "without spark.cores.max"),  # not read by standalone
        # Standalone executors without spark.executor.cores take all of a worker's cores.
        ({**STANDALONE, **DYNAMIC, "spark.dynamicAllocation.maxExecutors": "2"}, "without spark.cores.max"),
        ({**KUBERNETES, **DYNAMIC, "spark.executor.instances": "2"}, "without spark.dynamicAllocation.maxExecutors"),
        ({**YARN, **DYNAMIC, "spark.dynamicAllocation.maxExecutors": str(2**31 - 1)}, "without spark.dynamic"),
        ({"spark.master": "mesos://old:5050", "spark.cores.max": "8"}, "not known"),
        ({**STANDALONE, "spark.cores.max": "lots"}, "without spark.cores.max"),  # not guessed at
    ],
)
def test_settings_that_bound_nothing_are_unbounded(conf: dict[str, str], why: str) -> None:
    cores = job_cores(conf)
    assert cores.count is None
    assert not cores.bounded
    assert why in cores.describe()


def test_a_backup_packs_for_the_jobs_cores_not_for_the_executors_registered_so_far() -> None:
    assert backup_tasks({**STANDALONE, "spark.cores.max": "20"}, 2) == (
        20, "the job's executor cores (spark.cores.max)"
    )  # fmt: skip
    # No count in the settings: what Spark counts (at least 2 on a cluster).
    tasks, why = backup_tasks(STANDALONE, 2)
    assert tasks == 2
    assert why.startswith("the executor cores registered so far (a standalone master without spark.cores.max")
    # The user's spark.default.parallelism above the cores: theirs.
    assert backup_tasks({**KUBERNETES, "spark.executor.instances": "2", "spark.default.parallelism": "50"}, 50) == (
        50, "spark.default.parallelism"
    )  # fmt: skip


def _tasks(tmp_path: Path, count: int) -> list[list[PartitionTask]]:

    return [
        [PartitionTask(str(tmp_path), "t", p, "t", p, Window(), "id", 0, 0, 0, None, {}, {}, 1 << 20)]
        for p in range(count)
    ]


@pytest.mark.parametrize(
    ("cores", "each"),
    [
        (JobCores(4, "spark.cores.max"), 25_000.0),  # 4 at once share 100,000 records/s
        (JobCores(50, "spark.cores.max"), 10_000.0),  # more cores than partitions: the 10 partitions share it
        (JobCores(None, "dynamic allocation without spark.dynamicAllocation.maxExecutors"), 10_000.0),
    ],
)
def test_a_restore_shares_its_limit_among_the_tasks_that_can_run_at_once(
    tmp_path: Path, cores: JobCores, each: float, caplog: pytest.LogCaptureFixture
) -> None:
    from spark_kafka_backup.restore.job import _shared_throttle
    from spark_kafka_backup.restore.settings import RestoreSettings
    from spark_kafka_backup.restore.throttle import Throttle

    settings = RestoreSettings(tmp_path, {}, None, throttle=Throttle(100_000, None))
    with caplog.at_level("INFO"):
        bundles = _shared_throttle(_tasks(tmp_path, 10), settings, cores)
    assert {task.throttle.records_per_second for bundle in bundles for task in bundle} == {each}
    said = caplog.text
    assert f"for each of the {100_000 / each:.0f} partitions restored at once" in said
    if not cores.bounded:
        assert "(all of them, dynamic allocation without spark.dynamicAllocation.maxExecutors)" in said
