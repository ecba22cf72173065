"""What the backup and restore jobs share in reading their configuration.

Both accept the original tool's connector ``.properties`` (``--properties``),
its script flags, a Java client settings file (``--command-config``) and
``--spark-conf KEY=VALUE``. A flag and a property that set the same thing
must agree.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from spark_kafka_backup.boundary import exit_code
from spark_kafka_backup.errors import KbackupError, UsageError
from spark_kafka_backup.fsutil import parse_umask
from spark_kafka_backup.kafka.client_settings import librdkafka_refusal
from spark_kafka_backup.kafka.java_client_settings import JAVA_SOURCES, librdkafka_settings
from spark_kafka_backup.logsetup import LOG_FORMATS, ensure_console_logging, print_error
from spark_kafka_backup.metrics import DEFAULT_METRICS_BIND, MetricsPublisher, parse_listen_address
from spark_kafka_backup.properties import read_properties, read_properties_with_lines
from spark_kafka_backup.schema_registry.client import RegistryAddress

S = TypeVar("S")

#: Kafka Connect settings every connector file has; meaningless here, accepted and ignored.
CONNECT_BOILERPLATE = frozenset(
    {"name", "connector.class", "tasks.max", "key.converter", "value.converter", "header.converter"}
)


@dataclass(frozen=True)
class ConnectorProperties:
    """A connector properties file, checked against the keys a job knows."""

    values: Mapping[str, str]
    source: str

    @classmethod
    def load(cls, path: Path | None, known: Collection[str]) -> ConnectorProperties:
        if path is None:
            return cls({}, "")
        values = read_properties(path, what="properties file")
        for key in values:
            if key not in known and key not in CONNECT_BOILERPLATE and not key.startswith("cluster."):
                raise UsageError(f"{path}: unknown property {key!r}")
        return cls(values, str(path))

    def merge(self, flag: str, value: str | None, key: str) -> str | None:
        """The flag's value or the property's; an error when both are given and differ."""
        from_file = self.values.get(key)
        if value is not None and from_file is not None and value != from_file:
            raise UsageError(f"{flag} {value!r} disagrees with {key}={from_file!r} in {self.source}")
        return value if value is not None else from_file

    def required(self, flag: str, value: str | None, key: str, *, missing: str) -> str:
        """:meth:`merge`, and the error ``missing`` when neither is given."""
        merged = self.merge(flag, value, key)
        if not merged:
            raise UsageError(missing)
        return merged

    def positive(self, flag: str, value: int | None, key: str, *, default: int) -> int:
        """:meth:`merge` of a whole number above 0 (``default`` when neither is given)."""
        text = self.merge(flag, None if value is None else str(value), key)
        try:
            return positive_int(text) if text else default
        except argparse.ArgumentTypeError as exc:
            raise UsageError(f"{self.source}: {key}: {exc}") from exc


def client_settings(
    properties: ConnectorProperties, command_config: Path | None, bootstrap: str | None
) -> dict[str, str]:
    """Kafka client settings from ``cluster.*`` properties, the command config and ``--bootstrap-server``."""
    client = {key[len("cluster.") :]: value for key, value in properties.values.items() if key.startswith("cluster.")}
    lines: dict[str, int] = {}
    if command_config is not None:
        entries = read_properties_with_lines(command_config, what="command config")
        java = {key: value for key, (value, _) in entries.items()}
        lines = {key: line for key, (_, line) in entries.items()}
        for key, value in librdkafka_settings(java, source=str(command_config)).items():
            if key in client and client[key] != value:
                raise UsageError(f"{command_config}: {key} disagrees with cluster.{key} in {properties.source}")
            client[key] = value
    if bootstrap and client.get("bootstrap.servers") not in (None, bootstrap):
        raise UsageError(f"--bootstrap-server disagrees with cluster.bootstrap.servers in {properties.source}")
    servers = bootstrap or client.get("bootstrap.servers")
    if not servers:
        raise UsageError("give the cluster: --bootstrap-server (or cluster.bootstrap.servers in --properties)")
    client["bootstrap.servers"] = servers
    refusal = librdkafka_refusal(client)
    if refusal is not None:
        raise UsageError(_refusal_message(refusal, properties, command_config, lines))
    return client


def _refusal_message(
    refusal: tuple[str | None, str], properties: ConnectorProperties, command_config: Path | None, lines: dict[str, int]
) -> str:
    """Where the Kafka client setting librdkafka refused came from: the file and line, or the properties key."""
    key, reason = refusal
    if key is not None and command_config is not None:
        # A translated key (sasl.username from sasl.jaas.config, message.max.bytes from max.request.size) is
        # found under the Java key it came from.
        java_key = next((k for k in (key, *JAVA_SOURCES.get(key, ())) if k in lines), None)
        if java_key is not None:
            return f"{command_config} line {lines[java_key]}: {java_key}: {reason} (a Kafka client setting)"
    if key is not None and f"cluster.{key}" in properties.values:
        return f"{properties.source}: cluster.{key}: {reason}"
    where = command_config or properties.source or "the Kafka client settings"
    return f"{where}: {reason}"


def java_client_settings(
    properties: ConnectorProperties, command_config: Path | None, bootstrap: str
) -> dict[str, str]:
    """The same settings as :func:`client_settings` checked, untranslated, for a Java Kafka client.

    Spark's own Kafka source runs the Java client, which takes the original
    tool's settings (key stores, ``sasl.jaas.config``) as they are.
    """
    java = {key[len("cluster.") :]: value for key, value in properties.values.items() if key.startswith("cluster.")}
    if command_config is not None:
        java.update(read_properties(command_config, what="command config"))
    java["bootstrap.servers"] = bootstrap
    return java


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
    """A job's ``main``: parse (exit 2 on a bad option), run (exit 1 on any failure), one line per error."""
    ensure_console_logging()
    try:
        settings = parse(list(sys.argv[1:] if argv is None else argv))
    except KbackupError as exc:
        print_error(f"spark-kafka-backup {name}: error: {exc}")
        return 2
    from spark_kafka_backup.spark.failures import failure_cause  # a Spark failure's cause: its Python error

    debug = bool(getattr(settings, "debug", False))
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
            metrics_interval=args.metrics_interval,
            log_format=args.log_format,
        )

    def publisher(self, job: str, labels: Mapping[str, str] | None = None) -> MetricsPublisher:
        """``labels``: on every sample (which backup or restore the series are of)."""
        return MetricsPublisher(job, file=self.metrics_file, listen=self.metrics_listen, labels=labels)


