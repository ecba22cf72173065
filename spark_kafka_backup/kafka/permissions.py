"""What a job may do on a cluster with ACLs, asked before it does anything.

Kafka tells a client which operations its principal may perform on a topic,
a consumer group and the cluster (KIP-430: ``include_authorized_operations``
of DescribeTopics, DescribeGroups and DescribeCluster). The jobs list what they
need as :class:`Permission` entries; :func:`missing_permissions` asks the
cluster and returns the ones not granted, so a job refuses in one line that
names the operation, the resource and the principal, before it writes a file
or a record. Operations Kafka implies (READ, WRITE and ALTER imply DESCRIBE;
ALTER_CONFIGS implies DESCRIBE_CONFIGS) are granted with them, as the broker's
own check treats them.

A cluster without an authorizer lists every operation: nothing is missing.
Transactional ids are not covered by KIP-430; the restore's first transaction
asks for them (``kbackup-restore.*``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from spark_kafka_backup.errors import AccessDeniedError, ClusterError
from spark_kafka_backup.kafka.cluster import COORDINATOR_NOT_READY

T = TypeVar("T")

#: Kafka's name of the cluster resource in ACLs.
CLUSTER = "kafka-cluster"


@dataclass(frozen=True)
class Permission:
    """One operation on one resource, and what the job needs it for."""

    operation: str  # Kafka's name: READ, WRITE, CREATE, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS ...
    resource_type: str  # TOPIC, GROUP, CLUSTER or TRANSACTIONAL_ID
    name: str
    why: str
    #: The name is a prefix (a PREFIXED ACL covers every name starting with it).
    prefixed: bool = False

    def refusal(self, principal: str) -> str:
        if self.resource_type == "CLUSTER":
            resource = "the cluster"
        else:
            kind = self.resource_type.lower().replace("_", " ")
            resource = f"{kind}s {self.name}*" if self.prefixed else f"{kind} {self.name!r}"
        return f"{principal} may not {self.operation} {resource} (needed to {self.why})"

    def grant_command(self, principal: str) -> str:
        """The ``kafka-acls.sh`` arguments that grant it."""
        option = {"TOPIC": "--topic", "GROUP": "--group", "TRANSACTIONAL_ID": "--transactional-id"}
        resource = "--cluster" if self.resource_type == "CLUSTER" else f"{option[self.resource_type]} {self.name}"
        if self.prefixed:
            resource += " --resource-pattern-type prefixed"
        operation = "".join(word.capitalize() for word in self.operation.split("_"))
        return f"--add --allow-principal {principal} --operation {operation} {resource}"


def secured(settings: Mapping[str, str]) -> bool:
    """Whether the client authenticates (TLS or SASL): only then can a cluster's ACLs tell it apart."""
    return settings.get("security.protocol", "PLAINTEXT").upper() != "PLAINTEXT"


def principal_of(settings: Mapping[str, str]) -> str:
    """The principal the broker sees for a client with these librdkafka settings (Kafka's default builder)."""
    protocol = settings.get("security.protocol", "PLAINTEXT").upper()
    mechanism = settings.get("sasl.mechanism", "GSSAPI").upper()
    if protocol.startswith("SASL") and mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        return f"User:{settings.get('sasl.username', '?')}"
    if protocol.startswith("SASL"):
        return f"the {mechanism} principal of this client"
    if protocol == "SSL" and "ssl.certificate.pem" in settings:
        from cryptography import x509

        certificate = x509.load_pem_x509_certificate(settings["ssl.certificate.pem"].encode())
        return f"User:{certificate.subject.rfc4514_string()}"
    if protocol == "SSL":
        return "the TLS certificate principal of this client"
    return "User:ANONYMOUS"


def missing_permissions(admin: Any, needed: Iterable[Permission], *, timeout: float = 15) -> list[Permission]:
    """The entries of ``needed`` the cluster does not grant this client, in their order."""
    needed = list(needed)
    granted: dict[tuple[str, str], set[str]] = {}
    topics = sorted({p.name for p in needed if p.resource_type == "TOPIC"})
    groups = sorted({p.name for p in needed if p.resource_type == "GROUP"})
    if any(p.resource_type == "CLUSTER" for p in needed):
        granted[("CLUSTER", CLUSTER)] = _cluster_operations(admin, timeout)
    granted.update(_topic_operations(admin, topics, timeout))
    granted.update(_group_operations(admin, groups, timeout))
    absent = [p.name for p in needed if p.operation == "CREATE" and "UNKNOWN_TOPIC" in granted[("TOPIC", p.name)]]
    for topic in _creatable(admin, absent, timeout):
        granted[("TOPIC", topic)].add("CREATE")
    return [p for p in needed if not _allows(granted.get((p.resource_type, p.name), set()), p.operation)]


