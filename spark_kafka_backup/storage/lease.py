"""One job at a time on a backup target: the target lease.

The backup job holds its target's lease from before Spark starts until it
exits; ``spark-kafka-backup prune`` on an object store holds it while it runs. A second
holder is refused at once with one line naming the first (purpose, host, pid,
start time) and how a dead holder's lease is taken over.

Local disks and shared file systems
    an exclusive ``flock`` on ``STATE/lease`` kept by the process. The kernel
    releases it when the process ends, however it ends (``kill -9`` included);
    on NFS the server releases a dead client's locks after its lease time
    (about 90 s). The file's bytes (JSON: who holds it) are written after the
    lock is taken and only describe the holder; they are never the lock. A
    holder removes the file when it releases the lease (a taker that locked
    the removed file sees that and locks the new one), and the directories
    it created if they are empty: a job refused before writing leaves nothing.

Object stores
    the object ``STATE/lease.json``: the holder and an expiry time. It is
    created with ``If-None-Match: *``, renewed every :data:`RENEW_SECONDS` with
    ``If-Match`` on the holder's last version, and taken over once expired
    (``If-Match`` on the expired version, so of two takers one wins). A
    holder whose renewal fails because someone else took the lease over marks
    it :attr:`TargetLease.lost`; the backup job stops at its next check. A
    holder killed with ``kill -9`` leaves its lease until it expires, except
    to a job started where the dead one ran: the lease records the kernel's
    boot id and the holder's pid namespace (:func:`process_space`) with the
    pids of the holder and of its parent (the ``spark-submit`` JVM, which
    runs a local job's executors), and a job in the same space that finds
    both gone takes the lease over once the last renewal is
    :data:`TAKEOVER_GRACE_SECONDS` old (so at least 10 s after the holder
    died: time for a cluster's executors to notice their driver is gone and
    stop writing), waiting for that if need be. A pid in use again by another
    process only makes it wait for the expiry.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from spark_kafka_backup.errors import (
    FormatError,
    LeaseHeldError,
    LeaseLostError,
    SparkKafkaBackupError,
    StorageError,
)
from spark_kafka_backup.format.json_document import parse_document
from spark_kafka_backup.storage.base import Location, ObjectStorage
from spark_kafka_backup.storage.local import check_inside
from spark_kafka_backup.storage.object_path import ObjectPath

log = logging.getLogger(__name__)

#: Pauses between attempts of one lease request the store failed (throttled, a connection dropped) and its client
#: library did not retry (the Azure lease requests are made once each: the library's backoff is too slow for them).
LEASE_RETRY_PAUSES = (0.5, 1.0, 2.0, 4.0)

_T = TypeVar("_T")


def _attempts(request: Callable[[], _T]) -> _T:
    """``request()``, tried again after each of :data:`LEASE_RETRY_PAUSES` while the store fails it."""
    for pause in LEASE_RETRY_PAUSES:
        try:
            return request()
        except StorageError as exc:
            log.debug("a lease request failed, trying again in %.1f s: %s", pause, exc)
            time.sleep(pause)
    return request()


#: Where the lease lives, under the backup's state directory.
LEASE_FILE = "lease"
LEASE_OBJECT = "lease.json"

#: An object-store lease not renewed for this long may be taken over.
TTL_SECONDS = 60.0
RENEW_SECONDS = 15.0
#: A lease whose holder died here is taken over once its last renewal is this old: the holder missed a renewal, so
#: it died at least ``TAKEOVER_GRACE_SECONDS - RENEW_SECONDS`` ago.
TAKEOVER_GRACE_SECONDS = RENEW_SECONDS + 10.0


@dataclass(frozen=True)
class Holder:
    purpose: str
    host: str
    pid: int
    started: str  # ISO 8601, UTC
    expires: float | None = None  # epoch seconds (object stores only)
    #: Tells this holder from any other, in the same process too.
    token: str = ""
    #: Where ``pid`` means this holder's process: :func:`process_space` (``""``: unknown, an older writer).
    space: str = ""
    #: The holder's parent process (``spark-submit``'s JVM under it; 0: unknown).
    parent: int = 0

    @classmethod
    def me(cls, purpose: str) -> Holder:
        started = datetime.now(tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return cls(purpose, socket.gethostname(), os.getpid(), started, token=uuid.uuid4().hex, space=process_space(),
                   parent=os.getppid())  # fmt: skip

    def is_dead_here(self) -> bool:
        """This holder ran in this process space (same kernel boot, same pid namespace), and its process and its
        parent are gone: the driver and, under ``spark-submit``, the JVM that runs a local job's executors."""
        if not self.space or self.space != process_space() or self.parent <= 1:
            return False
        return _gone(self.pid) and _gone(self.parent)

    def renewed(self) -> float | None:
        """When this holder last wrote the lease (epoch seconds), from its expiry."""
        return None if self.expires is None else self.expires - TTL_SECONDS

    def describe(self) -> str:
        return f"{self.purpose} started {self.started} on host {self.host} (pid {self.pid})"

    def encode(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes) -> Holder | None:
        try:
            fields = parse_document(data, file="<lease>", what="lease", floats=True)
            return cls(
                str(fields["purpose"]),
                str(fields["host"]),
                int(fields["pid"]),
                str(fields["started"]),
                None if fields.get("expires") is None else float(fields["expires"]),
                str(fields.get("token", "")),
                str(fields.get("space", "")),
                int(fields.get("parent", 0)),
            )
        except (FormatError, ValueError, TypeError, KeyError, AttributeError):
            return None


