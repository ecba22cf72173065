"""The restore's schema registry step (``--schema-registry``), on the driver, before the plan.

The backup's copy of its registry is registered in the target registry
(:mod:`spark_kafka_backup.schema_registry.registry_import`), which gives the target's id of every schema; each restored
topic then gets the :class:`~spark_kafka_backup.schema_registry.wire.IdRewrite` its tasks apply to the records' keys and
values (``--schema-ids``). It runs before the plan because the plan compares records already in the target with the
backup's, rewritten. Registering is idempotent: a restore refused or killed later leaves the schemas registered,
and its rerun finds them.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import replace

from spark_kafka_backup.errors import BackupNotFoundError, UsageError
from spark_kafka_backup.partition.layout import list_topics
from spark_kafka_backup.restore.settings import RestoreSettings
from spark_kafka_backup.schema_registry.capture import read_registry_copy, registry_copy_path
from spark_kafka_backup.schema_registry.client import RegistryClient
from spark_kafka_backup.schema_registry.registry_copy import RegistryCopy
from spark_kafka_backup.schema_registry.registry_import import (
    KEY_SUFFIX,
    VALUE_SUFFIX,
    RegistryImportState,
    check_import_mode,
    import_registry,
    target_subjects,
)
from spark_kafka_backup.schema_registry.wire import IdRewrite
from spark_kafka_backup.storage import exists
from spark_kafka_backup.text import count

log = logging.getLogger("spark_kafka_backup.restore")


def register_schemas(settings: RestoreSettings) -> tuple[RestoreSettings, list[str]]:
    """Register the backup's schemas in the target registry (look them up only, in a dry run); return the settings
    with each topic's id rewrite, and lines saying what was found and done."""
    address = settings.schema_registry
    assert address is not None
    copy = read_registry_copy(settings.source)
    if copy is None:
        raise BackupNotFoundError(
            f"--schema-registry: the backup {settings.source} holds no copy of a schema registry "
            f"({registry_copy_path(settings.source)} is missing): back up with --schema-registry, or run "
            "spark-kafka-backup schemas capture"
        )
    topics = list_topics(settings.source)
    unknown = sorted(topic for topic in settings.schema_ids if topic is not None and topic not in topics)
    if unknown:
        raise UsageError(
            f"--schema-ids names {', '.join(map(repr, unknown))}, which the backup does not hold (its topics: "
            f"{', '.join(topics) or 'none'}; name a topic as it was backed up)"
        )
    client = RegistryClient(address)
    subjects = target_subjects(copy, settings.topic_map)
    # One state per target registry and cluster: the ids the records restored there name.
    digest = hashlib.sha256(f"{address.shown}\n{settings.client['bootstrap.servers']}".encode()).hexdigest()[:16]
    state = settings.restore_state_dir / f"schemas-{digest}.json"
    pending = RegistryImportState(state) if not settings.dry_run or exists(state) else None
    if settings.schema_registry_import:
        check_import_mode(client, subjects.values())  # before anything is registered
    done = import_registry(
        client, copy, subjects, pending, dry_run=settings.dry_run, keep_ids=settings.schema_registry_import
    )
    for warning in done.warnings:
        log.warning("%s", warning)
    lines = [
        f"schema registry {address.shown}: {copy.describe()} in the backup (captured from {copy.registry}), "
        "subject versions "
        + (
            f"{done.found} there already, {len(done.missing)} to register"
            if settings.dry_run
            else f"{done.found} there already, {done.registered} registered"
        )
    ]
    renamed = sorted((s, t) for s, t in subjects.items() if s != t)
    if renamed:
        lines.append("  subjects renamed with their topics: " + ", ".join(f"{s} -> {t}" for s, t in renamed))
    if done.relaxed:
        lines.append(
            "  compatibility set to NONE while registering older versions, then restored: " + ", ".join(done.relaxed)
        )
    moved = sorted((old, new) for old, new in done.ids.items() if old != new)
    if moved:
        shown = ", ".join(f"{old} -> {new}" for old, new in moved[:20]) + (", ..." if len(moved) > 20 else "")
        lines.append(f"  {count(len(moved), 'schema id')} differ in the target: {shown}")
    elif settings.schema_registry_import:
        lines.append(
            "  to be registered under the backup's ids (--schema-registry-import): no record's id would change"
            if settings.dry_run
            else "  registered under the backup's ids (--schema-registry-import): no record's id changes"
        )
    else:
        lines.append("  every schema id is the same in the target" + (" (so far)" if done.missing else ""))
    rewrites = {
        topic: _rewrite(
            topic, copy, done.ids, settings.schema_id_fields(topic), address.shown, lenient=bool(done.missing)
        )
        for topic in topics
    }
    if done.missing:
        lines.append("  schema ids are rewritten once the schemas are registered (their target ids are not known yet)")
    for topic, rewrite in sorted(rewrites.items()):
        fields = [name for name, on in (("keys", rewrite.key), ("values", rewrite.value)) if on]
        if fields:
            lines.append(f"  {topic}: schema ids in {' and '.join(fields)} are rewritten")
        elif settings.schema_id_fields(topic) == "none":
            lines.append(f"  {topic}: restored as it is (--schema-ids none)")
    if not settings.dry_run:  # a dry run prints them with its plan
        for line in lines:
            log.info("%s", line)
    return replace(settings, id_rewrites=rewrites), lines


def _rewrite(
    topic: str, copy: RegistryCopy, ids: dict[int, int], fields: str, registry: str, *, lenient: bool
) -> IdRewrite:
    """``--schema-ids``: ``auto`` rewrites the fields of the topic's TopicNameStrategy subjects and checks the other
    fields (a record there naming a moved id stops the restore); ``values`` rewrites values and checks keys."""
    if fields == "none":
        return IdRewrite(ids, registry=registry)
    key = fields == "keys-and-values" or topic + KEY_SUFFIX in copy.subjects
    value = fields in ("values", "keys-and-values") or topic + VALUE_SUFFIX in copy.subjects
    return IdRewrite(
        ids, key=key, value=value, registry=registry, check_key=not key, check_value=not value, lenient=lenient
    )
