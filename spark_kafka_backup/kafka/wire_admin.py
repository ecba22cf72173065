"""The admin requests librdkafka cannot send, sent through kafka-python's connection: client quotas
(DescribeClientQuotas, AlterClientQuotas) and the cluster-wide dynamic broker defaults (DescribeConfigs and
IncrementalAlterConfigs of the broker resource named ``""``; librdkafka routes a broker resource to the broker of that
id, so it can only ask each broker what it has).

The connection is made from the job's librdkafka client settings (:func:`wire_client_settings`, pure): the bootstrap
servers, PLAINTEXT/SSL/SASL_PLAINTEXT/SASL_SSL, PLAIN and SCRAM, and TLS from files or from the PEM text the
Java-style settings became (the certificate and key are loaded through a private temporary file that is removed at
once: Python's TLS cannot load a key from memory). A setting kafka-python cannot honour (OAUTHBEARER, GSSAPI, a
PKCS12 key store) is a :class:`WireSettingsError` naming it: a capture keeps the section as not captured, saying
why; a restore that needs it refuses before changing anything.
"""

from __future__ import annotations

import contextlib
import os
import ssl
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spark_kafka_backup.catalog.cluster_metadata import QuotaEntry
from spark_kafka_backup.errors import ClusterError, UsageError

#: Kafka's config resource type of a broker (cluster-wide defaults: the name ``""``).
_BROKER_RESOURCE = 4
#: ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.
_DYNAMIC_DEFAULT = 3
#: DescribeClientQuotas' component match type: any entity of the type (its name, or its default).
_MATCH_ANY = 2
_SET, _DELETE = 0, 1

_TLS_KEYS = ("ssl.ca.location", "ssl.ca.pem", "ssl.certificate.location", "ssl.certificate.pem", "ssl.key.location",
             "ssl.key.pem", "ssl.key.password", "ssl.endpoint.identification.algorithm",
             "enable.ssl.certificate.verification")  # fmt: skip


#: A quota entity (type -> name, ``None``: the default) and the values to set (``None``: remove).
QuotaChange = tuple[Mapping[str, str | None], Mapping[str, float | None]]


class WireSettingsError(UsageError):
    """A client setting the second connection (module docstring) cannot honour."""


@dataclass(frozen=True)
class WireSettings:
    """kafka-python's settings made from librdkafka's; ``tls`` is what the TLS context is built from."""

    bootstrap_servers: list[str]
    security_protocol: str
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = None
    tls: Mapping[str, str] | None = None


def wire_client_settings(client: Mapping[str, str]) -> WireSettings:
    """kafka-python's settings for the job's librdkafka ``client`` settings (module docstring)."""
    protocol = client.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        raise WireSettingsError(f"security.protocol={protocol}: expected PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL")
    mechanism = None
    if protocol.startswith("SASL"):
        mechanism = client.get("sasl.mechanism", client.get("sasl.mechanisms", "GSSAPI")).upper()
        if mechanism not in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
            raise WireSettingsError(
                f"sasl.mechanism={mechanism}: client quotas and cluster-wide broker defaults are read and written "
                "over a second connection (kafka-python; librdkafka cannot send those requests) that supports PLAIN "
                "and SCRAM only"
            )
    tls = None
    if protocol.endswith("SSL"):
        tls = {key: client[key] for key in _TLS_KEYS if key in client}
        if client.get("ssl.crl.location"):
            raise WireSettingsError(
                f"ssl.crl.location={client['ssl.crl.location']}: client quotas and cluster-wide broker defaults go "
                "over a second connection that cannot check a certificate revocation list"
            )
        store = client.get("ssl.keystore.location")
        if store:
            raise WireSettingsError(
                f"ssl.keystore.location={store}: client quotas and cluster-wide broker defaults go over a second "
                "connection that takes the key as PEM; give ssl.certificate.location and ssl.key.location, or the "
                "Java-style settings (--command-config) that spark-kafka-backup turns into PEM"
            )
    servers = [server.strip() for server in client.get("bootstrap.servers", "").split(",") if server.strip()]
    if not servers:
        raise UsageError("bootstrap.servers: expected at least one host:port")
    return WireSettings(servers, protocol, mechanism, client.get("sasl.username"), client.get("sasl.password"), tls)


def _tls_context(tls: Mapping[str, str]) -> ssl.SSLContext:
    """The TLS context of the settings; one the settings cannot make is a :class:`WireSettingsError` naming them."""
    try:
        return _make_tls_context(tls)
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        named = ", ".join(
            f"{key}={tls[key]}" for key in _TLS_KEYS if key in tls and not key.endswith((".pem", "password"))
        )
        raise WireSettingsError(f"the TLS settings ({named or 'PEM text'}) cannot be loaded by the second connection "
                                f"(client quotas and cluster-wide broker defaults): {exc}") from exc  # fmt: skip


def _make_tls_context(tls: Mapping[str, str]) -> ssl.SSLContext:
    location = tls.get("ssl.ca.location")
    directory = location is not None and os.path.isdir(location)
    context = ssl.create_default_context(cafile=None if directory else location, capath=location if directory else None,
                                         cadata=tls.get("ssl.ca.pem"))  # fmt: skip
    context.check_hostname = tls.get("ssl.endpoint.identification.algorithm", "https").lower() != "none"
    if tls.get("enable.ssl.certificate.verification", "true").lower() == "false":  # as librdkafka was told
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    password = tls.get("ssl.key.password")
    if "ssl.certificate.location" in tls:
        if "ssl.key.pem" in tls:
            raise ValueError("ssl.certificate.location with ssl.key.pem: give both as files or both as PEM")
        context.load_cert_chain(tls["ssl.certificate.location"], tls.get("ssl.key.location"), password)
    elif "ssl.certificate.pem" in tls:
        with tempfile.TemporaryDirectory(prefix="kbackup-tls-") as private:  # mode 0700
            chain = os.path.join(private, "chain.pem")
            descriptor = os.open(chain, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "w") as handle:
                handle.write(tls["ssl.certificate.pem"] + "\n" + tls.get("ssl.key.pem", ""))
            context.load_cert_chain(chain, tls.get("ssl.key.location"), password)
    return context


