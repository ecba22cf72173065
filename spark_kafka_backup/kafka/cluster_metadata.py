"""Reading the cluster around the topics (:mod:`spark_kafka_backup.catalog.cluster_metadata`) through the admin API:
ACL bindings (DescribeAcls), SCRAM users (DescribeUserScramCredentials), the dynamic broker configurations, cluster
defaults and per broker (DescribeConfigs), client quotas (DescribeClientQuotas), and the partition count and
replication factor of the backed-up topics (DescribeTopics).

Each section is asked on its own: one the principal may not describe becomes a
:class:`~spark_kafka_backup.catalog.cluster_metadata.NotCaptured` naming the permission, and the others are kept. A
cluster without an authorizer has no ACLs (kept as none). Client quotas and the cluster-wide defaults are asked over
a second connection (:mod:`spark_kafka_backup.kafka.wire_admin`; librdkafka cannot send those requests); when the
client settings are ones it cannot honour, the quotas are kept as not captured saying which setting, and the
defaults are those the brokers report as theirs from the cluster (a default every broker overrides is then not
seen).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import Any, TypeVar

from spark_kafka_backup.catalog.cluster_metadata import (
    AclEntry,
    BrokerConfigs,
    ClusterMetadata,
    NotCaptured,
    QuotaEntry,
    ScramUser,
    TopicShape,
)
from spark_kafka_backup.errors import ClusterError
from spark_kafka_backup.kafka.cluster import is_transient
from spark_kafka_backup.kafka.wire_admin import WireAdmin, WireRefusalError, WireSettingsError, wire_admin

T = TypeVar("T")

#: The start of the reason of quotas not captured because the second connection could not be made.
SECOND_CONNECTION_FAILED = "not read: the connection for client quotas failed"

#: What a section not asked for holds.
NOT_ASKED = NotCaptured("not asked for")


def capture_metadata(
    admin: Any,
    topics: Iterable[str],
    *,
    client: Mapping[str, str],
    timeout: float = 30,
    sections: Collection[str] = ("acls", "users", "configs", "quotas"),
    second_connection: NotCaptured | None = None,
) -> ClusterMetadata:
    """One capture of the cluster (module docstring) through ``admin`` (librdkafka's, made of the ``client``
    settings), of ``sections`` (the others hold :data:`NOT_ASKED`); a section that fails for another reason than a
    refusal raises :class:`~spark_kafka_backup.errors.ClusterError` (the caller's session asks again). No answer is
    waited for longer than ``timeout`` (and a little). ``second_connection``: why not to try the second connection
    again (quotas are then not captured for that reason)."""
    if second_connection is not None:
        return _capture(admin, topics, second_connection, timeout, sections)
    with _second_connection(client, timeout, needed="quotas" in sections or "configs" in sections) as wire:
        return _capture(admin, topics, wire, timeout, sections)


@contextlib.contextmanager
def _second_connection(client: Mapping[str, str], timeout: float, *, needed: bool) -> Iterator[WireAdmin | NotCaptured]:
    if not needed:
        yield NOT_ASKED
        return
    try:
        connection = wire_admin(client, timeout=timeout)
        wire = connection.__enter__()
    except WireSettingsError as exc:
        yield NotCaptured(f"not read with these client settings: {exc}")
        return
    except ClusterError as exc:  # the other sections are still read
        yield NotCaptured(f"{SECOND_CONNECTION_FAILED}: {exc}")
        return
    try:
        yield wire
    finally:
        connection.__exit__(None, None, None)


def _capture(
    admin: Any, topics: Iterable[str], wire: WireAdmin | NotCaptured, timeout: float, sections: Collection[str]
) -> ClusterMetadata:
    wait = timeout + 5
    description = _ask(
        "describe the cluster",
        lambda: admin.describe_cluster(include_authorized_operations=True, request_timeout=timeout).result(wait),
    )
    if isinstance(description, NotCaptured):  # DescribeCluster needs no permission: not a refusal
        raise ClusterError(f"cannot describe the cluster: {description.reason}")
    broker_ids = sorted(node.id for node in description.nodes)
    return ClusterMetadata(
        captured_at=int(time.time() * 1000),
        cluster_id=str(description.cluster_id),
        acls=_acls(admin, description, timeout) if "acls" in sections else NOT_ASKED,
        quotas=_quotas(wire) if "quotas" in sections else NOT_ASKED,
        scram_users=_scram_users(admin, timeout) if "users" in sections else NOT_ASKED,
        broker_configs=_broker_configs(admin, wire, broker_ids, timeout) if "configs" in sections else NOT_ASKED,
        broker_ids=tuple(broker_ids),
        topics=_topic_shapes(admin, sorted(set(topics)), timeout),
    )


def _ask(what: str, ask: Callable[[], T], permission: str | None = None) -> T | NotCaptured:
    """``ask()``; a refusal (an authorization error) as :class:`NotCaptured` naming ``permission``."""
    try:
        return ask()
    except Exception as exc:
        if isinstance(exc, ClusterError) and not isinstance(exc, WireRefusalError):
            raise  # the second connection's: said as it should be
        name, text = (exc.code, str(exc)) if isinstance(exc, WireRefusalError) else _reason(exc)
        if "AUTHORIZATION" in name and permission is not None:
            return NotCaptured(f"the cluster refused to {what}: {text}", permission)
        raise ClusterError(f"cannot {what}: {text}", transient=_transient(exc)) from exc


def _reason(exc: BaseException) -> tuple[str, str]:
    error = exc.args[0] if exc.args else exc
    name = error.name() if hasattr(error, "name") else type(exc).__name__
    text = error.str() if hasattr(error, "str") else str(exc)
    return name, text or f"no answer ({type(exc).__name__})"


def _transient(exc: BaseException) -> bool:
    error = exc.args[0] if exc.args else None
    return hasattr(error, "retriable") and is_transient(error)


def _acls(admin: Any, description: Any, timeout: float) -> tuple[AclEntry, ...] | NotCaptured:
    """Every ACL binding. librdkafka (2.16) drops the error of a DescribeAcls answer (a refusal comes back as no
    binding at all), so the answer is trusted only when the cluster lists DESCRIBE itself among the principal's
    operations on it (the broker has applied what implies it, and a DENY): else "none" could be "not allowed". A
    binding of a resource type or operation librdkafka does not know (USER, DELEGATION_TOKEN, CREATE_TOKENS) would
    come back as UNKNOWN, and two of them as one: the section is then not captured."""
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    # Kafka lists a principal's operations on the cluster only to a principal that may DESCRIBE it (None otherwise).
    operations = description.authorized_operations or ()
    if "DESCRIBE" not in {getattr(operation, "name", str(operation)) for operation in operations}:
        return NotCaptured("the cluster does not let this principal describe its ACLs", "DESCRIBE on the cluster")
    every = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                             AclPermissionType.ANY)  # fmt: skip
    try:
        bindings = admin.describe_acls(every, request_timeout=timeout).result(timeout + 5)
    except Exception as exc:
        name, text = _reason(exc)
        if name == "SECURITY_DISABLED":
            return ()  # no authorizer: no ACLs
        if "AUTHORIZATION" in name:
            return NotCaptured(f"the cluster refused to describe its ACLs: {text}", "DESCRIBE on the cluster")
        raise ClusterError(f"cannot describe its ACLs: {text}", transient=_transient(exc)) from exc
    if any("UNKNOWN" in (b.restype.name, b.resource_pattern_type.name, b.operation.name, b.permission_type.name)
           for b in bindings):  # fmt: skip
        return NotCaptured("the cluster has ACLs of resource types or operations librdkafka cannot name (USER, "
                           "DELEGATION_TOKEN, CREATE_TOKENS, DESCRIBE_TOKENS)")  # fmt: skip
    return tuple(
        sorted(
            AclEntry(
                # librdkafka names Kafka's CLUSTER resource type BROKER.
                "CLUSTER" if binding.restype.name == "BROKER" else binding.restype.name,
                binding.name,
                binding.resource_pattern_type.name,
                binding.principal,
                binding.host,
                binding.operation.name,
                binding.permission_type.name,
            )
            for binding in bindings
        )
    )


def _scram_users(admin: Any, timeout: float) -> tuple[ScramUser, ...] | NotCaptured:
    def ask() -> tuple[ScramUser, ...]:
        described = admin.describe_user_scram_credentials(request_timeout=timeout).result(timeout + 5)
        users = []
        for name, description in described.items():
            for info in description.scram_credential_infos:
                users.append(ScramUser(name, info.mechanism.name.replace("_", "-"), int(info.iterations)))
        return tuple(sorted(users))

    return _ask("describe its SCRAM users", ask, "DESCRIBE on the cluster")


def _quotas(wire: WireAdmin | NotCaptured) -> tuple[QuotaEntry, ...] | NotCaptured:
    if isinstance(wire, NotCaptured):
        return wire
    try:
        return _ask("describe its client quotas", wire.client_quotas, "DESCRIBE_CONFIGS on the cluster")
    except ClusterError as exc:  # a broker before Kafka 2.6, a connection lost: this section only
        return NotCaptured(f"not read: {exc}")


def _broker_configs(
    admin: Any, wire: WireAdmin | NotCaptured, broker_ids: list[int], timeout: float
) -> BrokerConfigs | NotCaptured:
    """Each broker's own dynamic configurations, and the cluster-wide defaults: asked as such over the second
    connection, else (it cannot be made with these settings) what the brokers report as theirs from the cluster (a
    default every broker overrides is then not seen)."""
    from confluent_kafka.admin import ConfigResource, ConfigSource, ResourceType

    def ask() -> BrokerConfigs:
        resources = [ConfigResource(ResourceType.BROKER, str(broker)) for broker in broker_ids]
        futures = admin.describe_configs(resources, request_timeout=timeout)
        cluster: dict[str, str | None] = {}
        brokers: dict[int, dict[str, str | None]] = {}
        sensitive: set[str] = set()
        for resource, future in futures.items():
            own: dict[str, str | None] = {}
            for name, entry in future.result(timeout + 5).items():
                if entry.source not in (ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value,
                                        ConfigSource.DYNAMIC_BROKER_CONFIG.value):  # fmt: skip
                    continue
                if entry.is_sensitive:
                    sensitive.add(name)
                value = None if entry.is_sensitive else entry.value
                if entry.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value:
                    own[name] = value
                else:
                    cluster[name] = value
            if own:
                brokers[int(resource.name)] = own
        if not isinstance(wire, NotCaptured):
            try:
                defaults = wire.cluster_defaults()
            except ClusterError:  # as the brokers report them, then (a default they all override is not seen)
                return BrokerConfigs(cluster, brokers, tuple(sorted(sensitive)))
            cluster = dict(defaults)
            sensitive |= {name for name, value in defaults.items() if value is None}
        return BrokerConfigs(cluster, brokers, tuple(sorted(sensitive)))

    return _ask("describe its broker configurations", ask, "DESCRIBE_CONFIGS on the cluster")


def _topic_shapes(admin: Any, topics: list[str], timeout: float) -> dict[str, TopicShape]:
    from confluent_kafka import TopicCollection

    if not topics:
        return {}
    shapes = {}
    futures = admin.describe_topics(TopicCollection(topics), request_timeout=timeout)
    for topic, description in _existing(futures.items(), timeout, "DESCRIBE", "describe it"):
        partitions = description.partitions
        replicas = max((len(partition.replicas) for partition in partitions), default=0)
        shapes[topic] = TopicShape(len(partitions), replicas)
    return shapes


def topic_settings(
    admin: Any, topics: Collection[str], *, timeout: float = 30
) -> dict[str, dict[str, tuple[str, bool]]]:
    """The effective configuration of each of ``topics`` that exists: name -> (value, set on the topic itself); a
    topic the cluster does not know is left out. A refusal raises
    :class:`~spark_kafka_backup.errors.AccessDeniedError` naming the topic and DESCRIBE_CONFIGS."""
    from confluent_kafka.admin import ConfigResource, ConfigSource, ResourceType

    if not topics:
        return {}
    futures = admin.describe_configs([ConfigResource(ResourceType.TOPIC, t) for t in sorted(topics)],
                                     request_timeout=timeout)  # fmt: skip
    found: dict[str, dict[str, tuple[str, bool]]] = {}
    named = ((resource.name, future) for resource, future in futures.items())
    for topic, entries in _existing(named, timeout, "DESCRIBE_CONFIGS", "compare its configuration"):
        found[topic] = {
            key: (entry.value, entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
            for key, entry in entries.items()
            if entry.value is not None
        }
    return found


def _existing(
    futures: Iterable[tuple[str, Any]], timeout: float, operation: str, why: str
) -> Iterator[tuple[str, Any]]:
    """(topic, answer) of each topic's future, leaving out a topic the cluster does not know (deleted since it was
    listed); a refusal is :class:`~spark_kafka_backup.errors.AccessDeniedError` naming ``operation``."""
    from spark_kafka_backup.errors import AccessDeniedError

    for topic, future in futures:
        try:
            answer = future.result(timeout + 5)
        except Exception as exc:
            name, text = _reason(exc)
            if name == "UNKNOWN_TOPIC_OR_PART":
                continue
            if "AUTHORIZATION" in name:
                raise AccessDeniedError(f"may not {operation} topic {topic!r} (needed to {why}): {text}") from exc
            raise ClusterError(f"cannot describe topic {topic!r}: {text}", transient=_transient(exc)) from exc
        yield topic, answer
