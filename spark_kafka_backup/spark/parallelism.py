"""How many tasks of a job can run at once: the cores its executors are given, read from the job's Spark settings.

Spark's ``defaultParallelism`` is no answer to that: on a cluster it counts the executor cores *registered* when
it is asked (at least 2), and a job asks soon after its session starts, when a standalone master may still be
handing out executors (it does not wait for them) and Kubernetes or YARN wait at most 30 s for 80 % of them
(``spark.scheduler.minRegisteredResourcesRatio``, ``spark.scheduler.maxRegisteredResourcesWaitingTime``); and
``spark.default.parallelism``, when set, replaces the count with a partition count of the user's. The backup packs
small partitions into at least this many tasks for its whole run, and a restore divides its rate limits among this
many tasks at once: a count too low leaves cores idle for ever, or lets the restore exceed its limit. So the count
comes from what the settings grant, divided by ``spark.task.cpus``:

- ``local[N]``: N (``local[*]`` this machine's processors, ``local`` 1, ``local-cluster[W,C,M]`` W x C);
- a standalone master (``spark://``): ``spark.cores.max``, capped by dynamic allocation's
  ``spark.dynamicAllocation.maxExecutors`` x ``spark.executor.cores`` when both are set;
- Kubernetes and YARN: ``spark.executor.instances`` (Spark's default 2) x ``spark.executor.cores`` (default 1),
  or with dynamic allocation ``spark.dynamicAllocation.maxExecutors`` x ``spark.executor.cores``;
- anything else, or a setting missing where it is needed (a standalone master without ``spark.cores.max``: the
  application takes every core the cluster has; dynamic allocation without ``maxExecutors``: Spark's default is no
  bound): no bound (:attr:`JobCores.count` ``None``). A restore then counts every partition as running at once
  (never over its limit); the backup packs for the cores registered.

A ceiling rather than a grant (``spark.cores.max`` larger than the cluster) over-counts: a backup's batch is then
more tasks than cores, run in waves; a restore stays below its limit.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

#: Spark's default ``spark.dynamicAllocation.maxExecutors`` (Int.MaxValue): no bound.
_UNBOUNDED = 2**31 - 1
#: Spark's default ``spark.executor.instances`` on Kubernetes and YARN.
_DEFAULT_INSTANCES = 2

_LOCAL = re.compile(r"local(?:\[(?P<threads>\d+|\*)(?:,\d+)?\])?$")
_LOCAL_CLUSTER = re.compile(r"local-cluster\[(?P<workers>\d+),\s*(?P<cores>\d+),\s*\d+\]$")


@dataclass(frozen=True)
class JobCores:
    """The tasks a job can run at once (``None``: its settings set no bound), and which settings say so."""

    count: int | None
    source: str

    @property
    def bounded(self) -> bool:
        return self.count is not None

    def describe(self) -> str:
        return self.source if self.count is None else f"{self.count} ({self.source})"


def job_cores(conf: Mapping[str, str]) -> JobCores:
    """The tasks the job's settings let run at once (see the module docstring)."""
    master = conf.get("spark.master", "")
    found = _granted_cores(master, conf)
    task_cpus = _positive(conf.get("spark.task.cpus")) or 1
    if found.count is None or task_cpus == 1:
        return found
    return JobCores(max(1, found.count // task_cpus), f"{found.source} / spark.task.cpus")


def backup_tasks(conf: Mapping[str, str], default_parallelism: int) -> tuple[int, str]:
    """The least number of tasks a backup's micro-batch is packed into, and why: the job's cores, or Spark's
    ``defaultParallelism`` where that is more (a ``spark.default.parallelism`` of the user's) or the settings name
    no count (the executor cores registered so far)."""
    cores = job_cores(conf)
    if cores.count is not None and cores.count >= default_parallelism:
        return cores.count, f"the job's executor cores ({cores.source})"
    if _positive(conf.get("spark.default.parallelism")) is not None:
        return default_parallelism, "spark.default.parallelism"
    return default_parallelism, f"the executor cores registered so far ({cores.source})"


def _granted_cores(master: str, conf: Mapping[str, str]) -> JobCores:
    if local := _LOCAL.match(master):
        threads = local.group("threads")
        count = 1 if threads is None else (os.cpu_count() or 1) if threads == "*" else int(threads)
        return JobCores(count, f"{master} master")
    if cluster := _LOCAL_CLUSTER.match(master):
        return JobCores(int(cluster.group("workers")) * int(cluster.group("cores")), f"{master} master")
    per_executor = _positive(conf.get("spark.executor.cores"))
    dynamic = conf.get("spark.dynamicAllocation.enabled", "false").strip().lower() == "true"
    most = _positive(conf.get("spark.dynamicAllocation.maxExecutors")) if dynamic else None
    if most is not None and most >= _UNBOUNDED:
        most = None
    if master.startswith("spark://"):
        cores_max = _positive(conf.get("spark.cores.max"))
        by_executors = most * per_executor if most is not None and per_executor is not None else None
        if cores_max is not None and (by_executors is None or cores_max <= by_executors):
            return JobCores(cores_max, "spark.cores.max")
        if by_executors is not None:
            return JobCores(by_executors, "spark.dynamicAllocation.maxExecutors x spark.executor.cores")
        return JobCores(None, "a standalone master without spark.cores.max: the job may take every core it has")
    if master.startswith(("k8s://", "yarn")):
        if dynamic:
            if most is None:
                return JobCores(None, "dynamic allocation without spark.dynamicAllocation.maxExecutors")
            return JobCores(most * (per_executor or 1), "spark.dynamicAllocation.maxExecutors x spark.executor.cores")
        instances = _positive(conf.get("spark.executor.instances")) or _DEFAULT_INSTANCES
        return JobCores(instances * (per_executor or 1), "spark.executor.instances x spark.executor.cores")
    return JobCores(None, f"master {master or '(none)'}: its cores are not known from the settings")


def _positive(text: str | None) -> int | None:
    try:
        value = int(text.strip()) if text is not None else 0
    except ValueError:
        return None
    return value if value > 0 else None
