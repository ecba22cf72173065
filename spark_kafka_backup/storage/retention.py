"""What a delete leaves behind on a versioned or locked bucket, and how prune, merge and erase report it.

On an S3 bucket with versioning (and every bucket with Object Lock has it), deleting an object only puts a *delete
marker* on top: the backup no longer sees the object, but its bytes stay as a noncurrent version, billed, until a
lifecycle rule expires it; under Object Lock (governance or compliance mode, or a legal hold) that version cannot be
deleted at all before its retain-until date. Google Cloud Storage's object versioning and retention policies and Azure
Blob versioning and immutability policies do the same under other names (docs/operations.md, "Versioned and locked
buckets").

So a delete has two outcomes here: the object is gone, or the store keeps versions of it.
:class:`~spark_kafka_backup.storage.removals.Removals` gathers the second kind while prune, merge or erase run, and
:func:`describe` turns it into the lines the commands print: a kept version is never reported as deleted or its bytes
as freed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from spark_kafka_backup.storage.object_path import ObjectPath
from spark_kafka_backup.text import count


@dataclass(frozen=True)
class KeptVersion:
    """A version of a deleted object that the store still keeps."""

    location: str
    version: str
    size: int
    #: Until when a lock keeps it (Object Lock's retain-until date), or ``None``: kept by versioning alone.
    retain_until: datetime | None = None
    #: ``"COMPLIANCE"``, ``"GOVERNANCE"``, ``"legal hold"``, or ``None`` when no lock holds it.
    lock: str | None = None
    #: Set when the store kept versions of the object that could not be listed: why (then ``version`` is empty).
    unseen: str | None = None


@dataclass
class Purge:
    """What deleting the earlier versions of deleted objects did (erase)."""

    #: The versions (and delete markers) deleted for good: (location, version id).
    deleted: list[tuple[str, str]] = field(default_factory=list)
    #: Versions a lock kept.
    kept: list[KeptVersion] = field(default_factory=list)


#: Stores whose deletes may leave versions this tool does not see yet (object versioning, soft delete).
UNSEEN_KEEPING = {"gs": "Google Cloud Storage", "az": "Azure Blob Storage"}


def unseen_note(root: object) -> str | None:
    """For a root on a store whose versioning or soft delete this tool cannot see: the line that says so."""
    if not isinstance(root, ObjectPath) or root.scheme not in UNSEEN_KEEPING:
        return None
    return (
        f"{UNSEEN_KEEPING[root.scheme]} keeps deleted objects for a while when the bucket has object versioning or "
        "soft delete, which spark-kafka-backup does not see: docs/operations.md, 'Versioned and locked buckets'"
    )


def describe(kept: list[KeptVersion], *, shown: int = 10) -> list[str]:
    """The lines saying what the store kept of deleted objects: none when it kept nothing."""
    unseen = [version for version in kept if version.unseen is not None]
    kept = [version for version in kept if version.unseen is None]
    lines = []
    if unseen:
        lines.append(
            f"the bucket keeps versions of {count(len(unseen), 'deleted object')} it would not list "
            f"({unseen[0].unseen}): the backup no longer reads them; a lifecycle rule that expires noncurrent "
            "versions deletes them"
        )
    if not kept:
        return lines
    objects = {version.location for version in kept}
    lines.append(
        f"the bucket keeps {count(len(kept), 'version')} of {count(len(objects), 'deleted object')} "
        f"({count(sum(version.size for version in kept), 'byte')}, not freed): the backup no longer reads them"
    )
    locked = [version for version in kept if version.lock is not None]
    versioned = len(kept) - len(locked)
    if versioned:
        lines.append(
            f"  {count(versioned, 'version')} kept by the bucket's versioning: a lifecycle rule that expires "
            "noncurrent versions deletes them"
        )
    if locked:
        modes = ", ".join(sorted({str(v.lock) for v in locked}))
        lines.append(f"  {count(len(locked), 'version')} retained by a lock ({modes}): {until_text(locked)}")
        for version in sorted(locked, key=lambda v: (v.location, v.version))[:shown]:
            lines.append(f"  retained: {version.location} version {version.version} ({_lock_text(version)})")
        if len(locked) > shown:
            lines.append(f"  ... and {count(len(locked) - shown, 'more retained version')}")
    return lines


def until_text(locked: list[KeptVersion]) -> str:
    """Until when ``locked`` stay: the last retain-until date, and legal holds, which have none."""
    until, held = _ends(locked)
    parts = [f"the store refuses to delete them before {_when(until)}"] if until is not None else []
    return "; ".join([*parts, *(["a legal hold keeps them until it is lifted"] if held else [])])


def release_text(locked: list[KeptVersion]) -> str:
    """When deleting ``locked`` can be tried again: after the last retain-until date, once legal holds are lifted."""
    until, held = _ends(locked)
    parts = [f"after {_when(until)}"] if until is not None else []
    return " and ".join([*parts, *(["once the legal hold is lifted"] if held else [])])


def _ends(locked: list[KeptVersion]) -> tuple[datetime | None, bool]:
    """The last retain-until date among ``locked``, and whether a legal hold holds any."""
    until = max((v.retain_until for v in locked if v.retain_until is not None), default=None)
    return until, any("legal hold" in str(v.lock) for v in locked)


def _lock_text(version: KeptVersion) -> str:
    if version.retain_until is None:
        return str(version.lock)
    return f"{version.lock} until {_when(version.retain_until)}"


def _when(moment: datetime) -> str:
    """In UTC (a moment without a zone is taken as UTC, as S3 gives it)."""
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
