"""Consumer group offsets read in a child process, so that a crash of the Kafka client there does not end the job.

librdkafka's admin ListConsumerGroupOffsets can crash the whole process when a group's coordinator moves while a
request is under way (a rolling restart, a leader election of ``__consumer_offsets``): a failed assertion in
``rd_kafka_enq_once_del_source_return`` (librdkafka issue #3663) or a NULL dereference on NOT_COORDINATOR (issue
#5040), both open in librdkafka 2.16. The soak benchmark (benchmarks/soak_bench.py) saw both kill a continuous
backup's driver during rolling restarts (exit 134 with the assertion in its log, and 139). A backup's offset rounds
and checkpoint cuts read every group's offsets, over and over; they go through this module. (The preflight's
permission check at a job's start still asks DescribeConsumerGroups in the driver: a crash there fails the start,
and a service manager starts it again.)

:class:`IsolatedGroupOffsets` keeps one child process (``python -P -m spark_kafka_backup.kafka.isolated_groups``,
given the driver's ``sys.path``) with its own admin client. The protocol runs over the child's stdin and a copy of
its original stdout (its own stdout then goes to stderr, so nothing printed there can break it): length-prefixed
pickles, at most :data:`MAX_FRAME` bytes, each read under a deadline. The child first answers ``ready``; then per
request it sends ``progress`` after each group and one answer. Every failure of the exchange (the child died, said
nothing for too long, sent what is not a frame) ends that child and is raised as a :class:`GroupReaderError`, a
transient :class:`~spark_kafka_backup.errors.ClusterError` that does not replace the driver's own admin client; the
next call starts a new child. A child that cannot start at all (it ends before ``ready``) is a non-transient error.
Thread-safe (the job's main thread and its cluster watch share one); :meth:`IsolatedGroupOffsets.close` at the end.
"""

from __future__ import annotations

import logging
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from spark_kafka_backup.errors import ClusterError
from spark_kafka_backup.kafka.admin_session import GroupReaderError
from spark_kafka_backup.kafka.cluster import TopicPartitionKey

log = logging.getLogger("spark_kafka_backup.kafka")

#: A frame: its length, then a pickle of at most MAX_FRAME bytes (offsets of groups times partitions).
_LENGTH = struct.Struct(">I")
MAX_FRAME = 256 << 20
#: How long the child may take to start (import confluent_kafka, answer ``ready``).
START_SECONDS = 60.0
#: How long the child may go without a word during a request, beyond the request's own timeout (it reports after
#: each group, and each of its requests is given the timeout).
QUIET_GRACE_SECONDS = 30.0
#: How long the child's answers may leave out some node's groups (a node that did not answer the listing) before the
#: child is replaced by one with a new client: after a whole cluster restarted, a client's connection to one node can
#: stay broken, and every group that node coordinates would be missing from every round meanwhile.
INCOMPLETE_SECONDS = 60.0

GroupOffsets = dict[str, dict[TopicPartitionKey, int]]


class IsolatedGroupOffsets:
    """``committed_group_offsets`` asked of a child process (module docstring)."""

    def __init__(self, settings: Mapping[str, str], *, command: Sequence[str] | None = None) -> None:
        self._settings = dict(settings)
        self._command = list(command or [sys.executable, "-P", "-m", __name__])
        self._child: subprocess.Popen[bytes] | None = None
        self._answers = -1  # the fd the child's answers come on
        self._lock = threading.Lock()
        self._closed = False
        #: Children started (the first included): a figure for logs and tests.
        self.children_started = 0
        #: Since when the answers leave some node's groups out (None: the last one was complete).
        self._incomplete_since: float | None = None

    def __call__(self, *, timeout: float = 30) -> tuple[GroupOffsets, bool]:
        with self._lock:
            if self._closed:
                raise GroupReaderError("the job is ending: consumer group offsets are no longer read", transient=True)
            child = self._child or self._start()
            try:
                _send(child, timeout)
                while True:
                    kind, value = _receive(self._answers, deadline=time.monotonic() + timeout + QUIET_GRACE_SECONDS)
                    if kind != "progress":
                        break
            except Exception as exc:  # any failure of the exchange: this child is done (module docstring)
                self._fail(child, exc)
            if kind == "ok":
                offsets, complete = value
                self._watch_complete(complete)
                return offsets, complete
            message, transient = value
            if transient:  # the child ends itself after a transient failure: its client is not destroyed under a
                self._stop()  # request, and the next call starts afresh
            raise GroupReaderError(message, transient=transient)

    def _watch_complete(self, complete: bool) -> None:
        """Replace the child after its answers left groups out for :data:`INCOMPLETE_SECONDS` (the caller holds the
        lock; no request is under way)."""
        now = time.monotonic()
        if complete:
            self._incomplete_since = None
        elif self._incomplete_since is None:
            self._incomplete_since = now
        elif now - self._incomplete_since >= INCOMPLETE_SECONDS:
            log.warning(
                "consumer group offsets: a node of the cluster has not answered the listing of groups for %.0f s, "
                "so the groups it coordinates are missing from the offsets stored meanwhile; reading them with a "
                "new client (%d started so far)",
                now - self._incomplete_since,
                self.children_started + 1,
            )
            self._stop()
            self._incomplete_since = now

    def close(self) -> None:
        """End the child; a request under way on another thread ends with it (the job is ending)."""
        self._closed = True
        if self._lock.acquire(timeout=1):
            try:
                self._stop()
            finally:
                self._lock.release()
        elif (child := self._child) is not None:
            child.kill()  # the caller's exchange fails at once, and it stops the child

    def _start(self) -> subprocess.Popen[bytes]:
        answers, theirs = os.pipe()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        try:
            child = subprocess.Popen(
                [*self._command, str(theirs)], stdin=subprocess.PIPE, pass_fds=(theirs,), env=env,
                start_new_session=True,  # a Ctrl-C to the job's terminal is the driver's to handle
            )  # fmt: skip
        except OSError as exc:
            os.close(answers)
            raise GroupReaderError(f"cannot start the process reading consumer group offsets: {exc}") from exc
        finally:
            os.close(theirs)
        self._child, self._answers = child, answers
        self.children_started += 1
        try:
            _send(child, self._settings)
            kind, _ = _receive(answers, deadline=time.monotonic() + START_SECONDS)
            if kind != "ready":
                raise ValueError(f"it said {kind!r} first")
        except Exception as exc:
            try:
                code: int | None = child.wait(2)  # it closed the pipe because it ended: how
            except subprocess.TimeoutExpired:
                code = None
            self._stop()
            if code is not None:
                raise GroupReaderError(
                    f"the process reading consumer group offsets could not start (exit {code}; its error is above "
                    f"in the job's log)"
                ) from exc
            raise GroupReaderError(f"the process reading consumer group offsets did not start: {exc}",
                                   transient=True) from exc  # fmt: skip
        return child

    def _fail(self, child: subprocess.Popen[bytes], exc: BaseException) -> NoReturn:
        how = _how_it_ended(child, exc)
        self._stop()
        if self._closed:
            raise GroupReaderError("the job is ending: consumer group offsets are no longer read", transient=True)
        log.warning(
            "the process reading consumer group offsets %s (%d started so far); the next attempt starts another "
            "(librdkafka can crash when a group's coordinator moves: issues #3663 and #5040)",
            how,
            self.children_started,
        )
        raise GroupReaderError(f"the process reading consumer group offsets {how}", transient=True) from exc

    def _stop(self) -> None:
        child, self._child = self._child, None
        if self._answers >= 0:
            os.close(self._answers)
            self._answers = -1
        if child is None:
            return
        if child.poll() is None:
            child.kill()
        child.wait()
        if child.stdin is not None:
            child.stdin.close()


