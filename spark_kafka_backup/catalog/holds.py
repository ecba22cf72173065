"""Holds: what a standby follower (``restore --follow``) has not restored yet, kept from ``prune``.

A follower writes one small JSON document per standby it feeds, and replaces it after every pass::

    ROOT/kbackup~state/followers/<name>.json
    {"v": 1, "name": ..., "host": ..., "pid": ..., "updatedAt": <epoch ms>, "expiresAfterMs": <milliseconds>,
     "next": {"<topic>/<partition>": <next source offset to restore>, ...}, "topics": [...] | "pattern": "..."}

``next`` names each backed-up partition the follower has restored into: records at and above that offset are still
to restore there. A partition it does not name, of a topic the follower restores (``topics``: the list it was given;
``pattern``: its regex; neither: every topic), is held whole (a topic or partition it has not reached yet); other
topics are not held. ``prune`` keeps every segment a live hold needs; a hold not renewed for ``expiresAfterMs``
(the follower stopped, or its host is gone) has expired and holds nothing, and the prune says so.

Crash safety: the document is replaced whole (a temporary file renamed, or one object PUT): a reader sees the
previous pass's or the new one's. A follower killed between passes leaves its last hold, which expires.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass

from spark_kafka_backup.errors import FormatError
from spark_kafka_backup.partition.layout import state_dir
from spark_kafka_backup.storage import Location, read_document, storage_for, write_whole
from spark_kafka_backup.text import iso_time

#: A hold not renewed for this long is taken as gone (``restore --follow --hold-expires`` changes it).
DEFAULT_EXPIRY_SECONDS = 24 * 3600

_NAME = re.compile(r"^[A-Za-z0-9._-]{1,120}$")
_MAX_DOCUMENT = 16 << 20


@dataclass(frozen=True)
class Hold:
    """One follower's hold on the backup."""

    name: str
    host: str
    pid: int
    updated_at: int
    expires_after_s: float
    #: Per backed-up partition: the next source offset the follower restores (records below it are on the standby).
    next: Mapping[tuple[str, int], int]
    #: The topics the follower restores: a list, or a regex (``pattern``), or neither (every topic of the backup).
    topics: tuple[str, ...] | None = None
    pattern: str | None = None

    def covers(self, topic: str) -> bool:
        if self.topics is not None:
            return topic in self.topics
        return self.pattern is None or re.fullmatch(self.pattern, topic) is not None

    def expires_at(self) -> int:
        return self.updated_at + int(self.expires_after_s * 1000)

    def live(self, now_ms: int) -> bool:
        return now_ms < self.expires_at()

    def needs_from(self, topic: str, partition: int) -> int | None:
        """The lowest offset of ``topic``/``partition`` this hold keeps (0: all of it; ``None``: none of it, a topic the
        follower does not restore)."""
        if (topic, partition) in self.next:
            return self.next[(topic, partition)]
        return 0 if self.covers(topic) else None

    def describe(self) -> str:
        return f"follower {self.name} ({self.host}, pid {self.pid}, last pass {iso_time(self.updated_at)})"

    def encode(self) -> bytes:
        document: dict[str, object] = {
            "v": 1,
            "name": self.name,
            "host": self.host,
            "pid": self.pid,
            "updatedAt": self.updated_at,
            "expiresAfterMs": int(self.expires_after_s * 1000),
            "next": {f"{topic}/{partition}": offset for (topic, partition), offset in sorted(self.next.items())},
        }
        if self.topics is not None:
            document["topics"] = list(self.topics)
        if self.pattern is not None:
            document["pattern"] = self.pattern
        return json.dumps(document, sort_keys=True).encode() + b"\n"


def holds_dir(root: Location) -> Location:
    return state_dir(root) / "followers"


def check_hold_name(name: str) -> str:
    if not _NAME.match(name):
        raise FormatError(f"a follower's name is 1 to 120 letters, digits, '.', '_' or '-', not {name!r}")
    return name


def write_hold(root: Location, hold: Hold) -> None:
    """Replace the follower's hold (atomically)."""
    write_whole(holds_dir(root) / f"{check_hold_name(hold.name)}.json", hold.encode())


def read_holds(root: Location) -> list[Hold]:
    """Every follower's hold, live or expired; one that does not parse is an error naming its file (a prune must not
    take a damaged hold as none)."""
    directory = holds_dir(root)
    names = storage_for(directory).list_files(directory) or []
    found = []
    for name in sorted(names):
        if not name.endswith(".json"):
            continue
        path = directory / name
        document = read_document(path, _MAX_DOCUMENT, what="follower hold")
        try:
            found.append(
                Hold(
                    name=str(document["name"]),
                    host=str(document["host"]),
                    pid=int(document["pid"]),
                    updated_at=int(document["updatedAt"]),
                    expires_after_s=int(document["expiresAfterMs"]) / 1000,
                    next={_partition_key(key, path): int(offset) for key, offset in document["next"].items()},
                    topics=tuple(str(t) for t in document["topics"]) if "topics" in document else None,
                    pattern=str(document["pattern"]) if "pattern" in document else None,
                )
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise FormatError(f"{path}: not a follower hold ({exc}); delete it if no follower uses it") from exc
    return found


def _partition_key(text: str, path: Location) -> tuple[str, int]:
    topic, _, partition = text.rpartition("/")
    if not topic or not partition.isdigit():
        raise FormatError(f"{path}: {text!r} is not TOPIC/PARTITION")
    return topic, int(partition)


def live_holds(root: Location, now_ms: int | None = None) -> tuple[list[Hold], list[Hold]]:
    """The holds that count (renewed within their expiry) and those that expired."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    holds = read_holds(root)
    return [h for h in holds if h.live(now)], [h for h in holds if not h.live(now)]
