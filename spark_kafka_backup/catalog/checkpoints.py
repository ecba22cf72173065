"""Checkpoints: consistent cuts of a backup, with increasing ids and a status.

A checkpoint's **cut** is every consumer group's committed offsets, then every
backed-up partition's end offset, read in that order (so no group offset
points past the cut). It is **completed** once the backup holds every
partition up to the cut's end offsets; restoring "to checkpoint N" restores
each partition up to its end offset in the cut and the groups as of the cut.

Lifecycle, one JSON document per checkpoint, replaced atomically at each step::

    requested  (spark-kafka-backup checkpoint create: asks a running backup for a cut)
    pending    (the backup took the cut; waiting for the data to be backed up)
    completed  (the backup holds everything up to the cut)
    failed     (with a reason: the backup stopped before reaching the cut)

A snapshot backup records a completed checkpoint when it finishes. Ids are
claimed exclusively (on disk a synced temporary file is hard-linked into
place, on S3 a conditional PUT; both fail if the id exists), so two requests
never share an id.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field, replace
from typing import Any

from spark_kafka_backup.errors import BackupNotFoundError, FormatError
from spark_kafka_backup.format.json_document import MAX_TIME_MS, parse_document
from spark_kafka_backup.format.naming import check_partition, check_topic_name
from spark_kafka_backup.partition.layout import state_dir
from spark_kafka_backup.storage import Location, ObjectPath, exists, read_limited, storage_for, write_whole
from spark_kafka_backup.storage.lease import Holder, current_holder

#: How a continuous backup names itself in the target's lease: the only job that serves checkpoint requests.
CONTINUOUS_BACKUP = "continuous backup"

_NAME = re.compile(r"^checkpoint-([0-9]+)\.json$")
CHECKPOINT_VERSION = 1
STATUSES = ("requested", "pending", "completed", "failed")

Offsets = dict[tuple[str, int], int]


@dataclass(frozen=True)
class Checkpoint:
    id: int
    status: str
    requested_at: int
    taken_at: int | None = None
    reason: str | None = None
    groups: dict[str, Offsets] = field(default_factory=dict)
    ends: Offsets = field(default_factory=dict)

    def encode(self) -> bytes:
        document = {
            "version": CHECKPOINT_VERSION,
            "id": self.id,
            "status": self.status,
            "requestedAt": self.requested_at,
            "takenAt": self.taken_at,
            "reason": self.reason,
            "groups": {group: _nest(offsets) for group, offsets in sorted(self.groups.items())},
            "ends": _nest(self.ends),
        }
        return json.dumps(document, indent=1).encode() + b"\n"

    @classmethod
    def decode(cls, data: bytes, *, file: str) -> Checkpoint:
        try:
            document = parse_document(data, file=file, what="checkpoint")
            if document.get("version") != CHECKPOINT_VERSION or document.get("status") not in STATUSES:
                raise FormatError("not a checkpoint this spark-kafka-backup can read", file=file)
            return cls(
                id=int(document["id"]),
                status=document["status"],
                requested_at=_time(document["requestedAt"], file),
                taken_at=None if document["takenAt"] is None else _time(document["takenAt"], file),
                reason=document["reason"],
                groups={str(group): _flat(offsets, file) for group, offsets in document["groups"].items()},
                ends=_flat(document["ends"], file),
            )
        except FormatError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise FormatError(f"not a valid checkpoint ({exc})", file=file) from exc


def _nest(offsets: Offsets) -> dict[str, dict[str, int]]:
    nested: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        nested.setdefault(topic, {})[str(partition)] = offset
    return nested


def _time(value: object, file: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < MAX_TIME_MS:
        raise FormatError("not a checkpoint: a time is not epoch milliseconds", file=file, found=repr(value)[:40])
    return value


def _flat(nested: dict[str, Any], file: str) -> Offsets:
    return {
        (check_topic_name(topic, file=file), check_partition(int(p), file=file)): int(o)
        for topic, partitions in nested.items()
        for p, o in partitions.items()
    }


#: The largest checkpoint read (groups times partitions, a million offsets): a larger file is not one spark-kafka-backup
#: wrote.
MAX_CHECKPOINT_BYTES = 64 << 20


def checkpoint_dir(root: Location) -> Location:
    return state_dir(root) / "checkpoints"


def checkpoint_path(root: Location, checkpoint_id: int) -> Location:
    return checkpoint_dir(root) / f"checkpoint-{checkpoint_id:06d}.json"


def _ids(root: Location) -> list[int]:
    directory = checkpoint_dir(root)
    names = storage_for(directory).list_files(directory) or []
    return sorted(int(match.group(1)) for name in names if (match := _NAME.match(name)))


def list_checkpoints(root: Location, *, above: int = 0) -> list[Checkpoint]:
    """Every checkpoint with an id greater than ``above``, by id (only those files are read)."""
    result = []
    for checkpoint_id in _ids(root):
        if checkpoint_id > above:
            path = checkpoint_path(root, checkpoint_id)
            result.append(Checkpoint.decode(read_limited(path, MAX_CHECKPOINT_BYTES), file=str(path)))
    return result


def read_checkpoint(root: Location, checkpoint_id: int) -> Checkpoint:
    path = checkpoint_path(root, checkpoint_id)
    if not exists(path):
        raise BackupNotFoundError(f"checkpoint {checkpoint_id} does not exist in {root}")
    return Checkpoint.decode(read_limited(path, MAX_CHECKPOINT_BYTES), file=str(path))


def save(root: Location, checkpoint: Checkpoint) -> None:
    """Replace a checkpoint's document (its id already claimed)."""
    write_whole(checkpoint_path(root, checkpoint.id), checkpoint.encode())


