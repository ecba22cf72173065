"""A job's Kafka client settings as the original tool took them: its connector ``.properties`` (``cluster.*`` keys,
checked against the keys a job knows), a Java client settings file (``--command-config``) and ``--bootstrap-server``,
translated for librdkafka, or kept as they are for a Java client. A flag and a property that set the same thing must
agree.
"""

from __future__ import annotations

import argparse
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from spark_kafka_backup.argtypes import positive_int
from spark_kafka_backup.errors import UsageError
from spark_kafka_backup.kafka.client_settings import librdkafka_refusal
from spark_kafka_backup.kafka.java_client_settings import JAVA_SOURCES, librdkafka_settings
from spark_kafka_backup.properties import read_properties, read_properties_with_lines

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
