"""A Spark standalone cluster on loopback, started from the PySpark installation, for tests and benchmarks.

A :class:`SparkCluster` runs one master and N workers
(``spark-class org.apache.spark.deploy.master.Master`` and
``...deploy.worker.Worker``) of the ``pyspark`` package this interpreter
imports. Every process listens on 127.0.0.1 only, each worker has
``cores`` cores, ``memory`` of memory and its own work directory (where its
executors' logs land: ``work/APP/EXECUTOR/stderr``), and each process runs in
its own process group, so that the executors a worker launches go down with
it when that group is killed (their Python workers, in a process group of
PySpark's own, end when their executor's pipe closes). Lifecycle:

- ``start()`` launches the master and the workers, then waits until the
  master's status page lists every worker ALIVE;
- ``kill_worker(i)`` sends SIGKILL to worker ``i``'s whole process group (the
  worker and its executors: a machine lost);
  ``start_worker(i)`` starts it again (a new worker id, same directory);
- ``stop()`` kills every process group and removes the directory; the
  context manager calls it also when the body raised.

Jobs are submitted with ``--master`` :attr:`SparkCluster.master_url`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from devkit.kafka_cluster import die_with_parent, free_port
from spark_kafka_backup.errors import SparkKafkaBackupError
from spark_kafka_backup.spark_submit import spark_home


class SparkClusterError(SparkKafkaBackupError):
    """A local Spark standalone cluster could not be started."""


def spark_class(worker_python: Path | None = None) -> Path:
    """``spark-class`` beside this interpreter (a venv's ``bin``, where pip puts PySpark's scripts), or PySpark's own
    Spark home's for a cluster of ``worker_python``."""
    if worker_python is not None:
        return installed_spark_home() / "bin" / "spark-class"
    return Path(sys.executable).parent / "spark-class"


