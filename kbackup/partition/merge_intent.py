"""Where ``kbackup merge`` writes down what it is about to do, and reading it back (see
:mod:`kbackup.catalog.merge` for the protocol; this layer only reads it, for the partition index rebuild)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from kbackup.partition.layout import state_dir
from kbackup.storage import Location, exists, read_limited


def intent_path(root: Location) -> Location:
    """Where an unfinished merge's intent is written down."""
    return state_dir(root) / "merge-intent.json"


@dataclass(frozen=True)
class MergeIntent:
    """What an unfinished merge was doing: replacing ``segments`` of a partition by ``merged``."""

    topic: str
    partition: int
    segments: tuple[str, ...]
    merged: str


def pending_intent(root: Location) -> MergeIntent | None:
    """The unfinished merge of the backup under ``root``, if any."""
    path = intent_path(root)
    if not exists(path):
        return None
    intent = json.loads(read_limited(path, 1 << 30))
    return MergeIntent(intent["topic"], intent["partition"], tuple(intent["segments"]), intent["merged"])
