"""The backup job's account of records the source deleted before they could be read.

The tasks that find such ranges record them in the backup
(:mod:`spark_kafka_backup.catalog.source_gaps`); the job reads what was recorded since
it started, names each new range in one line as it appears (on the driver,
wherever the tasks ran), and counts them at the end. A snapshot that lost
records this way exits 1 naming them, unless ``--accept-source-loss``: its
user asks "is everything there?", and it is not. A continuous backup goes on
and says so (the ranges stay in the backup for ``ls``, ``describe``,
``report`` and ``verify``).
"""

from __future__ import annotations

import logging
import time

from spark_kafka_backup.catalog.source_gaps import HOW, SourceGap, gap_records, merge
from spark_kafka_backup.errors import BackupNotFoundError
from spark_kafka_backup.kafka.topics import TopicSelection
from spark_kafka_backup.partition.layout import list_topics
from spark_kafka_backup.storage import Location
from spark_kafka_backup.text import count

log = logging.getLogger("spark_kafka_backup.backup")

#: How many ranges the final line names (all are counted).
NAMED = 5


class SourceLossReport:
    """Ranges lost at the source, recorded in ``target`` since the job started (module docstring)."""

    def __init__(self, target: Location, selection: TopicSelection, *, every: float) -> None:
        self._target = target
        self._selection = selection
        self._every = every
        self._next = time.monotonic() + every
        # What was recorded before the job started, by record: a record written or rewritten since is this run's
        # (told by its content, never by comparing clocks of the driver and the executors).
        self._before = {
            (topic, name): gap for topic in self._topics() for name, gap in gap_records(target, topic).items()
        }
        self._seen: dict[tuple[str, str], SourceGap] = {}

    def _topics(self) -> list[str]:
        try:
            return [topic for topic in list_topics(self._target) if self._selection.matches(topic)]
        except BackupNotFoundError:
            return []

    def poll(self, *, now: bool = False) -> None:
        """Log the ranges recorded since the last look (at most every ``every`` seconds unless ``now``)."""
        if not now and time.monotonic() < self._next:
            return
        self._next = time.monotonic() + self._every
        for topic in self._topics():
            for name, gap in gap_records(self._target, topic).items():
                key = (topic, name)
                if self._before.get(key) == gap or self._seen.get(key) == gap:
                    continue
                self._seen[key] = gap
                how = HOW.get(gap.how, "")
                log.warning("%s were deleted at the source before the backup read them%s: lost at the source, "
                            "recorded in the backup", gap.describe(), how)  # fmt: skip

    @property
    def gaps(self) -> list[SourceGap]:
        return merge(self._seen.values())

    def describe(self) -> str:
        """``"120 offsets in 2 ranges: t/0 offsets 5..64, t/1 offsets 0..59"`` (empty without any)."""
        gaps = self.gaps
        if not gaps:
            return ""
        named = ", ".join(gap.describe() for gap in gaps[:NAMED])
        more = f" and {len(gaps) - NAMED} more" if len(gaps) > NAMED else ""
        return f"{count(sum(g.count for g in gaps), 'offset')} in {count(len(gaps), 'range')}: {named}{more}"
