"""Jobs run inside the test worker, on one Spark JVM the worker keeps for its life.

A ``spark-submit`` costs a JVM's start-up, class loading and compilation before the job's first line: measured on
this 2-core machine (Apache Kafka 4.1.1 local node, Spark ``local[2]``, 3,000 records), a snapshot backup took 21 s
of machine CPU as ``spark-submit`` and 11 s in a process whose Spark JVM had run a job before; a restore 9.2 s and
2.5 s; tests/test_restore.py as a whole took 147 s of machine CPU instead of 252 s. The suite is CPU-bound, so
the jobs that run to their end on ``local[2]`` (the restores, the snapshot backups, with either Kafka source) run
here: the job's ``main`` is called as ``jobs/*.py`` calls it, with a new SparkSession on the kept JVM that the job
stops at its end, as under ``spark-submit``.

What a separate process would not share with the worker is set back after each job: the umask, the environment,
the package's loggers, standard output and error (captured, as the subprocess helpers capture them). Jobs that are
killed, signalled, or need their own environment on the executors (which inherit the JVM's, fixed at its start)
run as ``spark-submit`` (``in_process=False`` in the helpers); the command line and ``spark-submit`` themselves
are tested that way elsewhere. A job or session whose environment the kept JVM's no longer fits (a variable the JVM
was started with has gone since) ends that JVM and starts a new one (:func:`kept_jvm_fits`).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from spark_kafka_backup.jobs import job_file
from spark_kafka_backup.spark_submit import spark_submit_command
from tests.kafka_helpers import job_env

#: What the jobs run here get in their environment, as ``spark-submit`` would give them (set for each job only).
_LAUNCH_VARIABLES = ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_HOME", "SPARK_LOCAL_IP", "SPARK_SUBMIT_OPTS")
#: This process's environment when the JVM started: the executors' Python workers have it, whatever changed since.
_gateway_environment: dict[str, str] | None = None


#: Variables the JVM or Spark's launch reads (the jars' and class archives' cache among them): a job whose value
#: differs from the kept JVM's is not run here.
_LAUNCH_PREFIXES = ("SPARK_", "PYSPARK_", "JAVA_", "_JAVA_", "JDK_", "KBACKUP_JVM_", "KBACKUP_CACHE")


def can_run_in_process() -> bool:
    """Whether a job here would see the environment a ``spark-submit`` would give it, on the driver and the
    executors. Variables a test set or changed after the JVM started (S3 credentials, a fault to inject) reach the
    executors' Python workers as ``spark.executorEnv`` (:func:`_executor_environment`); a variable removed since,
    or one the JVM's launch reads, cannot: such a job needs a new JVM (:func:`kept_jvm_fits`)."""
    if _gateway_environment is None:
        return True
    now = _environment()
    if any(name not in now for name in _gateway_environment):
        return False
    return not any(name.startswith(_LAUNCH_PREFIXES) for name in _changed_since_launch(now))


def kept_jvm_fits() -> bool:
    """Whether a job or session can run here now: :func:`can_run_in_process`, or else no SparkContext is active and
    the kept JVM is ended, so that the next session starts one with this environment (a JVM first started inside a
    test that set a variable for itself would otherwise send every later job of this worker to ``spark-submit``)."""
    from pyspark import SparkContext

    if can_run_in_process():
        return True
    if SparkContext._active_spark_context is not None:
        return False
    stop_gateway()
    return True


def _changed_since_launch(now: dict[str, str]) -> dict[str, str]:
    assert _gateway_environment is not None
    return {name: value for name, value in now.items() if _gateway_environment.get(name) != value}


@contextlib.contextmanager
def _executor_environment() -> Iterator[None]:
    """What changed in this process's environment since the kept JVM started, given to the job's executors as
    ``spark.executorEnv.NAME`` (JVM system properties, which the job's new SparkConf reads), as a ``spark-submit``
    started now would give it to them by inheritance; cleared after the job."""
    from pyspark import SparkContext

    jvm = SparkContext._jvm
    if jvm is None or _gateway_environment is None:
        yield
        return
    properties = {f"spark.executorEnv.{name}": value for name, value in _changed_since_launch(_environment()).items()}
    for name, value in properties.items():
        jvm.java.lang.System.setProperty(name, value)
    try:
        yield
    finally:
        for name in properties:
            jvm.java.lang.System.clearProperty(name)


def _environment() -> dict[str, str]:
    """This process's environment but for what pytest changes for each test (``PYTEST_CURRENT_TEST``)."""
    return {key: value for key, value in os.environ.items() if key != "PYTEST_CURRENT_TEST"}


