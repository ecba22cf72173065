"""Shared fixtures: where the upstream golden files are, the suite's Kafka, and small builders.

The run checks itself for leftovers: every process a test starts inherits
``KBACKUP_TEST_RUN``, and when the whole run ends (after every worker and
fixture is gone) any Kafka, Spark or S3 server process still carrying it is
killed and fails the run.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.azure_server import AzureServer, azure_server_under_test
from tests.broker import BrokerUnderTest, broker_under_test, local_cluster, wanted_kind
from tests.gcs_server import GcsServer, gcs_server_under_test
from tests.leftovers import kill_leftovers
from tests.restore_helpers import Target
from tests.s3_server import S3Server, s3_server_under_test

#: ``pytester`` runs a small suite in-process: tests/unit/test_unit_guard.py shows the unit layer's guard at work.
pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parent.parent
#: The project's own golden vectors (formats/vectors, written by its generate.py).
VECTORS = REPO / "formats" / "vectors"
#: A partition in the record shapes the original tool's tests pin: offsets 0, 1, 3, 10, null key and value, headers.
SHAPES_TOPIC = VECTORS / "backup" / "shapes-topic"
#: Index files with nothing behind them.
INDEX_VECTORS = VECTORS / "indexes"


#: The unit layer (``./dev unit``): tests that need no broker, Spark, S3 server or other process.
UNIT_TESTS = REPO / "tests" / "unit"


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def unit_only(config: pytest.Config) -> bool:
    """Whether this run collects only the unit layer: then no jar is resolved and no JVM is prepared."""
    paths = [Path(str(arg).split("::")[0]) for arg in config.args] or [Path(config.invocation_params.dir)]
    return all((Path(config.invocation_params.dir) / path).resolve().is_relative_to(UNIT_TESTS) for path in paths)


def pytest_configure(config: pytest.Config) -> None:
    """Fetch the jars once before workers start; ``KBACKUP_TEST_BROKER=docker`` without an engine stops the run."""
    _keep_pytest_formatters()
    if unit_only(config):
        return
    kind = wanted_kind()
    if kind == "docker":
        from tests.broker import NO_ENGINE, docker_answers

        if not docker_answers():
            pytest.exit(f"{NO_ENGINE} (DOCKER_HOST={os.environ.get('DOCKER_HOST', 'default')})", returncode=3)
    if _is_worker(config):
        return
    os.environ.setdefault("KBACKUP_TEST_RUN", uuid.uuid4().hex)
    _prepare_jvms(kafka=kind == "local")


def _prepare_jvms(*, kafka: bool) -> None:
    """Fetch the jars and make (once per machine) the class archives the tests' Spark drivers and, with ``kafka``,
    their Kafka nodes map; tell the workers where they are. Spark's side and Kafka's side at once: on a fresh
    machine each is a minute of Ivy's one-by-one downloads, then of a JVM's class dump (2026-12-02: 118 s one after
    the other)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2, thread_name_prefix="spark-kafka-backup-test-jars") as pool:
        spark = pool.submit(_prepare_spark)
        archive = pool.submit(_prepare_kafka) if kafka else None
        spark.result()
        made = archive.result() if archive is not None else None
    if made is not None:
        from tests.jvm_archive import KAFKA_ARCHIVE_ENV

        os.environ[KAFKA_ARCHIVE_ENV] = str(made)


def _prepare_spark() -> None:
    from spark_kafka_backup.jvm_archive import ensure_driver_archive
    from spark_kafka_backup.spark.kafka_connector import connector_jars
    from spark_kafka_backup.spark_submit import job_environment, spark_home

    connector_jars()
    # The jobs' own driver archive, as the launcher makes it on a user's first job (spark_kafka_backup.jvm_archive):
    # every test job maps it (spark_submit_command adds it); made here once, not by several workers at once.
    ensure_driver_archive(job_environment(), spark_home())


def _prepare_kafka() -> Path | None:
    from devkit.kafka_cluster import kafka_jars
    from spark_kafka_backup.jars import cache_root
    from tests.jvm_archive import ensure_kafka_archive

    kafka_jars()
    return ensure_kafka_archive(cache_root() / "test-jvm")