def installed_spark_home() -> Path:
    """The Spark home pip's PySpark is, as a cluster's Spark installation is: with ``python/lib/pyspark.zip`` and
    py4j's, which executors put on their Python workers' path."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def cluster_environment(worker_python: Path | None = None) -> dict[str, str]:
    """The environment of every cluster process: loopback only, this interpreter for Python, its ``bin`` first, and
    the jobs' Spark home (:func:`~spark_kafka_backup.spark_submit.spark_home`), which executors pass on to their
    Python workers.

    With ``worker_python``, the cluster is one with nothing of the jobs installed: ``worker_python`` (an interpreter
    with no spark-kafka-backup, PySpark, pyarrow, numpy, confluent-kafka) is its Python, first on PATH, this
    interpreter's ``bin`` is not on PATH, no PYTHONPATH or virtual environment is inherited, and Spark's home is
    PySpark's own (its Python workers import PySpark from Spark's archives)."""
    bin_dir = str(Path(sys.executable).parent)
    loopback = {"SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOCAL_HOSTNAME": "127.0.0.1"}
    if worker_python is None:
        return {
            **os.environ,
            "SPARK_HOME": str(spark_home()),
            "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
            **loopback,
            "PYSPARK_PYTHON": sys.executable,
        }
    inherited = {name: value for name, value in os.environ.items() if name not in ("PYTHONPATH", "VIRTUAL_ENV")}
    path = [entry for entry in os.environ.get("PATH", "").split(os.pathsep) if entry and entry != bin_dir]
    return {
        **inherited,
        "SPARK_HOME": str(installed_spark_home()),
        "PATH": os.pathsep.join([str(worker_python.parent), *path]),
        **loopback,
        "PYSPARK_PYTHON": str(worker_python),
    }


@dataclass
class SparkProcess:
    """The master or one worker: its command line, directory and running process."""

    name: str
    command: list[str]
    directory: Path
    process: subprocess.Popen[bytes] | None = None
    started: int = 0

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def log(self) -> Path:
        return self.directory / f"{self.name}.log"

    def log_tail(self, lines: int = 20) -> str:
        if not self.log.is_file():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:]) + "\n"


@dataclass
class SparkCluster:
    """A standalone master and ``workers`` workers on loopback; use as a context manager."""

    workers: int = 2
    cores: int = 1
    memory: str = "2g"
    start_timeout: float = 120
    #: JVM options of the master and the workers (``SPARK_DAEMON_JAVA_OPTS``); empty: the JVM's defaults.
    daemon_java_options: str = ""
    #: The Python of a cluster with nothing of the jobs installed (see :func:`cluster_environment`); None: this
    #: interpreter, with everything.
    worker_python: Path | None = None
    directory: Path | None = None
    master_port: int = field(default_factory=free_port)
    master_ui_port: int = field(default_factory=free_port)
    master: SparkProcess | None = None
    nodes: list[SparkProcess] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    def describe(self) -> str:
        return f"Spark standalone at {self.master_url} ({self.workers} workers x {self.cores} core, {self.memory})"

    def start(self) -> SparkCluster:
        self.directory = Path(tempfile.mkdtemp(prefix="kbackup-spark-"))
        try:
            self.master = self._process(
                "master",
                "org.apache.spark.deploy.master.Master",
                "--host", "127.0.0.1", "--port", str(self.master_port), "--webui-port", str(self.master_ui_port),
            )  # fmt: skip
            self._launch(self.master)
            self._wait(lambda status: True, "the master")
            for index in range(self.workers):
                work = self.directory / f"worker-{index}"
                work.mkdir()
                worker = self._process(
                    f"worker-{index}",
                    "org.apache.spark.deploy.worker.Worker",
                    "--host", "127.0.0.1", "--webui-port", str(free_port()), "--cores", str(self.cores),
                    "--memory", self.memory, "--work-dir", str(work), self.master_url,
                )  # fmt: skip
                self.nodes.append(worker)
                self._launch(worker)
            self.wait_for_workers(self.workers)
        except BaseException:
            self.stop()
            raise
        return self

    def work_dir(self, index: int) -> Path:
        """Worker ``index``'s work directory: ``APP/EXECUTOR/stderr`` are its executors' logs."""
        return self.nodes[index].directory / f"worker-{index}"

    def wait_for_workers(self, count: int) -> None:
        self._wait(lambda status: self._alive(status) >= count, f"{count} alive workers")

    def kill_worker(self, index: int) -> None:
        """SIGKILL to worker ``index``'s process group: the worker and its executors (a machine lost)."""
        self._kill(self.nodes[index])

    def start_worker(self, index: int) -> None:
        """Start a killed worker again (same cores, memory and work directory)."""
        worker = self.nodes[index]
        if not worker.running:
            self._launch(worker)

    def stop(self) -> None:
        for process in [*self.nodes, *([self.master] if self.master else [])]:
            self._kill(process)
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None

    def __enter__(self) -> SparkCluster:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- steps ---------------------------------------------------------------

    def _process(self, name: str, main: str, *args: str) -> SparkProcess:
        assert self.directory is not None
        return SparkProcess(name, [str(spark_class(self.worker_python)), main, *args], self.directory)

    def _launch(self, process: SparkProcess) -> None:
        env = cluster_environment(self.worker_python)
        if self.daemon_java_options:
            env["SPARK_DAEMON_JAVA_OPTS"] = self.daemon_java_options
        with open(process.log, "ab") as out:
            process.process = subprocess.Popen(
                process.command,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=process.directory,
                preexec_fn=die_with_parent,
            )
        process.started += 1

    @staticmethod
    def _kill(process: SparkProcess) -> None:
        if process.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.process.wait(30)

    def _status(self) -> dict[str, list[dict[str, object]]]:
        url = f"http://127.0.0.1:{self.master_ui_port}/json/"
        with urllib.request.urlopen(url, timeout=5) as response:
            status: dict[str, list[dict[str, object]]] = json.load(response)
        return status

    @staticmethod
    def _alive(status: dict[str, list[dict[str, object]]]) -> int:
        return sum(1 for worker in status.get("workers", []) if worker.get("state") == "ALIVE")

    def _wait(self, ready: object, what: str) -> None:
        deadline = time.monotonic() + self.start_timeout
        while True:
            for process in [*([self.master] if self.master else []), *self.nodes]:
                if process.started and not process.running:
                    raise SparkClusterError(f"Spark {process.name} exited:\n{process.log_tail()}")
            with contextlib.suppress(OSError, ValueError):
                if callable(ready) and ready(self._status()):
                    return
            if time.monotonic() > deadline:
                tails = "".join(p.log_tail() for p in [*([self.master] if self.master else []), *self.nodes])
                raise SparkClusterError(f"{self.describe()}: no {what} within {self.start_timeout:.0f} s:\n{tails}")
            time.sleep(0.3)