def refuse_missing(
    admin: Any, needed: Sequence[Permission], settings: Mapping[str, str], *, done: str = "nothing was done"
) -> None:
    """Raise :class:`AccessDeniedError` naming the first permission the cluster does not grant (and the count).

    ``done`` says what the job had done by then.
    """
    refuse(missing_permissions(admin, needed), settings, done=done)


def refuse(missing: Sequence[Permission], settings: Mapping[str, str], *, done: str = "nothing was done") -> None:
    """Raise :class:`AccessDeniedError` for the first of ``missing`` (nothing when it is empty)."""
    if not missing:
        return
    principal = principal_of(settings)
    more = f"; {len(missing) - 1} more missing" if len(missing) > 1 else ""
    raise AccessDeniedError(
        f"{missing[0].refusal(principal)}{more}; {done}. Grant it: kafka-acls.sh --bootstrap-server "
        f"{settings.get('bootstrap.servers', 'HOST:PORT')} {missing[0].grant_command(principal)} "
        "(docs/operations.md lists every ACL the job needs)"
    )


_IMPLIED = {
    "DESCRIBE": {"READ", "WRITE", "DELETE", "ALTER", "DESCRIBE"},
    "DESCRIBE_CONFIGS": {"ALTER_CONFIGS", "DESCRIBE_CONFIGS"},
}


def _allows(operations: set[str], operation: str) -> bool:
    if "ALL" in operations:
        return True
    if "UNKNOWN_TOPIC" in operations and operation != "CREATE":
        return True  # a topic not created yet: what its ACLs allow shows once it exists
    return bool(operations & _IMPLIED.get(operation, {operation}))


def _names(operations: Iterable[Any] | None) -> set[str]:
    # None: the broker's answer was "no operation" (a cluster without an authorizer lists every one instead).
    if operations is None:
        return set()
    return {getattr(operation, "name", str(operation)) for operation in operations}


def _reason(exc: BaseException) -> tuple[str, str]:
    error = exc.args[0] if exc.args else exc
    name = error.name() if hasattr(error, "name") else type(exc).__name__
    text = error.str() if hasattr(error, "str") else str(exc)
    return name, text


#: How long the check asks the cluster again when it does not answer within a request's timeout (a loaded
#: machine, a controller just elected).
TIMEOUT_PATIENCE_SECONDS = 60.0

#: librdkafka's and Kafka's names of a request that timed out.
_TIMEOUTS = frozenset({"_TIMED_OUT", "_TIMED_OUT_QUEUE", "REQUEST_TIMED_OUT"})


def _patiently(ask: Callable[[float], T], timeout: float) -> T:
    """``ask(request timeout)``, asked again after a timeout until :data:`TIMEOUT_PATIENCE_SECONDS` have passed."""
    deadline = time.monotonic() + max(timeout, TIMEOUT_PATIENCE_SECONDS)
    while True:
        try:
            return ask(max(1.0, min(timeout, deadline - time.monotonic())))
        except Exception as exc:
            if _reason(exc)[0] not in _TIMEOUTS or time.monotonic() >= deadline:
                raise
            time.sleep(0.5)


def _cluster_operations(admin: Any, timeout: float) -> set[str]:
    try:
        description = _patiently(
            lambda ask: admin.describe_cluster(include_authorized_operations=True, request_timeout=ask).result(),
            timeout,
        )
    except Exception as exc:
        name, text = _reason(exc)
        if "AUTHORIZATION" in name:
            return set()
        raise ClusterError(f"cannot ask the cluster what this client may do: {text}") from exc
    operations = _names(description.authorized_operations)
    if not operations and _may_describe_broker_configs(admin, description, timeout):
        # Kafka lists the cluster's operations only to a principal that may DESCRIBE it; the one other cluster
        # operation a job needs is asked directly (reading a broker's configuration changes nothing).
        operations.add("DESCRIBE_CONFIGS")
    return operations