#: Files whose tests run for minutes (Spark jobs started, killed and rerun; clusters started), longest first by
#: their wall time in CI. ``./dev test`` gives each file to one of four workers (``--dist loadfile`` with
#: ``--no-loadscope-reorder``, so in collection order rather than by number of tests): starting with these keeps
#: every worker busy to the end instead of leaving one alone with a long file.
LONG_FILES = (
    "test_restore.py",
    "test_erase.py",  # one long scenario of 4 to 6 minutes: started last, it alone was the end of a run
    "test_broker_failures.py",
    "test_spark_cluster.py",
    "test_packed_environment.py",
    "test_backup_continuous.py",
    "test_secured_kafka.py",
    "test_living_source.py",
    "test_kafka_log_shapes.py",
    "test_object_storage.py",
    "test_concurrency.py",
    "test_backup_snapshot.py",
    "test_crash_repair.py",
    "test_docs.py",
    "test_demo.py",
    "test_full_disk.py",
    "test_restore_repartition.py",
    "test_merge.py",
    "test_busy_machine.py",
    "test_local_kafka.py",
    "test_launcher.py",
    "test_topic_names.py",
    "test_source_reading.py",
    "test_backup_origin.py",
)


#: ``KBACKUP_LONG_SHARE=K/N``: the long scenarios of share K of N shares of about equal measured cost
#: (:mod:`tests.long_shares`) also carry the marker ``long_share``, which ``./dev test`` selects beside the quick tier.
LONG_SHARE_ENV = "KBACKUP_LONG_SHARE"


def long_share(node_ids: list[str], share: str) -> set[str]:
    """The long scenarios of share ``K/N``: N shares K = 0..N-1 cover every long scenario exactly once, whatever the
    order pytest collected them in."""
    from tests.long_shares import ShareError
    from tests.long_shares import long_share as balanced

    try:
        return balanced(node_ids, share)
    except ShareError as exc:
        raise pytest.UsageError(f"{LONG_SHARE_ENV}={exc}") from None


