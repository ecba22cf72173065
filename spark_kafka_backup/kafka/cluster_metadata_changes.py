"""Changing the cluster around the topics (``restore --metadata-policy apply|replace``): ACL bindings created and
deleted (CreateAcls, DeleteAcls); dynamic broker configurations per broker and existing topics' configurations set
and deleted (IncrementalAlterConfigs through librdkafka); cluster-wide broker defaults and client quotas set and
removed (both over the second connection of :mod:`spark_kafka_backup.kafka.wire_admin`); SCRAM credentials deleted
(a credential is never created: Kafka never gave its password to the backup).

:class:`MetadataChanges` is what to do; :meth:`MetadataChanges.permissions` what the restore's principal needs for it
(asked before anything changes); :func:`make_changes` does it, each kind of change on its own, and returns a line for
each change the cluster refused (the others are made: the caller compares again).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from spark_kafka_backup.catalog.cluster_metadata import AclEntry, QuotaEntry
from spark_kafka_backup.kafka.permissions import CLUSTER, Permission
from spark_kafka_backup.kafka.wire_admin import WireAdmin, wire_admin

#: A quota entity (type -> name, ``None``: the type's default) as a sortable, hashable key.
QuotaEntity = tuple[tuple[str, str | None], ...]


@dataclass(frozen=True)
class MetadataChanges:
    """What to change on a cluster (module docstring); ``None`` as a value deletes it."""

    create_acls: tuple[AclEntry, ...] = ()
    delete_acls: tuple[AclEntry, ...] = ()
    #: (entity, quota name, value or ``None``).
    quotas: tuple[tuple[QuotaEntity, str, float | None], ...] = ()
    #: (name, value or ``None``) of the cluster-wide defaults.
    cluster_defaults: tuple[tuple[str, str | None], ...] = ()
    #: (broker id, name, value or ``None``).
    broker_configs: tuple[tuple[int, str, str | None], ...] = ()
    #: (user, mechanism) whose SCRAM credential is deleted.
    delete_scram: tuple[tuple[str, str], ...] = ()
    #: (topic, name, value or ``None``) of existing topics' configurations.
    topic_configs: tuple[tuple[str, str, str | None], ...] = ()

    def __add__(self, other: MetadataChanges) -> MetadataChanges:
        return MetadataChanges(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))

    def permissions(self) -> list[Permission]:
        """What the principal needs on the cluster to make these changes."""
        needed = []
        if self.create_acls or self.delete_acls:
            needed.append(Permission("ALTER", "CLUSTER", CLUSTER, "create and delete ACLs"))
        if self.delete_scram:
            needed.append(Permission("ALTER", "CLUSTER", CLUSTER, "delete SCRAM credentials"))
        if self.quotas or self.cluster_defaults or self.broker_configs:
            needed.append(Permission("ALTER_CONFIGS", "CLUSTER", CLUSTER, "change broker configurations and client "
                                     "quotas"))  # fmt: skip
        needed += [Permission("ALTER_CONFIGS", "TOPIC", topic, "change its configuration")
                   for topic in sorted({topic for topic, _, _ in self.topic_configs})]  # fmt: skip
        first: dict[tuple[str, str, str], Permission] = {}
        for permission in needed:
            first.setdefault((permission.operation, permission.resource_type, permission.name), permission)
        return list(first.values())


def quota_entity(entry: QuotaEntry) -> QuotaEntity:
    return tuple(sorted(entry.entity.items()))


def make_changes(admin: Any, client: Mapping[str, str], changes: MetadataChanges, *, timeout: float = 30) -> list[str]:
    """Make ``changes`` on the cluster of ``admin`` (librdkafka's, of the ``client`` settings); a line for each one
    refused (module docstring)."""
    with contextlib.ExitStack() as stack:
        # The second connection first: settings it cannot honour, or a cluster it cannot reach, stop the run before
        # anything changed, not half-way.
        wire = (
            stack.enter_context(wire_admin(client, timeout=timeout))
            if changes.quotas or changes.cluster_defaults
            else None
        )
        failed: list[str] = []
        if changes.create_acls:
            failed += _create_acls(admin, changes.create_acls, timeout)
        for broker in sorted({broker for broker, _, _ in changes.broker_configs}):
            values = {name: value for b, name, value in changes.broker_configs if b == broker}
            failed += _alter(admin, "BROKER", str(broker), values, timeout)
        for topic in sorted({topic for topic, _, _ in changes.topic_configs}):
            values = {name: value for t, name, value in changes.topic_configs if t == topic}
            failed += _alter(admin, "TOPIC", topic, values, timeout)
        if wire is not None:
            failed += _alter_quotas(wire, changes.quotas)
            if changes.cluster_defaults:
                defaults = dict(changes.cluster_defaults)
                failed += _attempt(f"change the cluster-wide defaults {', '.join(defaults)}",
                                   lambda: wire.alter_cluster_defaults(defaults))  # fmt: skip
        if changes.delete_scram:
            failed += _delete_scram(admin, changes.delete_scram, timeout)
        if changes.delete_acls:  # last: an ACL deleted could be one this run needed
            failed += _delete_acls(admin, changes.delete_acls, timeout)
        return failed


def _attempt(what: str, action: Any) -> list[str]:
    try:
        action()
    except Exception as exc:
        return [f"cannot {what}: {_text(exc)}"]
    return []


def _text(exc: BaseException) -> str:
    error = exc.args[0] if exc.args else exc
    return str(error.str() if hasattr(error, "str") else error) or type(exc).__name__


def _binding(acl: AclEntry, *, as_filter: bool = False) -> Any:
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    kind = ResourceType.BROKER if acl.resource_type == "CLUSTER" else ResourceType[acl.resource_type]
    make = AclBindingFilter if as_filter else AclBinding
    return make(kind, acl.name, ResourcePatternType[acl.pattern_type], acl.principal, acl.host,
                AclOperation[acl.operation], AclPermissionType[acl.permission])  # fmt: skip


def _create_acls(admin: Any, acls: tuple[AclEntry, ...], timeout: float) -> list[str]:
    bindings = {_binding(acl): acl for acl in acls}
    futures = admin.create_acls(list(bindings), request_timeout=timeout)
    failed = []
    for binding, future in futures.items():
        failed += _attempt(f"create ACL {bindings[binding].describe()}", lambda f=future: f.result(timeout + 5))
    return failed


def _delete_acls(admin: Any, acls: tuple[AclEntry, ...], timeout: float) -> list[str]:
    filters = {_binding(acl, as_filter=True): acl for acl in acls}
    futures = admin.delete_acls(list(filters), request_timeout=timeout)
    failed = []
    for binding_filter, future in futures.items():
        failed += _attempt(f"delete ACL {filters[binding_filter].describe()}", lambda f=future: f.result(timeout + 5))
    return failed


def _alter(admin: Any, kind: str, name: str, values: Mapping[str, str | None], timeout: float) -> list[str]:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    entries = [
        ConfigEntry(key, value, incremental_operation=AlterConfigOpType.DELETE if value is None else
                    AlterConfigOpType.SET)
        for key, value in sorted(values.items())
    ]  # fmt: skip
    resource = ConfigResource(ResourceType[kind], name, incremental_configs=entries)

    def alter() -> None:
        for future in admin.incremental_alter_configs([resource], request_timeout=timeout).values():
            future.result(timeout + 5)

    return _attempt(f"change the configuration of {kind.lower()} {name} ({', '.join(sorted(values))})", alter)


def _alter_quotas(wire: WireAdmin, quotas: tuple[tuple[QuotaEntity, str, float | None], ...]) -> list[str]:
    by_entity: dict[QuotaEntity, dict[str, float | None]] = {}
    for entity, name, value in quotas:
        by_entity.setdefault(entity, {})[name] = value
    failed = []
    for entity, values in sorted(by_entity.items(), key=lambda item: str(item[0])):
        shown = QuotaEntry(dict(entity), {}).entity_text()
        failed += _attempt(f"change the client quotas of {shown}",
                           lambda e=entity, v=values: wire.alter_client_quotas([(dict(e), v)]))  # fmt: skip
    return failed


def _delete_scram(admin: Any, users: tuple[tuple[str, str], ...], timeout: float) -> list[str]:
    from confluent_kafka.admin import ScramMechanism, UserScramCredentialDeletion

    failed = []
    for user, mechanism in users:
        deletion = UserScramCredentialDeletion(user, ScramMechanism[mechanism.replace("-", "_")])

        def delete(d: Any = deletion) -> None:
            for future in admin.alter_user_scram_credentials([d], request_timeout=timeout).values():
                future.result(timeout + 5)

        failed += _attempt(f"delete the {mechanism} credential of SCRAM user {user}", delete)
    return failed
