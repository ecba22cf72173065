"""How fast a restore may produce: limits for the whole restore, shared out to its tasks.

Flags and what they bound:

- ``--max-records-per-second N`` and ``--max-bytes-per-second N``: the restore
  as a whole (every partition together);
- ``--max-rate N``: each target partition on its own.

Spark tasks run on executors that do not talk to each other, so the driver
shares a whole-restore limit out before the tasks start: each of the tasks
that can run at once (the restore's partitions or the cluster's task slots,
whichever is fewer) gets an equal part. The sum never exceeds the limit; a
task that ends early does not hand its part to the others, so near the end a
restore runs below its limit.

A task keeps to its part with :class:`Pace`: after ``n`` records and ``b``
bytes (keys, values and headers) it may go on once ``n / records_per_second``
and ``b / bytes_per_second`` seconds have passed since it started producing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Throttle:
    """Rates one producer may not exceed (``None``: no limit)."""

    records_per_second: float | None = None
    bytes_per_second: float | None = None

    @property
    def limited(self) -> bool:
        return self.records_per_second is not None or self.bytes_per_second is not None

    def share(self, tasks_at_once: int, *, per_partition_records: int | None = None) -> Throttle:
        """One task's part of this whole-restore limit, capped by the per-partition ``--max-rate``."""
        parts = max(1, tasks_at_once)
        records = None if self.records_per_second is None else self.records_per_second / parts
        if per_partition_records is not None:
            records = per_partition_records if records is None else min(records, per_partition_records)
        size = None if self.bytes_per_second is None else self.bytes_per_second / parts
        return Throttle(records, size)

    def describe(self) -> str:
        parts = []
        if self.records_per_second is not None:
            parts.append(f"{self.records_per_second:,.0f} records/s")
        if self.bytes_per_second is not None:
            parts.append(f"{self.bytes_per_second:,.0f} bytes/s")
        return " and ".join(parts) or "no limit"


#: How far behind its limit a producer may fall and then catch up at full speed.
BURST_SECONDS = 1.0


class Pace:
    """Keeps one producing loop within a :class:`Throttle`, sleeping as needed.

    The clock and the sleep are parameters so that the arithmetic can be tested without waiting.
    """

    def __init__(
        self,
        throttle: Throttle,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.throttle = throttle
        self._clock = clock
        self._sleep = sleep
        self.started = clock()

    def due(self, records: int, size: int) -> float:
        """The earliest clock time at which ``records`` records of ``size`` bytes in all have been allowed."""
        wait = 0.0
        if self.throttle.records_per_second:
            wait = records / self.throttle.records_per_second
        if self.throttle.bytes_per_second:
            wait = max(wait, size / self.throttle.bytes_per_second)
        return self.started + wait

    def wait(self, records: int, size: int, *, until: float) -> None:
        """Sleep until ``records`` records and ``size`` bytes are due, but not past ``until`` (the open
        transaction's commit time: a transaction left open past the broker's timeout would be aborted)."""
        now = self._clock()
        due = self.due(records, size)
        if due < now - BURST_SECONDS:
            # Time spent producing nothing (skipping records already restored, reading other partitions' records)
            # is not credit: at most BURST_SECONDS of it may be made up at full speed.
            self.started += now - BURST_SECONDS - due
        pause = min(due, until) - now
        if pause > 0:
            self._sleep(pause)