def _how_it_ended(child: subprocess.Popen[bytes], exc: BaseException) -> str:
    try:
        code = child.wait(2)
    except subprocess.TimeoutExpired:
        return "gave no answer in time" if isinstance(exc, TimeoutError) else f"sent what it should not ({exc})"
    if code < 0:
        try:
            return f"died of {signal.Signals(-code).name}"
        except ValueError:
            return f"died of signal {-code}"
    return f"exited with {code}"


def _send(child: subprocess.Popen[bytes], value: Any) -> None:
    assert child.stdin is not None
    data = pickle.dumps(value)
    child.stdin.write(_LENGTH.pack(len(data)) + data)
    child.stdin.flush()


def _read_exactly(fd: int, size: int, deadline: float) -> bytes:
    parts, got = [], 0
    while got < size:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            raise TimeoutError("no answer in time")
        part = os.read(fd, min(size - got, 1 << 20))
        if not part:
            raise EOFError("the pipe closed")
        parts.append(part)
        got += len(part)
    return b"".join(parts)


def _receive(fd: int, *, deadline: float) -> tuple[str, Any]:
    (size,) = _LENGTH.unpack(_read_exactly(fd, _LENGTH.size, deadline))
    if size > MAX_FRAME:
        raise ValueError(f"a frame of {size} bytes (at most {MAX_FRAME})")
    kind, value = pickle.loads(_read_exactly(fd, size, deadline))  # our own child, on a pipe of its own
    return str(kind), value


# -- the child ---------------------------------------------------------------------------------------------------


def _write_frame(fd: int, value: Any) -> None:
    data = pickle.dumps(value)
    os.write(fd, _LENGTH.pack(len(data)) + data)


def _read_frame(stream: Any) -> Any:
    head = stream.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        raise EOFError
    (size,) = _LENGTH.unpack(head)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError
    return pickle.loads(data)


def _watch_parent(parent: int) -> None:
    """End the child when the job's driver is gone (kill -9), even inside a request that never returns."""
    while os.getppid() == parent:
        time.sleep(2)
    os._exit(0)


def _serve(answers: int) -> None:
    """The child: settings, ``ready``, then per request a timeout, ``progress`` after each group and an answer:
    ``("ok", (offsets, complete))`` or ``("error", (message, transient))``. After a transient failure it exits
    (its client is left to the process's end, not destroyed under a request)."""
    import faulthandler

    faulthandler.enable()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.dup2(2, 1)  # anything printed goes to stderr, never onto the answers' pipe
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    from spark_kafka_backup.kafka.cluster import admin_client, committed_group_offsets

    requests = sys.stdin.buffer
    try:
        settings = _read_frame(requests)
        admin = admin_client(settings)
        _write_frame(answers, ("ready", None))
        while True:
            timeout = _read_frame(requests)
            try:
                found = committed_group_offsets(
                    admin, timeout=timeout, progress=lambda: _write_frame(answers, ("progress", None))
                )
                _write_frame(answers, ("ok", found))
            except ClusterError as exc:
                _write_frame(answers, ("error", (str(exc), exc.transient)))
                if exc.transient:
                    os._exit(0)
            except Exception as exc:  # a defect, not the cluster: said once, not asked again for ever
                _write_frame(answers, ("error", (f"cannot read consumer group offsets: {exc!r}", False)))
    except (EOFError, BrokenPipeError):
        return  # the job ended


if __name__ == "__main__":
    _serve(int(sys.argv[1]))