def _may_describe_broker_configs(admin: Any, description: Any, timeout: float) -> bool:
    from confluent_kafka.admin import ConfigResource, ResourceType

    broker = str(min(node.id for node in description.nodes))

    def ask(seconds: float) -> None:
        for future in admin.describe_configs([ConfigResource(ResourceType.BROKER, broker)]).values():
            future.result(seconds)

    try:
        _patiently(ask, timeout)
    except Exception as exc:
        name, text = _reason(exc)
        if "AUTHORIZATION" in name:
            return False
        raise ClusterError(f"cannot ask the cluster what this client may do: {text}") from exc
    return True


def _topic_operations(admin: Any, topics: list[str], timeout: float) -> dict[tuple[str, str], set[str]]:
    from confluent_kafka import TopicCollection

    if not topics:
        return {}
    futures = admin.describe_topics(
        TopicCollection(topics), include_authorized_operations=True, request_timeout=timeout
    )
    return _operations("TOPIC", futures)


def _creatable(admin: Any, topics: list[str], timeout: float) -> list[str]:
    """Which of these absent topics this client may create (a validate-only CreateTopics: nothing is made)."""
    from confluent_kafka.admin import NewTopic

    if not topics:
        return []
    allowed = []
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=1) for topic in topics], validate_only=True, request_timeout=timeout
    )
    for topic, future in futures.items():
        try:
            future.result()
            allowed.append(topic)
        except Exception as exc:
            name, text = _reason(exc)
            if "AUTHORIZATION" in name:
                continue
            if name not in ("TOPIC_ALREADY_EXISTS", "POLICY_VIOLATION", "INVALID_REPLICATION_FACTOR"):
                raise ClusterError(f"cannot ask the cluster whether topic {topic!r} may be created: {text}") from exc
            allowed.append(topic)  # authorized; the creation itself reports the rest
    return allowed


#: How long a group's coordinator may take to answer on a cluster no consumer has used yet.
GROUP_COORDINATOR_SECONDS = 60.0


def _group_operations(admin: Any, groups: list[str], timeout: float) -> dict[tuple[str, str], set[str]]:
    """Each group's operations; asked again while its coordinator is not ready.

    On a cluster no consumer has used yet, the first describe creates ``__consumer_offsets`` and answers
    NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS for a second or so, or (on a loaded machine) times out while
    the topic's partitions are created: asked again for up to a minute.
    """
    result: dict[tuple[str, str], set[str]] = {}
    deadline = time.monotonic() + max(timeout, GROUP_COORDINATOR_SECONDS)
    pending = list(groups)
    while pending:
        ask = max(1.0, min(timeout, deadline - time.monotonic()))
        futures = admin.describe_consumer_groups(pending, include_authorized_operations=True, request_timeout=ask)
        retry = time.monotonic() < deadline
        answered = _operations("GROUP", futures, retry=(*COORDINATOR_NOT_READY, *_TIMEOUTS) if retry else ())
        result.update(answered)
        pending = [group for group in pending if ("GROUP", group) not in answered]
        if pending:
            time.sleep(0.5)
    return result


def _operations(
    kind: str, futures: Mapping[Any, Any], *, retry: Collection[str] = ()
) -> dict[tuple[str, str], set[str]]:
    """Each described resource's operations (none when Kafka refused to describe it).

    A resource whose error is one of ``retry`` is left out of the answer.
    """
    result: dict[tuple[str, str], set[str]] = {}
    for name, future in futures.items():
        key = (kind, str(name))
        try:
            result[key] = _names(future.result().authorized_operations)
        except Exception as exc:
            error, text = _reason(exc)
            if error in retry:
                continue
            if "AUTHORIZATION" in error:
                result[key] = set()
            elif kind == "TOPIC" and "UNKNOWN_TOPIC" in error:  # UNKNOWN_TOPIC_OR_PART, librdkafka's _UNKNOWN_TOPIC
                # Not there yet (the restore creates it): Kafka answers "unknown" only to a principal that may
                # describe it, and CREATE is asked of the cluster or a pattern, which a name alone cannot show.
                result[key] = {"DESCRIBE", "UNKNOWN_TOPIC"}
            else:
                raise ClusterError(
                    f"cannot ask the cluster what this client may do on {kind.lower()} {name!r}: {error} {text}"
                ) from exc
    return result