def claim(root: Location, make: Any) -> Checkpoint:
    """Create a checkpoint under the next free id; ``make(id)`` builds it."""
    while True:
        checkpoint: Checkpoint = make(max(_ids(root), default=0) + 1)
        path = checkpoint_path(root, checkpoint.id)
        if storage_for(path).create_exclusive(path, checkpoint.encode()):
            return checkpoint
        # someone else took this id: try the next one


def serving_backup(root: Location) -> Holder | None:
    """The continuous backup running on ``root`` now (from its lease), which takes the cut of a request."""
    holder = current_holder(state_dir(root))
    return holder if holder is not None and holder.purpose == CONTINUOUS_BACKUP else None


def request(root: Location) -> Checkpoint:
    """Ask a running backup for a checkpoint (``spark-kafka-backup checkpoint create``)."""
    if not isinstance(root, ObjectPath) and not root.is_dir():
        raise BackupNotFoundError(f"{root}: backup root is not a directory")
    return claim(root, lambda new_id: Checkpoint(new_id, "requested", _now()))


def record_completed(root: Location, groups: dict[str, Offsets], ends: Offsets, taken_at: int) -> Checkpoint:
    """A checkpoint whose cut the backup already holds (a finished snapshot)."""
    return claim(root, lambda new_id: Checkpoint(new_id, "completed", taken_at, taken_at, None, groups, ends))


def take(
    root: Location, checkpoint: Checkpoint, groups: dict[str, Offsets], ends: Offsets, taken_at: int
) -> Checkpoint:
    taken = replace(checkpoint, status="pending", taken_at=taken_at, groups=groups, ends=ends)
    save(root, taken)
    return taken


def finish(root: Location, checkpoint: Checkpoint, *, failed_reason: str | None = None) -> Checkpoint:
    done = replace(checkpoint, status="failed" if failed_reason else "completed", reason=failed_reason)
    save(root, done)
    return done


def latest_completed_before(root: Location, time_ms: int) -> Checkpoint | None:
    candidates = [c for c in list_checkpoints(root) if c.status == "completed" and (c.taken_at or 0) <= time_ms]
    return max(candidates, key=lambda c: (c.taken_at or 0, c.id), default=None)


def _now() -> int:
    return int(time.time() * 1000)
