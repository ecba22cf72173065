"""Checkpoints: consistent cuts of a backup, with increasing ids and a status.

A checkpoint's **cut** is every consumer group's committed offsets, then every
backed-up partition's end offset, read in that order (so no group offset
points past the cut). It is **completed** once the backup holds every
partition up to the cut's end offsets; restoring "to checkpoint N" restores
each partition up to its end offset in the cut and the groups as of the cut.

Lifecycle, one JSON document per checkpoint, replaced atomically at each step::

    requested  (kbackup checkpoint create: asks a running backup for a cut)
    pending    (the backup took the cut; waiting for the data to be backed up)
    completed  (the backup holds everything up to the cut)
    failed     (with a reason: the backup stopped before reaching the cut)

A snapshot backup records a completed checkpoint when it finishes. Ids are
claimed exclusively (a temporary file is hard-linked into place, which fails
if the id exists), so two requests never share an id.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kbackup.errors import BackupNotFoundError, FormatError
from kbackup.fsutil import TMP_SUFFIX, atomic_write, fsync_dir, read_limited

CHECKPOINT_DIR = Path(".kbackup") / "checkpoints"
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
            document = json.loads(data)
            if document.get("version") != CHECKPOINT_VERSION or document.get("status") not in STATUSES:
                raise FormatError("not a checkpoint this kbackup can read", file=file)
            return cls(
                id=int(document["id"]),
                status=document["status"],
                requested_at=int(document["requestedAt"]),
                taken_at=None if document["takenAt"] is None else int(document["takenAt"]),
                reason=document["reason"],
                groups={group: _flat(offsets) for group, offsets in document["groups"].items()},
                ends=_flat(document["ends"]),
            )
        except FormatError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise FormatError(f"not a valid checkpoint ({exc})", file=file) from None


def _nest(offsets: Offsets) -> dict[str, dict[str, int]]:
    nested: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        nested.setdefault(topic, {})[str(partition)] = offset
    return nested


def _flat(nested: dict[str, Any]) -> Offsets:
    return {(topic, int(p)): int(o) for topic, partitions in nested.items() for p, o in partitions.items()}


def checkpoint_path(root: Path, checkpoint_id: int) -> Path:
    return root / CHECKPOINT_DIR / f"checkpoint-{checkpoint_id:06d}.json"


def list_checkpoints(root: Path, *, above: int = 0) -> list[Checkpoint]:
    """Every checkpoint with an id greater than ``above``, by id (only those files are read)."""
    directory = root / CHECKPOINT_DIR
    if not directory.is_dir():
        return []
    return [
        Checkpoint.decode(read_limited(path, 1 << 30), file=str(path))
        for path in sorted(directory.glob("checkpoint-*.json"))
        if int(path.stem.split("-")[1]) > above
    ]


def read_checkpoint(root: Path, checkpoint_id: int) -> Checkpoint:
    path = checkpoint_path(root, checkpoint_id)
    if not path.exists():
        raise BackupNotFoundError(f"checkpoint {checkpoint_id} does not exist in {root}")
    return Checkpoint.decode(read_limited(path, 1 << 30), file=str(path))


def save(root: Path, checkpoint: Checkpoint) -> None:
    """Replace a checkpoint's document (its id already claimed)."""
    atomic_write(checkpoint_path(root, checkpoint.id), checkpoint.encode())


def claim(root: Path, make: Any) -> Checkpoint:
    """Create a checkpoint under the next free id; ``make(id)`` builds it."""
    directory = root / CHECKPOINT_DIR
    directory.mkdir(parents=True, exist_ok=True)
    while True:
        existing = [int(p.stem.split("-")[1]) for p in directory.glob("checkpoint-*.json")]
        checkpoint: Checkpoint = make(max(existing, default=0) + 1)
        tmp = directory / f".claim-{os.getpid()}-{checkpoint.id}{TMP_SUFFIX}"
        tmp.write_bytes(checkpoint.encode())
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        try:
            os.link(tmp, checkpoint_path(root, checkpoint.id))
        except FileExistsError:
            continue  # someone else took this id
        finally:
            tmp.unlink(missing_ok=True)
        fsync_dir(directory)
        return checkpoint


def request(root: Path) -> Checkpoint:
    """Ask a running backup for a checkpoint (``kbackup checkpoint create``)."""
    if not root.is_dir():
        raise BackupNotFoundError(f"{root}: backup root is not a directory")
    return claim(root, lambda new_id: Checkpoint(new_id, "requested", _now()))


def record_completed(root: Path, groups: dict[str, Offsets], ends: Offsets, taken_at: int) -> Checkpoint:
    """A checkpoint whose cut the backup already holds (a finished snapshot)."""
    return claim(root, lambda new_id: Checkpoint(new_id, "completed", taken_at, taken_at, None, groups, ends))


def take(root: Path, checkpoint: Checkpoint, groups: dict[str, Offsets], ends: Offsets, taken_at: int) -> Checkpoint:
    taken = replace(checkpoint, status="pending", taken_at=taken_at, groups=groups, ends=ends)
    save(root, taken)
    return taken


def finish(root: Path, checkpoint: Checkpoint, *, failed_reason: str | None = None) -> Checkpoint:
    done = replace(checkpoint, status="failed" if failed_reason else "completed", reason=failed_reason)
    save(root, done)
    return done


def latest_completed_before(root: Path, time_ms: int) -> Checkpoint | None:
    candidates = [c for c in list_checkpoints(root) if c.status == "completed" and (c.taken_at or 0) <= time_ms]
    return max(candidates, key=lambda c: (c.taken_at or 0, c.id), default=None)


def _now() -> int:
    return int(time.time() * 1000)