def _launch_environment(job: str) -> dict[str, str]:
    """The variables that make this process's SparkSession start its JVM as ``spark-submit --master local[2]``
    would (the same settings, JVM options and start-up logging)."""
    env = job_env()
    launch = {key: env[key] for key in _LAUNCH_VARIABLES if env.get(key)}
    # Spark's Kafka connector on the class path from the start, as ``--kafka-source spark`` has it: the JVM runs
    # jobs with either source.
    command = spark_submit_command(job, "--kafka-source", "spark", master="local[2]")
    submit_options = command[1 : command.index(str(job_file(job)))]
    launch["PYSPARK_SUBMIT_ARGS"] = shlex.join([*submit_options, "pyspark-shell"])
    return launch


#: The package's process-wide state (module, attribute): the confined roots, the state directories decided, the
#: warnings given once, the authentication failures seen (keys are passed, never kept: tests/unit/test_key_ring.py).
_PROCESS_STATE = (
    ("spark_kafka_backup.storage.local", "_roots"),
    ("spark_kafka_backup.partition.layout", "_decided"),
    ("spark_kafka_backup.partition.segment_reader", "_warned"),
    ("spark_kafka_backup.kafka.cluster", "_AUTHENTICATION_FAILURES"),
)


@contextlib.contextmanager
def process_state_kept() -> Iterator[None]:
    """The package's code runs here as in a process of its own: with its process-wide state as a new process has it
    (nothing decided, installed or warned about yet: what this process did before must not show through), and
    whatever it changes (umask, environment, loggers, that state) is put back afterwards."""
    import importlib

    modules = [(importlib.import_module(module), name) for module, name in _PROCESS_STATE]
    kept = [(module, name, getattr(module, name)) for module, name in modules]
    try:
        for module, name, value in kept:
            setattr(module, name, _fresh(value))
        with _umask_environment_and_loggers_kept():
            yield
    finally:
        for module, name, value in kept:
            setattr(module, name, value)


def _fresh(value: object) -> object:
    """An empty value of the kind a module-level state starts with (a dict, a set)."""
    assert isinstance(value, dict | set), f"no fresh value known for {type(value).__name__}"
    return type(value)()


@contextlib.contextmanager
def _umask_environment_and_loggers_kept() -> Iterator[None]:
    umask = os.umask(0o022)
    os.umask(umask)
    environment = dict(os.environ)
    names = ["", *(name for name in logging.root.manager.loggerDict if name.startswith("spark_kafka_backup"))]
    loggers = [logging.getLogger(name) for name in names]
    saved = [(logger, list(logger.handlers), logger.propagate, logger.level) for logger in loggers]
    # As a new process has them: no handler (pytest's capture on the root would swallow what Python's last-resort
    # handler prints to standard error), the root at WARNING, the package's loggers passing everything up.
    for logger in loggers:
        logger.handlers.clear()
        logger.propagate = True
        logger.setLevel(logging.WARNING if logger is logging.root else logging.NOTSET)
    try:
        yield
    finally:
        os.umask(umask)
        os.environ.clear()
        os.environ.update(environment)
        for logger, handlers, propagate, level in saved:
            logger.handlers[:] = handlers
            logger.propagate = propagate
            logger.setLevel(level)
        for name in logging.root.manager.loggerDict:
            if name.startswith("spark_kafka_backup") and name not in names:
                created = logging.getLogger(name)
                created.handlers.clear()
                created.propagate = True
                created.setLevel(logging.NOTSET)


def exit_status(main: Callable[[Sequence[str]], int], argv: Sequence[str]) -> int:
    """``main(argv)``'s result, or the status a process ending in its ``SystemExit`` would have (argparse's usage
    errors: 2; no code: 0; a message: printed to standard error, 1), as Python's own exit handling gives it."""
    try:
        return main(argv)
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1


def job_in_process(job: str, args: Sequence[str | Path]) -> subprocess.CompletedProcess[str] | None:
    """``job`` (``"backup"`` or ``"restore"``) run here with ``args``, or None where :func:`can_run_in_process`
    says it cannot be (the caller then runs it as a process of its own)."""
    if not kept_jvm_fits():
        return None
    if job == "backup":
        from spark_kafka_backup.backup.job import main
    else:
        from spark_kafka_backup.restore.job import main
    return run_job_in_process(job, main, args)