def umask(text: str) -> int:
    """An argparse type: an octal umask (see :func:`spark_kafka_backup.fsutil.parse_umask`)."""
    try:
        return parse_umask(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def positive_int(text: str) -> int:
    """An argparse type: a whole number above 0."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a whole number > 0, got {text!r}")
    return value


_BYTE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def byte_count(text: str) -> int:
    """An argparse type: a byte count above 0, optionally with a binary unit (``512K``, ``20M``, ``1G``)."""
    cleaned = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = cleaned[-1:] if cleaned[-1:] in _BYTE_UNITS else ""
    digits = cleaned[: len(cleaned) - len(unit)]
    value = int(digits) * _BYTE_UNITS[unit] if digits.isdigit() else 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a byte count > 0 such as 1048576, 512K, 20M or 1G, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """An argparse type: a number above 0."""
    try:
        value = float(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


@dataclass(frozen=True)
class EncryptionKeySource:
    """Where a key-encryption key is read: a file or an environment variable (never the key itself on a command
    line, in a Spark option or in a task). ``key`` is read once on the driver to check it."""

    file: str | None
    env: str | None
    key: bytes = field(repr=False)

    def where(self) -> tuple[str | None, str | None]:
        """What travels to executors: the file's path or the variable's name."""
        return self.file, self.env


def add_encryption_flags(group: argparse._ArgumentGroup, *, purpose: str, several: bool = False) -> None:
    """``--encryption-key-file`` and ``--encryption-key-env`` (docs/backup.md, Encrypted segments); ``several``:
    repeatable (a reader of a backup written under more than one key)."""
    more = " (repeatable)" if several else ""
    action = "append" if several else "store"
    group.add_argument(
        "--encryption-key-file",
        action=action,
        metavar="FILE",
        help=f"a 256-bit key-encryption key (32 raw bytes, 64 hex digits or base64) that {purpose}{more}",
    )
    group.add_argument("--encryption-key-env", action=action, metavar="VAR",
                       help=f"the same from this environment variable{more}")  # fmt: skip
    if several:
        group.add_argument(
            "--allow-unauthenticated",
            action="store_true",
            help="with a key given, also read partitions that have no seal record (written before seal records, "
            "or not with a key); every other check of what the key vouches for still holds",
        )


def encryption_key_sources(args: argparse.Namespace) -> list[EncryptionKeySource]:
    """The keys the flags name, each read and checked."""
    from spark_kafka_backup.partition.records_file import load_key

    def listed(value: object) -> list[str]:
        return [] if value is None else [str(v) for v in value] if isinstance(value, list) else [str(value)]

    found = [
        EncryptionKeySource(str(Path(file).resolve()), None, load_key(file=Path(file).resolve()))
        for file in listed(args.encryption_key_file)
    ]
    found += [EncryptionKeySource(None, env, load_key(env=env)) for env in listed(args.encryption_key_env)]
    return found


def encryption_key_source(args: argparse.Namespace) -> EncryptionKeySource | None:
    """The one key a writer seals with (``None`` without the flags)."""
    found = encryption_key_sources(args)
    if len(found) > 1:
        raise UsageError("give --encryption-key-file or --encryption-key-env, not both")
    return found[0] if found else None


def add_schema_registry_flags(group: argparse._ActionsContainer, *, purpose: str) -> None:
    """``--schema-registry`` and its login flags (docs/schema-registry.md)."""
    group.add_argument(
        "--schema-registry",
        metavar="URL",
        help=f"a Confluent-compatible schema registry (Confluent, Karapace, ...) {purpose}",
    )
    group.add_argument(
        "--schema-registry-user-info-env",
        metavar="VAR",
        help="environment variable holding the registry's USER:PASSWORD (basic authentication)",
    )
    group.add_argument("--schema-registry-ca-file", metavar="FILE",
                       help="CA certificates (PEM) to check an https registry with")  # fmt: skip


def schema_registry_address(args: argparse.Namespace) -> RegistryAddress | None:
    """The registry the flags name (``None`` without ``--schema-registry``)."""
    if args.schema_registry is None:
        if args.schema_registry_user_info_env or args.schema_registry_ca_file:
            raise UsageError("--schema-registry-user-info-env and --schema-registry-ca-file need --schema-registry")
        return None
    return RegistryAddress.parse(
        args.schema_registry, user_info_env=args.schema_registry_user_info_env, ca_file=args.schema_registry_ca_file
    )
