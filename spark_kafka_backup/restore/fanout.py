"""One read of a repartitioned topic feeding several of its target partitions' transactions at once.

A target partition of a repartitioned topic receives records from every backed-up partition, so a task of its own
reads and decodes the whole topic: restored into N partitions, the topic was read N times. A task given several
target partitions of the topic (a *bundle*, :func:`spark_kafka_backup.restore.task.restore_bundle`) reads the merged
stream once and routes each round (:func:`~spark_kafka_backup.restore.stream_columns.routed_rounds`), and hands
each target partition the chunk routed to it, the same chunks
:func:`~spark_kafka_backup.restore.stream_columns.routed_chunks` gives a task of its own
(tests/unit/test_restore_fanout.py compares them). Each target partition's transactions run in a thread of their
own, with their own transactional producer, fence and progress marker
(:mod:`spark_kafka_backup.restore.transaction_run`): what a target holds after any crash, and where a rerun goes on,
does not depend on whether its records were read with others.

- **Pace and memory**: each target takes its chunks from a queue of :data:`QUEUE_CHUNKS`; a full queue holds the
  read, so the slowest target paces the others. The read hands out a round to every target before it reads the
  next, so the chunks alive come from the last ``QUEUE_CHUNKS + 2`` rounds at most, whatever the number of
  targets; a chunk keeps the batches its round was cut from (to name a record), and consecutive rounds share all
  but the one each used up: about one batch per backed-up partition and one per round. A target waiting for the
  read commits an open transaction once it is older than a transaction's time, as if the read had given it records,
  so no transaction of a fast target is held open by a slow one.
- **A target that ends early** (fenced by a newer restore, its producer stuck) leaves the read: its chunks are
  dropped, the others go on.
- **A target that fails**, or a read that fails, abandons the others: each aborts its open transaction at its next
  chunk (what it committed stays, with its marker) and the failure is the task's.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

import numpy as np

from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.restore.repartition import Repartition
from spark_kafka_backup.restore.stream_columns import Chunk, routed_rounds
from spark_kafka_backup.schema_registry.wire_columns import ColumnIdRewrite

T = TypeVar("T")

#: Chunks waiting for one target partition at most.
QUEUE_CHUNKS = 2

#: How often a waiting thread looks whether the read was abandoned, in seconds.
_LOOK_SECONDS = 0.2

#: How long a stopped task waits for each of its threads to abort (a transactional call is bounded by its own).
_STOP_SECONDS = 30.0


class Abandoned(Exception):  # noqa: N818 (not an error of its own: another target's failure ends this one)
    """Raised into a target partition's transactions when another target or the read failed."""


class _End:
    """The read is complete: no chunk follows."""


class _Raise:
    """The read stopped at a record with an error (each target raises it after its last chunk)."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


class _Feed:
    """One target partition's chunks, from the reader thread to the target's thread."""

    def __init__(self, abandon: threading.Event) -> None:
        self._queue: queue.Queue[Chunk | _End | _Raise] = queue.Queue(maxsize=QUEUE_CHUNKS)
        self._abandon = abandon
        #: Set once the target's thread ended: the reader drops its chunks.
        self.left = threading.Event()
        #: The read's own error was raised to the target (every target gets it: it abandons none).
        self.read_failed = False

    def offer(self, item: Chunk | _End | _Raise) -> None:
        """Queue ``item`` unless the target left or the read was abandoned (waiting while the queue is full)."""
        while not self.left.is_set() and not self._abandon.is_set():
            try:
                self._queue.put(item, timeout=_LOOK_SECONDS)
                return
            except queue.Full:
                continue

    def chunks(self) -> Iterator[Chunk | None]:
        """The target's chunks, in the stream's order, and ``None`` each time none came for :data:`_LOOK_SECONDS`
        (the transactions commit one that is open too long); :class:`Abandoned` once the read is abandoned."""
        while True:
            try:
                item: Chunk | _End | _Raise | None = self._queue.get(timeout=_LOOK_SECONDS)
            except queue.Empty:
                item = None
            if self._abandon.is_set():
                raise Abandoned("another target partition of the task failed")
            if item is None:
                yield None
                continue
            if isinstance(item, _End):
                return
            if isinstance(item, _Raise):
                self.read_failed = True
                raise item.error  # the same error in every target (the task raises one)
            yield item


def fan_out(
    repartition: Repartition,
    readers: dict[int, PartitionReader],
    targets: Sequence[int],
    work: Callable[[int, Iterator[Chunk | None]], T],
    *,
    rewrite: ColumnIdRewrite | None = None,
    topic: str = "",
    leaving: tuple[type[BaseException], ...] = (),
) -> dict[int, T | BaseException]:
    """Run ``work(target, chunks)`` for each target partition in a thread of its own, the chunks routed to it from
    one read of the merged stream; return each target's result, or the exception it ended with. A target ending
    with one of ``leaving`` leaves the read as one that returned; any other exception abandons the others."""
    abandon = threading.Event()
    feeds = {target: _Feed(abandon) for target in targets}
    outcomes: dict[int, T | BaseException] = {}

    def read() -> None:
        rounds = routed_rounds(repartition, readers, rewrite=rewrite, topic=topic)
        try:
            for merged, routed, stop in rounds:
                for target, feed in feeds.items():
                    chosen = np.flatnonzero(routed == target)
                    if len(chosen) and not feed.left.is_set():
                        feed.offer(merged.chunk(chosen))
                if stop is not None:
                    for feed in feeds.values():
                        feed.offer(_Raise(stop))
                    return
                if abandon.is_set() or all(feed.left.is_set() for feed in feeds.values()):
                    return
            for feed in feeds.values():
                feed.offer(_End())
        except BaseException as exc:  # every target raises it, as a task of its own reading would
            for feed in feeds.values():
                feed.offer(_Raise(exc))
        finally:
            rounds.close()  # its readers' files with it

    def run(target: int) -> None:
        feed = feeds[target]
        try:
            outcomes[target] = work(target, feed.chunks())
        except BaseException as exc:
            outcomes[target] = exc
            if not isinstance(exc, (Abandoned, *leaving)) and not feed.read_failed:
                abandon.set()
        finally:
            feed.left.set()

    reader = threading.Thread(target=read, name="kbackup-restore-read", daemon=True)
    threads = [
        threading.Thread(target=run, args=(target,), name=f"kbackup-restore-{target}", daemon=True)
        for target in targets
    ]
    reader.start()
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            thread.join()
    except BaseException:
        abandon.set()  # the task was stopped: every target aborts its open transaction, before its files go
        for thread in [reader, *threads]:
            thread.join(_STOP_SECONDS)
        raise
    abandon.set()  # the reader stops waiting on a target's full queue
    reader.join()
    return outcomes
