"""``spark-kafka-backup backup …`` and ``spark-kafka-backup restore …``: submit a job to Spark from any directory.

The launcher adds three options to the job's own (``--master``, ``--conf``,
``--print-command``), checks the job's arguments with the job's parser
before any JVM starts (``--help`` and usage errors answer at once, exit 0
and 2), then replaces itself with the ``spark-submit`` of the PySpark
installed beside spark-kafka-backup (:func:`spark_kafka_backup.spark_submit.spark_submit_command`):
the job file comes from the installed package, Spark's Kafka connector is
added for ``--kafka-source spark``, and this interpreter runs the driver and
the executors' Python unless ``PYSPARK_PYTHON`` says otherwise. From then on
the exit code and the signals are spark-submit's: the job's own (0, 1, 2;
143 for SIGTERM to the JVM).

``spark-submit jobs/backup.py`` (or the package's ``spark_kafka_backup/jobs/backup.py``)
stays the way for Spark users who build their own command.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from spark_kafka_backup.boundary import exit_code
from spark_kafka_backup.errors import SparkKafkaBackupError, UsageError
from spark_kafka_backup.logsetup import print_error

#: The master when ``--master`` is not given: every core of this machine.
DEFAULT_MASTER = "local[*]"


@dataclass
class Launch:
    """The launcher's own options, taken out of a job's command line."""

    master: str = DEFAULT_MASTER
    conf: list[str] = field(default_factory=list)
    #: The packed environment the executors run (``--archive``): a local file or a URI Spark fetches.
    archive: str | None = None
    print_command: bool = False
    job_args: list[str] = field(default_factory=list)


def split_arguments(argv: Sequence[str]) -> Launch:
    """Separate ``--master M``, ``--conf K=V`` (repeatable) and ``--print-command`` from the job's arguments."""
    launch = Launch()
    items = list(argv)
    index = 0
    while index < len(items):
        item = items[index]
        name, equals, inline = item.partition("=")
        if name in ("--master", "--conf", "--archive"):
            if equals:
                value = inline
            elif index + 1 < len(items):
                index += 1
                value = items[index]
            else:
                raise UsageError(f"{name} needs a value")
            if name == "--master":
                if not value:
                    raise UsageError("--master needs a value, e.g. local[2] or spark://HOST:7077")
                launch.master = value
            elif name == "--archive":
                if not value:
                    raise UsageError("--archive needs a value: a packed environment (spark-kafka-backup pack)")
                launch.archive = value
            else:
                if "=" not in value or not value.partition("=")[0]:
                    raise UsageError(f"--conf {value!r}: expected KEY=VALUE, e.g. spark.executor.memory=4g")
                launch.conf.append(value)
        elif item == "--print-command":
            launch.print_command = True
        elif item == "--":
            launch.job_args.extend(items[index + 1 :])
            break
        else:
            launch.job_args.append(item)
        index += 1
    return launch


def add_launcher_options(parser: argparse.ArgumentParser) -> None:
    """The launcher's options, for the job's ``--help``."""
    group = parser.add_argument_group("Spark (spark-kafka-backup backup / spark-kafka-backup restore only)")
    group.add_argument(
        "--master", help=f"Spark master URL (default {DEFAULT_MASTER}): local[N], spark://HOST:7077, yarn"
    )
    group.add_argument(
        "--conf",
        action="append",
        metavar="KEY=VALUE",
        help="a Spark setting passed to spark-submit, set before the driver's JVM starts (repeatable; e.g. "
        "spark.driver.memory). --spark-conf sets one in the job's Spark session instead. The Spark UI is off "
        "(spark.ui.enabled=false) unless a setting turns it on or asks for its Prometheus endpoints "
        "(spark.ui.prometheus.enabled=true)",
    )
    group.add_argument(
        "--archive",
        metavar="FILE|URI",
        help="the packed environment the executors run (made by spark-kafka-backup pack; a local file, or a URI "
        "every executor can fetch: s3a://, hdfs://, https://): shipped with spark.archives, its packages first on "
        "the executors' Python path; for a cluster whose executors have only Spark and a Python (docs/deploy.md)",
    )
    group.add_argument("--print-command", action="store_true", help="print the spark-submit command, run nothing")


def _parsers(job: str) -> tuple[Callable[[str], argparse.ArgumentParser], Callable[..., object]]:
    if job == "backup":
        from spark_kafka_backup.backup.settings import build_parser as backup_parser
        from spark_kafka_backup.backup.settings import parse_backup_args

        return backup_parser, parse_backup_args
    from spark_kafka_backup.restore.settings import build_parser as restore_parser
    from spark_kafka_backup.restore.settings import parse_restore_args

    return restore_parser, parse_restore_args


