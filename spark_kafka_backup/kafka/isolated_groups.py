"""Consumer group offsets read in a child process, so that a crash of the Kafka client there does not end the job.

librdkafka's admin ListConsumerGroupOffsets can crash the whole process when a group's coordinator moves while a
request is under way (a rolling restart, a leader election of ``__consumer_offsets``): a failed assertion in
``rd_kafka_enq_once_del_source_return`` (librdkafka issue #3663) or a NULL dereference on NOT_COORDINATOR (issue
#5040), both open in librdkafka 2.16. The soak benchmark (benchmarks/soak_bench.py) saw both kill a continuous
backup's driver during rolling restarts. Nothing else a backup asks the cluster goes through that path.

:class:`IsolatedGroupOffsets` keeps one child process (``python -m spark_kafka_backup.kafka.isolated_groups``) with
its own admin client and asks it for :func:`~spark_kafka_backup.kafka.cluster.committed_group_offsets` over a pipe
(pickled requests and answers). When the child dies, the caller gets a transient
:class:`~spark_kafka_backup.errors.ClusterError` (the offset round is asked again, as after any outage) and the next
request starts a new child. Made and used on the driver, one per thread; :meth:`IsolatedGroupOffsets.close` at the
job's end.
"""

from __future__ import annotations

import pickle
import select
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from typing import IO, Any

from spark_kafka_backup.errors import ClusterError
from spark_kafka_backup.kafka.cluster import TopicPartitionKey

#: A message on the pipe: its length, then the pickle.
_LENGTH = struct.Struct(">I")
#: The longest a child may take for one request before it is taken for stuck and replaced.
ANSWER_SECONDS = 600.0

GroupOffsets = dict[str, dict[TopicPartitionKey, int]]


class IsolatedGroupOffsets:
    """``committed_group_offsets`` asked of a child process (module docstring)."""

    def __init__(self, settings: Mapping[str, str], *, command: Sequence[str] | None = None) -> None:
        self._settings = dict(settings)
        self._command = list(command or [sys.executable, "-m", __name__])
        self._child: subprocess.Popen[bytes] | None = None
        #: Children started (the first included): a figure for logs and tests.
        self.children_started = 0

    def __call__(self, *, timeout: float = 30) -> tuple[GroupOffsets, bool]:
        child = self._child or self._start()
        assert child.stdin is not None
        assert child.stdout is not None
        try:
            _send(child.stdin, timeout)
            status, answer = _receive(child.stdout, deadline=time.monotonic() + ANSWER_SECONDS)
        except (OSError, EOFError, TimeoutError) as exc:
            self._stop()
            raise ClusterError(
                f"the client reading consumer group offsets {_how_it_ended(child, exc)}; asked again with a new one "
                "(librdkafka can crash when a group's coordinator moves: issues #3663 and #5040)",
                transient=True,
            ) from exc
        if status == "ok":
            offsets, complete = answer
            return offsets, complete
        message, transient = answer
        raise ClusterError(message, transient=transient)

    def close(self) -> None:
        self._stop()

    def _start(self) -> subprocess.Popen[bytes]:
        child = subprocess.Popen(self._command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert child.stdin is not None
        _send(child.stdin, self._settings)
        self._child = child
        self.children_started += 1
        return child

    def _stop(self) -> None:
        child, self._child = self._child, None
        if child is None:
            return
        if child.poll() is None:
            child.kill()
        child.wait()
        for pipe in (child.stdin, child.stdout):
            if pipe is not None:
                pipe.close()


def _how_it_ended(child: subprocess.Popen[bytes], exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return f"gave no answer in {ANSWER_SECONDS:.0f} s"
    try:
        code = child.wait(5)
    except subprocess.TimeoutExpired:
        return f"stopped answering ({exc})"
    if code < 0:
        try:
            return f"died of {signal.Signals(-code).name}"
        except ValueError:
            return f"died of signal {-code}"
    return f"exited with {code}"


def _send(pipe: IO[bytes], value: Any) -> None:
    data = pickle.dumps(value)
    pipe.write(_LENGTH.pack(len(data)) + data)
    pipe.flush()


def _receive(pipe: IO[bytes], *, deadline: float | None = None) -> Any:
    if deadline is not None:
        ready, _, _ = select.select([pipe], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            raise TimeoutError
    head = pipe.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        raise EOFError("the pipe closed")
    (size,) = _LENGTH.unpack(head)
    data = pipe.read(size)
    if len(data) < size:
        raise EOFError("the pipe closed in a message")
    return pickle.loads(data)  # our own child, over its own pipe


def _serve() -> None:
    """The child: settings first, then a timeout per request; answers ``("ok", (offsets, complete))`` or
    ``("error", (message, transient))``. A transient failure replaces the client, as an admin session does."""
    from spark_kafka_backup.kafka.cluster import admin_client, committed_group_offsets

    requests, answers = sys.stdin.buffer, sys.stdout.buffer
    settings = _receive(requests)
    admin = None
    while True:
        try:
            timeout = _receive(requests)
        except EOFError:
            return  # the parent closed the pipe: the job ended
        try:
            admin = admin or admin_client(settings)
            _send(answers, ("ok", committed_group_offsets(admin, timeout=timeout)))
        except ClusterError as exc:
            if exc.transient:
                admin = None
            _send(answers, ("error", (str(exc), exc.transient)))


if __name__ == "__main__":
    _serve()