@contextlib.contextmanager
def wire_admin(client: Mapping[str, str], *, timeout: float = 30) -> Iterator[WireAdmin]:
    """A connection for the requests of the module docstring; closed on leaving."""
    settings = wire_client_settings(client)
    from kafka import KafkaAdminClient

    options: dict[str, Any] = {
        "bootstrap_servers": settings.bootstrap_servers,
        "security_protocol": settings.security_protocol,
        "client_id": "spark-kafka-backup-metadata",
        "request_timeout_ms": int(timeout * 1000),
        "bootstrap_timeout_ms": int(timeout * 1000),
    }
    if settings.sasl_mechanism is not None:
        options |= {
            "sasl_mechanism": settings.sasl_mechanism,
            "sasl_plain_username": settings.sasl_username,
            "sasl_plain_password": settings.sasl_password,
        }
    if settings.tls is not None:
        options["ssl_context"] = _tls_context(settings.tls)
    try:
        # (kafka-python 3.0 starts its IO thread before it bootstraps: a failed bootstrap leaves the thread behind.
        # Closing it from a subclass made the job's stop leave a traceback; the backup's keeper tries again an hour
        # after a failure, a few times a run at most: backup/cluster_metadata.py.)
        admin = KafkaAdminClient(**options)
    except Exception as exc:
        raise ClusterError(f"cannot connect to {','.join(settings.bootstrap_servers)}: {exc}", transient=True) from exc
    try:
        yield WireAdmin(admin)
    finally:
        admin.close()


class WireRefusalError(ClusterError):
    """The cluster answered a request with an error (``code``: Kafka's error name)."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message, transient=False)
        self.code = code


class WireAdmin:
    """The requests of the module docstring over one kafka-python admin connection."""

    def __init__(self, admin: Any) -> None:
        self._admin = admin

    def _send(self, request: Any) -> Any:
        manager = self._admin._manager

        async def send() -> Any:
            return await manager.send(request)

        try:
            return manager.run(send)
        except Exception as exc:
            raise ClusterError(f"no answer to {type(request).__name__}: {exc}", transient=True) from exc

    @staticmethod
    def _check(code: int, message: str | None, what: str) -> None:
        if code:
            import kafka.errors

            error = kafka.errors.for_code(code)
            name = getattr(error, "message", error.__name__)
            raise WireRefusalError(f"cannot {what}: {name}{f' ({message})' if message else ''}", str(name))

    def client_quotas(self) -> tuple[QuotaEntry, ...]:
        """Every client quota of the cluster."""
        from kafka.protocol.admin import DescribeClientQuotasRequest

        response = self._send(DescribeClientQuotasRequest(components=[], strict=False))
        self._check(response.error_code, response.error_message, "describe its client quotas")
        return tuple(
            sorted(
                (
                    QuotaEntry(
                        {entity.entity_type: entity.entity_name for entity in entry.entity},
                        {value.key: float(value.value) for value in entry.values},
                    )
                    for entry in response.entries or ()
                ),
                key=QuotaEntry.key,
            )
        )

    def alter_client_quotas(self, changes: Sequence[QuotaChange]) -> None:
        """For each (entity, values): set each value, remove each ``None``."""
        from kafka.protocol.admin import AlterClientQuotasRequest

        if not changes:
            return
        entries = [
            (
                [(kind, name) for kind, name in sorted(entity.items())],
                [(key, 0.0 if value is None else value, value is None) for key, value in sorted(values.items())],
            )
            for entity, values in changes
        ]
        response = self._send(AlterClientQuotasRequest(entries=entries, validate_only=False))
        for entry in response.entries:
            entity = ", ".join(f"{e.entity_type}={'<default>' if e.entity_name is None else e.entity_name}"
                               for e in entry.entity)  # fmt: skip
            self._check(entry.error_code, entry.error_message, f"alter the client quotas of {entity}")

    def cluster_defaults(self) -> dict[str, str | None]:
        """The cluster-wide dynamic broker defaults (a sensitive one's value as ``None``)."""
        from kafka.protocol.admin import DescribeConfigsRequest

        response = self._send(DescribeConfigsRequest(resources=[(_BROKER_RESOURCE, "", None)], include_synonyms=False))
        (result,) = response.results
        self._check(result.error_code, result.error_message, "describe the cluster-wide broker defaults")
        return {
            config.name: None if config.is_sensitive else config.value
            for config in result.configs
            if config.config_source == _DYNAMIC_DEFAULT
        }

    def alter_cluster_defaults(self, values: Mapping[str, str | None]) -> None:
        """Set each cluster-wide default; delete each ``None``."""
        from kafka.protocol.admin import IncrementalAlterConfigsRequest

        if not values:
            return
        configs = [(name, _DELETE if value is None else _SET, value) for name, value in sorted(values.items())]
        response = self._send(
            IncrementalAlterConfigsRequest(resources=[(_BROKER_RESOURCE, "", configs)], validate_only=False)
        )
        (result,) = response.responses
        self._check(result.error_code, result.error_message, "alter the cluster-wide broker defaults")
