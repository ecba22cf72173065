"""The ``spark-submit`` command of a spark-kafka-backup job, with the Spark that PySpark installed beside
spark-kafka-backup.

Used by ``spark-kafka-backup backup`` / ``spark-kafka-backup restore`` (:mod:`spark_kafka_backup.launcher`), the
demo, the benchmarks and the tests. The job file comes from the installed
package (:mod:`spark_kafka_backup.jobs`), so nothing here needs a checkout.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import shlex
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from spark_kafka_backup.jobs import job_file
from spark_kafka_backup.jvm_archive import existing_driver_archive, sharing_options


def spark_home(master: str | None = None) -> Path:
    """``SPARK_HOME`` when set, else the PySpark installation (its ``bin/spark-submit`` needs no PATH setup) seen
    through :func:`archive_free_home`, or as it is when that cannot be made or the master is YARN (``spark-submit``
    ships ``SPARK_HOME/python/lib/pyspark.zip`` to YARN's containers and refuses to start without it)."""
    given = os.environ.get("SPARK_HOME")
    if given:
        return Path(given)
    import pyspark

    from spark_kafka_backup.jars import cache_root

    installed = Path(pyspark.__file__).resolve().parent
    if master is not None and master.startswith("yarn"):
        return installed
    return archive_free_home(installed, cache_root().absolute() / "spark-home", pyspark.__version__) or installed


def archive_free_home(installed: Path, parent: Path, version: str) -> Path | None:
    """A Spark home of links to the entries of ``installed`` (pip's PySpark) but for ``python/lib``, made once in
    ``parent``; None when it cannot be made there (no write access, no symbolic links).

    Spark puts ``SPARK_HOME/python/lib/pyspark.zip`` and py4j's zip first on the path of every Python process it
    starts: the driver, each Python daemon and runner, and so every worker. Python keeps no bytecode for modules
    imported from a zip and compiles them again in each process: importing PySpark's daemon costs 0.48 CPU-s from
    the zip against 0.11 from the installed package (measured here, PySpark 4.3.0, Python 3.11), paid by each of the
    half dozen Python processes a backup starts, and again by workers for their modules. Without the archives in the
    Spark home, those processes import PySpark and py4j from this interpreter's packages, the same files compiled
    once. Any other Spark home (``SPARK_HOME`` given) is used as it is.
    """
    home = parent / f"pyspark-{version}-{hashlib.sha256(str(installed).encode()).hexdigest()[:12]}"
    if _links_to(home, installed):
        return home
    making = parent / f".{home.name}.{os.getpid()}"
    try:
        shutil.rmtree(making, ignore_errors=True)
        (making / "python").mkdir(parents=True)
        for entry in installed.iterdir():
            if entry.name == "jars":
                (making / "jars").symlink_to(shared_jars(entry, parent.parent / "spark-jars", version, parent) or entry)
            elif entry.name != "python":
                (making / entry.name).symlink_to(entry)
        for entry in (installed / "python").iterdir():
            if entry.name != "lib":
                (making / "python" / entry.name).symlink_to(entry)
        if home.exists() and not _links_to(home, installed):  # damaged, or made for files since changed
            stale = parent / f".{home.name}.stale.{os.getpid()}"
            home.rename(stale)
            shutil.rmtree(stale, ignore_errors=True)
        making.rename(home)  # refused when another process made it first: then that one is used
    except OSError:
        shutil.rmtree(making, ignore_errors=True)
    return home if _links_to(home, installed) else None


def _links_to(home: Path, installed: Path) -> bool:
    """Whether ``home`` links to every entry of ``installed`` (and of its ``python``, but ``lib``) and to nothing
    else."""
    try:
        for made, source, left_out in ((home, installed, "python"), (home / "python", installed / "python", "lib")):
            names = {entry.name for entry in source.iterdir()} - {left_out}
            if {entry.name for entry in made.iterdir()} - {left_out} != names or (made / left_out).is_symlink():
                return False
            for name in names:
                linked, wanted = (made / name).resolve(), (source / name).resolve()
                if linked != wanted and not (name == "jars" and _jar_listing(linked) == _jar_listing(wanted)):
                    return False
    except OSError:
        return False
    return not (home / "python" / "lib").exists()


def shared_jars(jars: Path, parent: Path, version: str, homes_parent: Path) -> Path | None:
    """One set of PySpark's jars, hard links to an install's, made once in ``parent`` for every install of
    ``version`` whose jars are the same (names and sizes); None when the links cannot be made (another file system):
    that install's Spark home then keeps its own. ``homes_parent``: where the Spark homes are (the sets they point
    at are kept).

    The Spark homes of every checkout and virtual environment point their ``jars`` at it, so that one class archive
    of the driver serves them all (:mod:`spark_kafka_backup.jvm_archive`): the JVM accepts an archive for the very jar
    files it was made from, reached through any path (Java 17 compares the files, not their names), and an archive is
    some 160 MB and up to minutes to make."""
    listing = _jar_listing(jars)
    digest = hashlib.sha256(repr(listing).encode()).hexdigest()[:12]
    shared = parent / f"pyspark-{version}-{digest}"
    if _jar_listing(shared) == listing:
        return shared
    making = parent / f".{shared.name}.{os.getpid()}"
    try:
        shutil.rmtree(making, ignore_errors=True)
        making.mkdir(parents=True)
        for name, _ in listing:
            os.link(jars / name, making / name)
        making.rename(shared)  # refused when another process made it first: then that one is used
    except OSError:
        shutil.rmtree(making, ignore_errors=True)
    if _jar_listing(shared) != listing:
        return None
    # A set no Spark home of a living install points at any more (the installs upgraded or removed) may hold the only
    # links to its jars: removed when another set is made. One a home points at stays, also while its jobs run.
    homes = [home for home in homes_parent.glob("pyspark-*") if (home / "bin").exists()]
    held = {(home / "jars").resolve() for home in homes}
    for other in parent.glob("pyspark-*"):
        if other != shared and other.resolve() not in held:
            shutil.rmtree(other, ignore_errors=True)
    return shared


def _jar_listing(directory: Path) -> list[tuple[str, int]]:
    """The jar files of ``directory`` (those Spark puts on its class path) by name and size; empty when none."""
    try:
        return sorted((jar.name, jar.stat().st_size) for jar in directory.glob("*.jar"))
    except OSError:
        return []


def uses_spark_kafka_source(args: Sequence[str]) -> bool:
    """Whether job arguments choose Spark's own Kafka source (``--kafka-source spark``)."""
    texts = list(args)
    return "--kafka-source=spark" in texts or any(
        a == "--kafka-source" and b == "spark" for a, b in itertools.pairwise(texts)
    )


#: Spark's logging until the job sets its level (see the file).
STARTUP_LOGGING = Path(__file__).resolve().parent / "jobs" / "log4j2.properties"
#: Spark settings the jobs are started with unless given: no UI (a port and a thread per job that nobody looks at,
#: unless a setting asks for what it serves: see :func:`asks_for_the_ui`); and time for a Python process Spark starts
#: to answer its handshake on a busy machine (Spark's default is 15 s).
NO_UI = "spark.ui.enabled=false"
DEFAULT_CONF = (NO_UI, "spark.python.authenticate.socketTimeout=120s")
#: The JVM's quick (C1) compiler alone, for a driver that carries no records (see :func:`spark_submit_command`).
QUICK_JIT = "-XX:TieredStopAtLevel=1"


def spark_conf_arguments(args: Sequence[str]) -> list[str]:
    """The ``KEY=VALUE`` of each ``--spark-conf`` among a job's arguments."""
    found = [item.partition("=")[2] for item in args if item.startswith("--spark-con") and "=" in item.split()[0]]
    # The job's parser takes any unambiguous start of the option's name (argparse's abbreviations).
    found += [value for flag, value in itertools.pairwise(args) if len(flag) > 10 and "--spark-conf".startswith(flag)]
    return found


def asks_for_the_ui(settings: Sequence[str]) -> bool:
    """Whether a ``KEY=VALUE`` setting turns on something only Spark's UI serves (its Prometheus endpoints): the
    UI the launcher leaves off otherwise is then on, so that what the setting asks for is there to scrape."""
    for setting in settings:
        key, _, value = setting.partition("=")
        if key == "spark.ui.prometheus.enabled" and value.strip().lower() == "true":
            return True
        if key.startswith("spark.metrics.conf.") and value.strip().endswith("sink.PrometheusServlet"):
            return True  # a sink of Spark's Prometheus servlet class, whatever its name
    return False


def spark_submit_command(
    job: str, *args: str | Path, master: str = "local[2]", conf: Sequence[str] = (), archive: str | None = None
) -> list[str]:
    """``spark-submit --master MASTER [--conf K=V ...] JOB_FILE ARGS``.

    With ``archive`` (a packed environment's URI, :mod:`spark_kafka_backup.packing`), Spark unpacks it in each
    executor's working directory (``spark.archives``, added to any given) and runs the executors' Python from it;
    the driver's Python stays this interpreter.

    With ``--kafka-source spark`` among ``args``, Spark's Kafka connector jars
    (resolved once into spark-kafka-backup's cache, see :mod:`spark_kafka_backup.jars`) are passed
    with ``--jars``. The Spark UI is off unless a ``conf`` turns it on, or a setting (``conf`` or a job's
    ``--spark-conf``) asks for its Prometheus endpoints (:func:`asks_for_the_ui`).
    """
    texts = [str(arg) for arg in args]
    jars: list[str] = []
    if uses_spark_kafka_source(texts):
        from spark_kafka_backup.spark.kafka_connector import connector_jars

        jars = ["--jars", ",".join(str(jar) for jar in connector_jars())]
    given = {setting.partition("=")[0] for setting in conf}
    with_ui = asks_for_the_ui([*conf, *spark_conf_arguments(texts)])
    defaults = [d for d in DEFAULT_CONF if d.partition("=")[0] not in given and not (with_ui and d == NO_UI)]
    settings = defaults + list(conf)
    if archive is not None:
        settings = with_packed_environment(settings, archive, given)
    if "spark.driver.extraJavaOptions" not in given:
        # Quiet from the JVM's start: Spark's level is set by the job only once its session exists.
        options = [f"-Dlog4j2.configurationFile={STARTUP_LOGGING.as_uri()}"]
        if not jars:
            # No record passes through the driver's JVM (spark-kafka-backup's source reads and writes in its Python
            # tasks, a restore's tasks produce from Python): its code runs briefly, so the quick compiler alone
            # saves the optimizing one's CPU (about 5 CPU seconds of a job's start-up on two cores).
            options.insert(0, QUICK_JIT)
        # Spark's classes ready to map, when the launcher made the archive (spark_kafka_backup.jvm_archive).
        options[0:0] = sharing_options(existing_driver_archive(os.environ, spark_home(master)))
        settings.insert(0, f"spark.driver.extraJavaOptions={' '.join(options)}")
    confs = [part for setting in settings for part in ("--conf", setting)]
    return [
        str(spark_home(master) / "bin" / "spark-submit"),
        "--master",
        master,
        *confs,
        *jars,
        str(job_file(job)),
        *texts,
    ]


def with_packed_environment(settings: list[str], archive: str, given: set[str]) -> list[str]:
    """``settings`` with the packed environment ``archive`` (:mod:`spark_kafka_backup.packing`) shipped to the
    executors.

    One Python command has to work on the driver and on every executor: Spark runs the Python of a Python data
    source's planning on the driver and of its reads on the executors, from the same ``spark.pyspark.python``. It is
    the bare name ``python3.X`` (this interpreter's version, which the archive's compiled files are for): on each
    executor its ``PATH`` finds the machine's Python and ``spark.executorEnv.PYTHONPATH`` puts the unpacked
    ``kbackup-env/site-packages`` of its working directory first; on the driver :func:`job_environment` puts a
    directory first on ``PATH`` whose ``python3.X`` runs this interpreter (:func:`driver_python_directory`). The
    driver's own Python stays this interpreter. A setting given is kept (``spark.archives`` and the executors'
    ``PYTHONPATH`` are added to)."""
    from spark_kafka_backup.packed import ENV_NAME
    from spark_kafka_backup.packing import EXECUTOR_PATH

    def values(name: str) -> list[str]:
        return [setting.partition("=")[2] for setting in settings if setting.partition("=")[0] == name and setting]

    joined = {
        "spark.archives": ",".join([*filter(None, values("spark.archives")), f"{archive}#{ENV_NAME}"]),
        "spark.executorEnv.PYTHONPATH": os.pathsep.join(
            [EXECUTOR_PATH, *filter(None, values("spark.executorEnv.PYTHONPATH"))]
        ),
    }
    result = [setting for setting in settings if setting.partition("=")[0] not in joined]
    result.extend(f"{name}={value}" for name, value in joined.items())
    if "spark.pyspark.python" not in given:
        result.append(f"spark.pyspark.python={executor_python()}")
    if "spark.pyspark.driver.python" not in given:
        result.append(f"spark.pyspark.driver.python={sys.executable}")
    return result


def executor_python() -> str:
    """The Python command of a job with a packed environment: ``python3.X`` of this interpreter's version."""
    return f"python{sys.version_info.major}.{sys.version_info.minor}"


def driver_python_directory() -> Path:
    """A directory whose :func:`executor_python` runs this interpreter (a two-line script, made once in the cache:
    a link would lose a virtual environment, which Python finds beside the path it was started by)."""
    from spark_kafka_backup.jars import cache_root

    interpreter = sys.executable
    directory = cache_root().absolute() / "driver-python" / hashlib.sha256(interpreter.encode()).hexdigest()[:16]
    script = directory / executor_python()
    text = f'#!/bin/sh\nexec {shlex.quote(interpreter)} "$@"\n'
    if not (script.is_file() and script.read_text() == text):
        directory.mkdir(parents=True, exist_ok=True)
        making = directory / f".{script.name}.{os.getpid()}"
        making.write_text(text)
        making.chmod(0o755)
        os.replace(making, script)
    return directory


def job_environment(
    *, importable: Path | None = None, master: str | None = None, packed: bool = False
) -> dict[str, str]:
    """The environment of a submitted job.

    This interpreter runs the driver and every executor's Python (unless
    ``PYSPARK_PYTHON`` is set), ``SPARK_HOME`` is :func:`spark_home` for ``master``
    unless set, the driver listens on loopback unless ``SPARK_LOCAL_IP`` says
    otherwise, and ``importable`` (a source tree) is put first on ``PYTHONPATH``.
    ``packed``: the executors run a packed environment (:func:`with_packed_environment`), and the driver's
    ``python3.X`` is this interpreter.
    """
    env = dict(os.environ)
    if packed:
        env["PATH"] = str(driver_python_directory()) + os.pathsep + env.get("PATH", "")
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", env["PYSPARK_PYTHON"])
    env.setdefault("SPARK_HOME", str(spark_home(master)))
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if importable is not None:
        env["PYTHONPATH"] = str(importable) + os.pathsep + os.environ.get("PYTHONPATH", "")
    return env