def run_job_in_process(
    job: str, main: Callable[[Sequence[str]], int], args: Sequence[str | Path]
) -> subprocess.CompletedProcess[str]:
    """``main(args)`` of ``job`` (``"backup"`` or ``"restore"``) in this process: its exit code and what it printed,
    as :func:`subprocess.run` with captured output would give them. Only where :func:`can_run_in_process`."""
    from pyspark import SparkContext

    assert can_run_in_process(), "the environment lost or changed a launch variable since this process's JVM started"
    global _gateway_environment
    # The JVM's environment is this one if this job starts it (a dry run or a refusal starts none).
    at_entry = _environment()
    texts = [str(arg) for arg in args]
    out, err = io.StringIO(), io.StringIO()
    jvm_output = _jvm_output_file()
    before = jvm_output.stat().st_size
    try:
        with (
            process_state_kept(),
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
            _jvm_started_into(jvm_output),
            _executor_environment(),
        ):
            os.environ.update(_launch_environment(job))
            code = exit_status(main, texts)
    finally:
        if _gateway_environment is None and SparkContext._gateway is not None:
            _gateway_environment = at_entry
        # A job that failed before stopping its SparkContext would hand it, and its executors' environment, to the
        # next job's getOrCreate: stopped here, as the end of a spark-submit process would.
        if SparkContext._active_spark_context is not None:
            SparkContext._active_spark_context.stop()
    with open(jvm_output, "rb") as written:
        written.seek(before)
        # What Spark's side printed (the streaming sink's commit lines, the executors' Python workers): the job's
        # output under spark-submit too.
        from_jvm = written.read().decode(errors="replace")
    return subprocess.CompletedProcess([f"jobs/{job}.py", *texts], code, out.getvalue() + from_jvm, err.getvalue())


_jvm_output: Path | None = None


def _jvm_output_file() -> Path:
    """Where the kept JVM and the processes it starts write their standard output and error."""
    global _jvm_output
    if _jvm_output is None:
        import tempfile

        handle, name = tempfile.mkstemp(prefix="kbackup-test-jvm-", suffix=".log")
        os.close(handle)
        _jvm_output = Path(name)
    return _jvm_output


@contextlib.contextmanager
def _jvm_started_into(output: Path) -> Iterator[None]:
    """While no JVM runs yet, this process's file descriptors 1 and 2 point at ``output``, so that the JVM the job
    starts (and every process it starts) writes there for its whole life."""
    from pyspark import SparkContext

    if SparkContext._gateway is not None:
        yield
        return
    saved = [os.dup(1), os.dup(2)]
    with open(output, "ab") as target:
        os.dup2(target.fileno(), 1)
        os.dup2(target.fileno(), 2)
    try:
        yield
    finally:
        for fd, copy in zip((1, 2), saved, strict=True):
            os.dup2(copy, fd)
            os.close(copy)


def stop_gateway() -> None:
    """End this process's Spark JVM, if a job started one, and wait for it (the run checks that nothing is left); the
    next job or session here starts a new one."""
    from pyspark import SparkContext

    global _gateway_environment, _jvm_output
    gateway = SparkContext._gateway
    if gateway is None:
        return
    process = getattr(gateway, "proc", None)
    with contextlib.suppress(Exception):
        gateway.shutdown()
    if process is not None:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        process.wait(30)
    SparkContext._gateway = None
    SparkContext._jvm = None
    _gateway_environment = None
    if _jvm_output is not None:
        _jvm_output.unlink(missing_ok=True)
        _jvm_output = None


@contextlib.contextmanager
def spark_session(make: Callable[[], Any] | None = None) -> Iterator[Any]:
    """A SparkSession on ``local[2]`` in this process, on the kept JVM (started as the jobs start it), for tests
    that query with Spark themselves (the ``kbackup`` data source); stopped after, with the process state put
    back. ``make``: how the session is made instead (a job's ``job_session``). Only where
    :func:`can_run_in_process`."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    assert kept_jvm_fits(), "a SparkContext is active on a JVM started with another environment"
    global _gateway_environment
    at_entry = _environment()
    session = None
    try:
        with process_state_kept(), _jvm_started_into(_jvm_output_file()), _executor_environment():
            os.environ.update(_launch_environment("restore"))
            session = make() if make else SparkSession.builder.master("local[2]").appName("kbackup-test").getOrCreate()
            yield session
    finally:
        if _gateway_environment is None and SparkContext._gateway is not None:
            _gateway_environment = at_entry
        if session is not None:
            session.stop()  # also forgets it as the default session: the next getOrCreate makes a new one
        if SparkContext._active_spark_context is not None:
            SparkContext._active_spark_context.stop()
