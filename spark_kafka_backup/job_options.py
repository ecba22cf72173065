"""What the backup and restore jobs share around their own settings: the parser with the options both have
(:func:`job_parser`), the monitoring options, ``--spark-conf``, and :func:`run_job`, which parses, runs and ends in
the one error boundary. The Kafka client settings they read are :mod:`spark_kafka_backup.kafka.connector_config`'s;
the argument types they share with the commands are :mod:`spark_kafka_backup.arguments`'.
"""

from __future__ import annotations

import argparse
import faulthandler
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from spark_kafka_backup.argtypes import positive_float, umask
from spark_kafka_backup.boundary import exit_code, stop_on_signals
from spark_kafka_backup.errors import SparkKafkaBackupError, UsageError
from spark_kafka_backup.logsetup import LOG_FORMATS, ensure_console_logging, print_error
from spark_kafka_backup.metrics import (
    DEFAULT_METRICS_BIND,
    MetricsPublisher,
    check_pushgateway,
    parse_listen_address,
)

S = TypeVar("S")


def spark_conf(items: Sequence[str]) -> dict[str, str]:
    """``--spark-conf KEY=VALUE`` items as a dict."""
    result = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--spark-conf takes KEY=VALUE, not {item!r}")
        result[key] = value
    return result


def run_job(
    name: str,
    argv: Sequence[str] | None,
    parse: Callable[[Sequence[str]], S],
    run: Callable[[S], int],
) -> int:
    """A job's ``main``: parse (exit 2 on a bad option), run (exit 1 on any failure), one line per error.

    A crash in native code (librdkafka, Arrow) kills the driver without a Python error: faulthandler then prints
    every Python thread's stack to standard error, so the log shows which request was under way."""
    ensure_console_logging()
    if not faulthandler.is_enabled():
        faulthandler.enable(all_threads=True)
    try:
        settings = parse(list(sys.argv[1:] if argv is None else argv))
    except SparkKafkaBackupError as exc:
        print_error(f"spark-kafka-backup {name}: error: {exc}")
        return 2
    from spark_kafka_backup.spark.failures import failure_cause  # a Spark failure's cause: its Python error

    debug = bool(getattr(settings, "debug", False))
    with stop_on_signals():
        return exit_code(
            f"spark-kafka-backup {name}", lambda: run(settings), say=print_error, debug=debug, cause=failure_cause
        )


@dataclass(frozen=True)
class JobTexts:
    """What a job's ``--help`` says about the job itself."""

    description: str
    script: str  # the original tool's script the job stands in for
    cluster: str  # whose bootstrap servers --bootstrap-server names
    connector: str  # the original connector whose properties --properties reads


JOB_TEXTS = {
    "backup": JobTexts(
        "Back up Kafka topics into kafka-backup v1 files, continuously or as a snapshot.",
        "backup-standalone.sh", "the Kafka cluster's", "sink",
    ),
    "restore": JobTexts(
        "Restore a kafka-backup v1 backup into a Kafka cluster and remap consumer group offsets.",
        "restore-standalone.sh", "the target cluster's", "source",
    ),
}  # fmt: skip


def job_parser(prog: str, job: str) -> tuple[argparse.ArgumentParser, argparse._ArgumentGroup, argparse._ArgumentGroup]:
    """Job ``job``'s parser with the options both jobs have; returns it with its two groups (the original script's
    options, spark-kafka-backup's own) for the job to add the rest."""
    texts = JOB_TEXTS[job]
    script, cluster, connector = texts.script, texts.cluster, texts.connector
    parser = argparse.ArgumentParser(prog=prog, description=texts.description)
    original = parser.add_argument_group(f"options of the original {script}")
    original.add_argument("--bootstrap-server", help=f"{cluster} bootstrap servers, host:port[,host:port]")
    original.add_argument("--command-config", type=Path, help="Kafka client settings file (SSL/SASL)")
    original.add_argument("--debug", action="store_true", help="log more")
    own = parser.add_argument_group("spark-kafka-backup options")
    own.add_argument("--properties", type=Path, help=f"the original {connector} connector's .properties file")
    own.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting the job gives its Spark session (repeatable; also under spark-submit jobs/*.py). "
        "One the driver's JVM needs before it starts (spark.driver.memory) goes to --conf instead",
    )
    own.add_argument(
        "--umask",
        type=umask,
        help="octal umask of every file and directory the job creates (default: the inherited umask plus 027, "
        "i.e. nothing for others)",
    )
    watch = parser.add_argument_group("monitoring (docs/operations.md, Metrics and alerts)")
    watch.add_argument(
        "--metrics-port",
        metavar="[HOST:]PORT",
        help="serve the job's metrics for Prometheus at http://HOST:PORT/metrics (HOST: --metrics-bind)",
    )
    watch.add_argument(
        "--metrics-bind",
        metavar="ADDRESS",
        help=f"the address --metrics-port listens on (default {DEFAULT_METRICS_BIND}, this host only; 0.0.0.0 for "
        "every interface, behind a firewall: the metrics have no authentication)",
    )
    watch.add_argument(
        "--metrics-file",
        type=Path,
        metavar="PATH",
        help="replace PATH with the job's metrics every interval and at the end: Prometheus text when PATH ends "
        "in .prom (node_exporter's textfile collector), JSON otherwise",
    )
    watch.add_argument(
        "--metrics-pushgateway",
        metavar="URL",
        help="push the job's metrics to this Prometheus Pushgateway (http://HOST:9091) every interval and at the "
        "end, grouped by job and target (source): a finished snapshot's or restore's figures stay there",
    )
    watch.add_argument(
        "--metrics-interval",
        type=positive_float,
        default=15.0,
        metavar="SECONDS",
        help="how often the metrics are refreshed (default 15)",
    )
    watch.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default="text",
        help="text lines (default) or one JSON object per line for log collectors",
    )
    return parser, original, own


@dataclass(frozen=True)
class Monitoring:
    """Where a job publishes its metrics and how it logs (the ``monitoring`` options of :func:`job_parser`)."""

    metrics_file: Path | None = None
    metrics_listen: tuple[str, int] | None = None
    metrics_push: str | None = None
    metrics_interval: float = 15.0
    log_format: str = "text"

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Monitoring:
        if args.metrics_file is not None and not args.metrics_file.parent.is_dir():
            raise UsageError(
                f"--metrics-file {args.metrics_file}: the directory {args.metrics_file.parent} does not exist"
            )
        if args.metrics_bind is not None and not args.metrics_port:
            raise UsageError("--metrics-bind is the address of --metrics-port: give the port too")
        return cls(
            metrics_file=args.metrics_file,
            metrics_listen=parse_listen_address(args.metrics_port, args.metrics_bind) if args.metrics_port else None,
            metrics_push=check_pushgateway(args.metrics_pushgateway) if args.metrics_pushgateway else None,
            metrics_interval=args.metrics_interval,
            log_format=args.log_format,
        )

    def publisher(self, job: str, labels: Mapping[str, str] | None = None) -> MetricsPublisher:
        """``labels``: on every sample (which backup or restore the series are of)."""
        return MetricsPublisher(
            job, file=self.metrics_file, listen=self.metrics_listen, push=self.metrics_push, labels=labels
        )
