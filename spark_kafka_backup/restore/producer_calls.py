"""What both producers of a restore task share: librdkafka's transactional calls given up when they hang, the
producer's settings, and which failure of a record explains a failed transaction best.

librdkafka can wait for ever in a transactional call despite its timeout when the coordinator's broker left the
cluster (librdkafka issues #5456 and #5511: a coordinator request's timeout is never checked, and a decommissioned
cached coordinator is never asked again). So each transactional call runs on a thread of its own (:func:`within`)
and is given up :data:`STUCK_GRACE_SECONDS` after its own timeout: the task then leaves that producer where it
hangs, starts a new one (which fences it and aborts its open transaction), reads the marker again and goes on from
there, at most :data:`PRODUCER_ATTEMPTS` times.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

#: How long after its own timeout a transactional call is given up (see the module docstring).
STUCK_GRACE_SECONDS = 15.0

#: Producers one task starts before it fails: the first, and one after each call given up.
PRODUCER_ATTEMPTS = 3

#: The timeouts given to librdkafka's transactional calls (seconds).
INIT_SECONDS = 120.0
SEND_OFFSETS_SECONDS = 60.0
COMMIT_SECONDS = 120.0
ABORT_SECONDS = 10.0

#: A producer fenced by a newer one with its transactional id: _FENCED, PRODUCER_FENCED, INVALID_PRODUCER_EPOCH.
FENCED_CODES = frozenset({-144, 90, 47})
#: An operation refused because the producer had a fatal error (the fatal error itself says why).
FATAL = -150

#: Broker errors about one record of a batch: librdkafka gives every record of the batch the batch's error, so the
#: task names the record that explains it (the most extreme timestamp, the largest record, a missing key).
INVALID_TIMESTAMP, TOO_LARGE, INVALID_RECORD, CORRUPT = 32, 10, 87, 2
RECORD_ERRORS = frozenset({INVALID_TIMESTAMP, TOO_LARGE, INVALID_RECORD, CORRUPT})
#: Messages purged from the producer's queue when a transaction is aborted: a consequence, never the cause.
PURGED = frozenset({-152, -151})


class StuckProducerError(Exception):
    """A transactional call did not return within its timeout and the grace after it (internal to the task)."""


class FencedError(Exception):
    """A newer producer with the partition's transactional id took over (internal to the task)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def within(seconds: float, call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args)`` on a daemon thread; its result or exception, or :class:`StuckProducerError` after
    ``seconds + STUCK_GRACE_SECONDS`` (the call goes on waiting on its thread, holding its producer)."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call(*args)
        except BaseException as exc:  # re-raised on the task's thread
            outcome["error"] = exc

    thread = threading.Thread(target=run, name="spark-kafka-backup-restore-transaction", daemon=True)
    thread.start()
    thread.join(seconds + STUCK_GRACE_SECONDS)
    if thread.is_alive():
        raise StuckProducerError(
            f"{getattr(call, '__name__', 'a transactional call')} did not return within {seconds:.0f} s "
            f"+ {STUCK_GRACE_SECONDS:.0f} s"
        )
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def producer_settings(
    client: dict[str, str], batch_size: int, message_bytes: int = 1_000_000, *, sharing: int = 1
) -> dict[str, object]:
    """A restore producer's settings; ``sharing`` producers in one task (a repartitioned topic's bundle) share the
    queue one producer of its own has (64 MiB), each keeping at least four batches."""
    queue_kbytes = max(64 * 1024 // max(sharing, 1), 4 * batch_size // 1024)
    return {
        **client,
        "enable.idempotence": "true",
        "acks": "all",
        "max.in.flight.requests.per.connection": "5",
        "message.max.bytes": str(max(message_bytes, batch_size)),
        "batch.size": str(batch_size),
        "linger.ms": "20",
        "queue.buffering.max.kbytes": str(queue_kbytes),
    }


def failure_rank(code: int, *, stamp: int | None, key_missing: bool, size: int) -> int:
    """How well a failed delivery explains a failure: the record-level cause best, purged messages least."""
    if code in PURGED:
        return 0
    if code not in RECORD_ERRORS:
        return 1
    if code == INVALID_TIMESTAMP:
        return 2 + (0 if stamp is None else min(abs(stamp - int(time.time() * 1000)), 1 << 62))
    if code == INVALID_RECORD:
        return 2 + (1 << 62 if key_missing else 0)
    return 2 + size


def record_failure(
    code: int, reason: str, *, topic: str, partition: int, offset: int, stamp: int, key_missing: bool, size: int
) -> str:
    """The broker's ``reason``, and the record of ``topic``/``partition`` at ``offset`` it is about when the error
    is about a record."""
    if code not in RECORD_ERRORS:
        return reason
    detail = f"timestamp {stamp}" if code == INVALID_TIMESTAMP else f"{size} bytes of key and value"
    if code == INVALID_RECORD and key_missing:
        detail = "no key"
    return f"the broker rejected the record of {topic}/{partition} offset {offset} ({detail}): {reason}"