def current_holder(state_dir: Location, *, name: str | None = None) -> Holder | None:
    """Who holds the lease in ``state_dir`` now, as far as can be told without taking it (``None``: nobody).

    Read-only: taking the lock to look would refuse a job starting at that
    moment. A local lease file outlives a holder killed with ``kill -9``;
    such a holder on this host is recognised by its pid being gone; one on
    another host is taken as alive. An object-store lease is held until it
    expires.
    """
    if isinstance(state_dir, ObjectPath):
        found = _object_storage(state_dir).read_tagged(state_dir / (name or LEASE_OBJECT))
        holder = Holder.decode(found[0]) if found is not None else None
        if holder is None or holder.expires is None or holder.expires <= time.time():
            return None
        if holder.is_dead_here() and time.time() - (holder.renewed() or 0.0) >= TAKEOVER_GRACE_SECONDS:
            return None  # its next taker takes it at once
        return holder
    path = state_dir / (name or LEASE_FILE)
    check_inside(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    try:
        data = os.pread(fd, 4096, 0)
    finally:
        os.close(fd)
    holder = Holder.decode(data)
    if holder is None:
        return None
    if holder.host == socket.gethostname() and _gone(holder.pid):
        return None
    return holder


def _gone(pid: int) -> bool:
    """No process has ``pid``, or a dead one not reaped yet (a zombie)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # alive, another user's
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def process_space() -> str:
    """Where a pid names one process: this kernel's boot id and this process's pid namespace (``""`` where the
    system does not say). Two containers share a host's boot id but not a pid namespace."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""
    return f"{boot}/{namespace}"


def _object_storage(location: Location) -> ObjectStorage:
    from spark_kafka_backup.storage import object_storage_for

    assert isinstance(location, ObjectPath)
    return object_storage_for(location)


def _stat(path: Path) -> os.stat_result | None:
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None


class TargetLease:
    """The lease of one backup target (see the module docstring); a context manager.

    ``state_dir`` is the target's state directory (local path or object
    location); ``purpose`` names the job in the message another one gets.
    """

    def __init__(
        self, state_dir: Location, purpose: str, *, name: str | None = None, guards: str | None = None
    ) -> None:
        self.state_dir = state_dir
        self.purpose = purpose
        self.name = name
        #: What the lease guards, as the refusal names it.
        self.guards = guards or f"the backup target {state_dir.parent}"
        self.holder = Holder.me(purpose)
        self._fd: int | None = None
        self._created: list[Path] = []
        self._etag: str | None = None
        self._renewer: threading.Thread | None = None
        self._stop = threading.Event()
        self._expires = 0.0  # object stores: when the lease as last written runs out
        #: Set (object stores) when another job took the lease over: the holder must stop.
        self.lost: str | None = None

    @property
    def path(self) -> Location:
        if self.name is not None:
            return self.state_dir / self.name
        return self.state_dir / (LEASE_OBJECT if isinstance(self.state_dir, ObjectPath) else LEASE_FILE)

    def __enter__(self) -> TargetLease:
        self.acquire()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.release()

    def acquire(self) -> None:
        """Take the lease, or raise :class:`LeaseHeldError` naming its holder."""
        if isinstance(self.state_dir, ObjectPath):
            self._acquire_object()
        else:
            self._acquire_file(self.state_dir)

    def check(self) -> None:
        """Raise :class:`LeaseLostError` if another job took the lease over, or may soon: an object-store lease
        not renewed for so long that it expires within a renewal period (a renewal that hangs counts too)."""
        if self.lost is None and self._etag is not None and time.time() >= self._expires - RENEW_SECONDS:
            self.lost = (
                f"the lease {self.path} of the backup target has not been renewed since "
                f"{datetime.fromtimestamp(self._expires - TTL_SECONDS, tz=UTC):%Y-%m-%dT%H:%M:%SZ} and expires soon; "
                "this job stopped"
            )
        if self.lost is not None:
            raise LeaseLostError(self.lost)

    def release(self) -> None:
        if self._fd is not None:
            # Removed while still locked (a job that opened it meanwhile sees the path gone and locks anew), and
            # with it the directories the lease made when the job wrote nothing else.
            path = self.path
            assert isinstance(path, Path)
            held, current = os.fstat(self._fd), _stat(path)
            if current is not None and (held.st_ino, held.st_dev) == (current.st_ino, current.st_dev):
                path.unlink(missing_ok=True)  # ours still: a file someone put there since is left alone
            for directory in self._created:
                with contextlib.suppress(OSError):
                    directory.rmdir()
            os.close(self._fd)  # releases the flock
            self._fd = None
            self._created = []
        if self._renewer is not None:
            self._stop.set()
            self._renewer.join(5)
            self._renewer = None
            if self.lost is None and self._etag is not None:
                storage, etag = _object_storage(self.path), self._etag
                try:
                    _attempts(functools.partial(storage.delete_if, self.path, etag))
                except StorageError as exc:  # the job's work is done: the lease expires by itself
                    log.warning("the lease %s could not be deleted (%s); it expires by itself at %s", self.path, exc,
                                f"{datetime.fromtimestamp(self._expires, tz=UTC):%Y-%m-%dT%H:%M:%SZ}")  # fmt: skip
            self._etag = None

    # -- local and shared file systems --------------------------------------------------

    def _acquire_file(self, state_dir: Path) -> None:
        missing = state_dir
        while not missing.exists() and missing.parent != missing:
            self._created.append(missing)  # deepest first: removed again if the job ends having written nothing
            missing = missing.parent
        path = state_dir / self.path.name
        while True:
            state_dir.mkdir(parents=True, exist_ok=True)  # again after a releasing holder removed it
            try:
                fd = self._lock_file(path)
            except FileNotFoundError:
                continue
            held, current = os.fstat(fd), _stat(path)
            if current is not None and (held.st_ino, held.st_dev) == (current.st_ino, current.st_dev):
                break
            os.close(fd)  # the file was removed by a holder releasing it: lock the current one
        data = self.holder.encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
        self._fd = fd

    def _lock_file(self, path: Path) -> int:
        check_inside(path)  # a planted link is refused, never written through
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            holder = Holder.decode(os.pread(fd, 4096, 0))
            os.close(fd)
            who = holder.describe() if holder is not None else "another process"
            raise LeaseHeldError(
                f"{self.guards} is in use: {who} holds its lease {path}; "
                "wait for it to end or stop it (a dead holder's lock is released with its process, "
                "on NFS after the server's lock lease, about 90 s)"
            ) from exc
        except OSError as exc:
            os.close(fd)
            raise SparkKafkaBackupError(f"{path}: cannot lock the backup target's lease: {exc.strerror}") from exc
        return fd

    # -- object stores ------------------------------------------------------------------

    def _acquire_object(self) -> None:
        path = self.path
        storage = _object_storage(path)
        while True:
            mine = Holder(**{**asdict(self.holder), "expires": time.time() + TTL_SECONDS})
            etag = _attempts(functools.partial(storage.create_exclusive_tagged, path, mine.encode()))
            self._expires = mine.expires or 0.0
            if etag is not None:
                break
            found = _attempts(functools.partial(storage.read_tagged, path))
            if found is None:
                continue  # deleted in between: try again
            data, current = found
            holder = Holder.decode(data)
            if holder is not None and self._is_mine(holder):
                # Our own create went through but its answer was lost (the store's retry met our object).
                etag = current
                break
            expires = holder.expires if holder is not None else None
            if holder is not None and expires is not None and expires > time.time() and holder.is_dead_here():
                wait = (holder.renewed() or 0.0) + TAKEOVER_GRACE_SECONDS - time.time()
                if wait > 0:
                    log.info("the lease %s is held by %s, which is gone; taking it over in %.0f s, once its tasks "
                             "cannot write any more", path, holder.describe(), wait)  # fmt: skip
                    time.sleep(wait)
                    continue  # read it again: a holder that came back, or another taker, wins
            elif holder is not None and expires is not None and expires > time.time():
                until = datetime.fromtimestamp(expires, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                raise LeaseHeldError(
                    f"{self.guards} is in use: {holder.describe()} holds its lease "
                    f"{path} until {until} (renewed while it runs); wait for it to end or stop it, or, if that "
                    f"process is dead, wait until {until} or delete {path}"
                )
            # Expired or unreadable: take it over.
            etag = _attempts(functools.partial(storage.replace_if, path, mine.encode(), current))
            if etag is not None:
                break
        self._etag = etag
        self._renewer = threading.Thread(target=self._renew, name="spark-kafka-backup-lease", daemon=True)
        self._renewer.start()

    def _renew(self) -> None:
        storage = _object_storage(self.path)
        while not self._stop.wait(RENEW_SECONDS):
            assert self._etag is not None
            mine = Holder(**{**asdict(self.holder), "expires": time.time() + TTL_SECONDS})
            try:
                etag = storage.replace_if(self.path, mine.encode(), self._etag)
            except SparkKafkaBackupError as exc:
                # Unreachable for now: try again while the lease lasts, give it up before another job may take it.
                if time.time() >= self._expires - RENEW_SECONDS:
                    self.lost = (
                        f"the lease {self.path} of the backup target could not be renewed ({exc}); this job stopped"
                    )
                    return
                continue
            if etag is None:
                found = storage.read_tagged(self.path)
                holder = Holder.decode(found[0]) if found is not None else None
                if found is not None and holder is not None and self._is_mine(holder):
                    # Our own renewal went through but its answer was lost (the retry met our new version).
                    self._etag, self._expires = found[1], holder.expires or self._expires
                    continue
                self.lost = (
                    f"the lease {self.path} of the backup target was taken over by another job "
                    "(it was not renewed in time); this job stopped"
                )
                return
            self._etag, self._expires = etag, mine.expires or self._expires

    def _is_mine(self, holder: Holder) -> bool:
        return holder.token == self.holder.token