@pytest.hookimpl(tryfirst=True)  # before -m deselects: the marker it adds is what -m selects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Long files first (see :data:`LONG_FILES`); the rest keep their order. With :data:`LONG_SHARE_ENV`, the long
    scenarios of that share get the marker ``long_share``."""
    rank = {name: index for index, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONG_FILES)))
    share = os.environ.get(LONG_SHARE_ENV)
    if share:
        chosen = long_share([item.nodeid for item in items if item.get_closest_marker("long")], share)
        for item in items:
            if item.nodeid in chosen:
                item.add_marker(pytest.mark.long_share)


def pytest_report_header(config: pytest.Config) -> list[str]:
    share = os.environ.get(LONG_SHARE_ENV)
    said = [f"long tier: share {share} (the long scenarios of this share run too)"] if share else []
    return [*said, _cluster_header(config)]


def _cluster_header(config: pytest.Config) -> str:
    if unit_only(config):
        return "unit layer: no broker, Spark, S3 server or other process (tests/unit)"
    kind = wanted_kind()
    if kind == "external":
        return f"kafka: external cluster at {os.environ['KBACKUP_TEST_BOOTSTRAP']}"
    if kind == "docker":
        from tests.broker import compose_kafka_image

        return f"kafka: Apache Kafka in a container ({compose_kafka_image()})"
    from devkit.kafka_cluster import KAFKA_VERSION, kafka_jars
    from spark_kafka_backup.spark.kafka_connector import package_coordinate

    return (
        f"kafka: Apache Kafka {KAFKA_VERSION} (KRaft, started from the jars in {kafka_jars()}); "
        f"Spark's Kafka source: {package_coordinate()}"
    )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The controlling process, once everything else has ended: nothing may be left running. A worker (or the one
    process) first ends the Spark JVM its in-process jobs ran on (tests/in_process.py)."""
    from tests.in_process import stop_gateway

    stop_gateway()
    if _is_worker(session.config) or "KBACKUP_TEST_RUN" not in os.environ:
        return
    left = kill_leftovers(os.environ["KBACKUP_TEST_RUN"])
    if left:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        lines = "\n".join(f"  pid {pid}: {command}" for pid, command in left)
        message = f"processes left running by the tests (now killed):\n{lines}"
        if reporter is not None:
            reporter.write_line(message, red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _keep_pytest_formatters() -> None:
    """PySpark's own loggers (PySparkLogger: the query-context loggers an error of a Spark query creates in this
    process) do not propagate, so pytest attaches its capture handlers to them at every test phase, and
    PySparkLogger.addHandler gives each handler it is handed PySpark's JSON formatter: pytest's session-wide capture
    handler, and so every later test's ``caplog.text``, would be JSON. pytest's handlers keep their own formatter."""
    import logging

    from pyspark.logger import PySparkLogger

    formatting = PySparkLogger.addHandler

    def add_handler(self: PySparkLogger, handler: logging.Handler) -> None:
        if type(handler).__module__.startswith("_pytest"):
            logging.Logger.addHandler(self, handler)
        else:
            formatting(self, handler)

    PySparkLogger.addHandler = add_handler  # type: ignore[method-assign]


def upstream_golden_dir() -> Path | None:
    """The original project's v1 golden files: ``KBACKUP_UPSTREAM_GOLDEN``, else ``../shared/compat/upstream-v1``
    beside the checkout (there in CI, not beside a user's clone); ``None`` when neither holds them."""
    configured = os.environ.get("KBACKUP_UPSTREAM_GOLDEN")
    path = Path(configured) if configured else REPO.parent / "shared" / "compat" / "upstream-v1"
    if configured and not (path / "README.md").is_file():
        raise RuntimeError(f"KBACKUP_UPSTREAM_GOLDEN={configured}: no upstream-v1 golden files (README.md) there")
    return path if (path / "README.md").is_file() else None


#: Why the cross-check against the original's golden files does not run here, when it does not.
UPSTREAM_MISSING = (
    "cross-check against the original kafka-backup's golden files: they are not beside this checkout "
    "(../shared/compat/upstream-v1); set KBACKUP_UPSTREAM_GOLDEN to run it"
)


@pytest.fixture(scope="session")
def upstream() -> Path:
    """The original's golden files, for the cross-check against them alone (tests/unit/test_upstream_golden.py, skipped
    as a whole without them); every other test reads the project's own vectors."""
    path = upstream_golden_dir()
    assert path is not None, UPSTREAM_MISSING  # its one user skips as a whole without them
    return path


@pytest.fixture(scope="session")
def kafka() -> Iterator[BrokerUnderTest]:
    """The suite's broker (see tests/broker.py); started once per session."""
    with broker_under_test() as broker:
        yield broker


@pytest.fixture(scope="session")
def target(kafka: BrokerUnderTest) -> Iterator[Target]:
    """Where restores go: a second local cluster, started once per worker and shared by the files it runs (so a
    topic or consumer group name on it belongs to one test file); the same cluster with renamed topics otherwise. A
    test that needs a brand-new cluster starts its own (``local_cluster``)."""
    if kafka.kind == "local":
        with local_cluster() as broker:
            yield Target(broker)
    else:
        yield Target(kafka, prefix="restored-")


@contextmanager
def environment(env: dict[str, str]) -> Iterator[None]:
    """``env`` in this process's environment (and so the jobs') while the block runs."""
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """The server, with its endpoint and credentials in this process's environment (and so the jobs')."""
    with s3_server_under_test(tmp_path_factory.mktemp("s3")) as server, environment(server.env):
        yield server


@pytest.fixture(scope="module")
def azure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AzureServer]:
    """Azurite's Blob service, with ``AZURE_STORAGE_CONNECTION_STRING`` in this process's environment (and so the
    jobs')."""
    with azure_server_under_test(tmp_path_factory.mktemp("azure")) as server, environment(server.env):
        yield server


@pytest.fixture(scope="module")
def gcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GcsServer]:
    """fake-gcs-server, with ``STORAGE_EMULATOR_HOST`` in this process's environment (and so the jobs')."""
    with gcs_server_under_test(tmp_path_factory.mktemp("gcs")) as server, environment(server.env):
        yield server