def main(job: str, argv: Sequence[str]) -> int:
    """``spark-kafka-backup JOB ARGS``: check, then exec spark-submit; returns only for help, a mistake or
    --print-command. Inside the one error boundary (:func:`~spark_kafka_backup.boundary.exit_code`): a failure
    before the exec (the connector not fetched, the class archive not made, Ctrl-C, a bug) is one line too."""
    prog = f"spark-kafka-backup {job}"
    return exit_code(prog, lambda: _launch(job, argv, prog), say=print_error, debug="--debug" in argv)


def _launch(job: str, argv: Sequence[str], prog: str) -> int:
    build_parser, parse = _parsers(job)
    if any(arg in ("-h", "--help") for arg in argv):
        parser = build_parser(prog)
        add_launcher_options(parser)
        parser.print_help()
        return 0
    try:
        launch = split_arguments(argv)
        parse(launch.job_args, prog=prog)  # argparse exits 2 itself for an unknown flag
    except SparkKafkaBackupError as exc:
        print_error(f"{prog}: error: {exc}")
        return 2  # a command line that does not parse, as argparse says it
    from spark_kafka_backup.jvm_archive import ensure_driver_archive, existing_driver_archive
    from spark_kafka_backup.spark_submit import job_environment, spark_home, spark_submit_command

    if launch.archive is not None:
        if launch.master.startswith("local"):
            print_error(
                f"{prog}: error: --archive ships the environment to a cluster's executors; with --master "
                f"{launch.master} the driver's own Python runs every task (leave --archive out)"
            )
            return 2
        launch.archive = _checked_archive(launch.archive, prog)
    # Spark's Kafka connector may have to be fetched here: a failure is the boundary's one line (exit 1).
    command = spark_submit_command(
        job, *launch.job_args, master=launch.master, conf=launch.conf, archive=launch.archive
    )
    if launch.print_command:
        if launch.archive is not None:
            # The driver's python3.X must be this interpreter (spark_submit.with_packed_environment): said in front.
            path = job_environment(master=launch.master, packed=True)["PATH"]
            print(f"env PATH={shlex.quote(path)} {shlex.join(command)}")
        else:
            print(shlex.join(command))
        return 0
    if not os.access(command[0], os.X_OK):
        raise SparkKafkaBackupError(f"{command[0]} is not an executable spark-submit (check SPARK_HOME)")
    environment = job_environment(master=launch.master, packed=launch.archive is not None)
    home = spark_home(launch.master)
    if existing_driver_archive(environment, home) is None and ensure_driver_archive(
        environment, home, announce=lambda line: print(f"{prog}: {line}", file=sys.stderr, flush=True)
    ):
        command = spark_submit_command(
            job, *launch.job_args, master=launch.master, conf=launch.conf, archive=launch.archive
        )
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(command[0], command, environment)
    return 1  # not reached


#: A URI's scheme (``s3a:``, ``hdfs:``, ``file:``); a Windows drive letter is no scheme here (POSIX only).
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:")


def _checked_archive(archive: str, prog: str) -> str:
    """The ``spark.archives`` entry of ``--archive``: a local packed environment is read and checked against this
    installation (the driver and the executors must run the same spark-kafka-backup on the same Python version) and
    said on stderr; a URI is passed on as it is (Spark fetches it on each executor)."""
    from spark_kafka_backup import __version__
    from spark_kafka_backup.packing import PackError, read_manifest

    parts = urllib.parse.urlsplit(archive) if _SCHEME.match(archive) else None
    if parts is not None and parts.scheme != "file":
        if "#" in archive or "," in archive:
            raise PackError(
                f"--archive {archive}: a URI with '#' or ',' cannot go into spark.archives (its list and fragment "
                "syntax); rename the object"
            )
        print(f"{prog}: executors run the packed environment {archive} (fetched by Spark, not checked here)",
              file=sys.stderr, flush=True)  # fmt: skip
        return archive
    if parts is not None:
        if parts.netloc not in ("", "localhost"):
            raise PackError(f"--archive {archive}: a file: URI of another host; give a path of this machine")
        path = Path(urllib.request.url2pathname(parts.path))
    else:
        path = Path(archive).expanduser().absolute()
    manifest = read_manifest(path)
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    if manifest.version != __version__ or manifest.python != python:
        raise PackError(
            f"{path}: packed for spark-kafka-backup {manifest.version} on Python {manifest.python}, but the driver "
            f"runs spark-kafka-backup {__version__} on Python {python} (they must be the same): make it again "
            f"with spark-kafka-backup pack --output {path}"
        )
    print(f"{prog}: executors run the packed environment {path}: {manifest.describe()}", file=sys.stderr, flush=True)
    return path.as_uri()
