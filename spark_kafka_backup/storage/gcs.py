"""Google Cloud Storage through the google-cloud-storage library.

Credentials come from Application Default Credentials, read by the library in each process that touches the
store, driver and executors alike: ``GOOGLE_APPLICATION_CREDENTIALS`` (a service account key file or a workload
identity federation configuration), ``gcloud auth application-default login``, or the metadata server of a GCE
VM, GKE pod (Workload Identity) or Dataproc cluster. ``STORAGE_EMULATOR_HOST`` points every client at an emulator
(fake-gcs-server in the tests) without credentials.

Why this library: every write the backup's commit protocol needs is one request with a precondition GCS enforces
on the server, and the library sends it and retries it safely: ``ifGenerationMatch=0`` creates only when no live
object has the name (the lease, ``create_exclusive``), ``ifGenerationMatch=G`` replaces or deletes only the
generation read (renewing and releasing the lease); a conditional request is retried on 429, 5xx and dropped
connections because the precondition makes it idempotent; the plain writes are retried too, each publishing one
whole object that only this writer writes while it holds the target's lease (a retry after a lost answer writes
the same object again). The lease's requests have short timeouts (:data:`LEASE_TIMEOUT`, :data:`LEASE_DEADLINE`)
so that a store that does not answer is noticed within a renewal period. The generation is the tag
:mod:`spark_kafka_backup.storage.lease` keeps.

Objects are never appended to or renamed: a file is published by one upload (resumable for large files, visible
only when finalized). Reads are ranged and pinned to the generation opened, so a replaced object is never read
half old, half new.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spark_kafka_backup.errors import StorageError
from spark_kafka_backup.storage.base import (
    Location,
    ObjectStorage,
    object_location,
    safe_cause,
    without_url_queries,
)
from spark_kafka_backup.storage.object_path import ObjectPath

#: Seconds to connect, and to wait for an answer, per request (the library retries within its own deadline).
TIMEOUT = (10, 120)
#: The lease's requests (:mod:`spark_kafka_backup.storage.lease`): each attempt and all of them together well inside
#: a renewal period, so that a store that does not answer is noticed before the lease could expire.
LEASE_TIMEOUT = (5, 10)
LEASE_DEADLINE = 10.0

#: The settings a client depends on; a change (tests, a re-configured process) makes a new client.
_SETTINGS = ("STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT")


def _library() -> Any:
    try:
        from google.cloud import storage
    except ImportError as exc:
        raise StorageError(
            "gs:// locations need the google-cloud-storage library (pip install google-cloud-storage)"
        ) from exc
    return storage


@functools.cache
def _client_for(settings: tuple[str | None, ...]) -> Any:
    storage = _library()
    from google.auth.exceptions import DefaultCredentialsError

    try:
        if settings[0]:  # an emulator: no credentials, no project
            from google.auth.credentials import AnonymousCredentials

            anonymous = AnonymousCredentials()  # type: ignore[no-untyped-call]
            return storage.Client(project=settings[2] or "emulator", credentials=anonymous)
        return storage.Client(project=settings[2]) if settings[2] else storage.Client()
    except DefaultCredentialsError as exc:
        raise StorageError(
            "gs:// locations need Google Cloud credentials (Application Default Credentials: "
            f"GOOGLE_APPLICATION_CREDENTIALS, gcloud auth application-default login, or a VM's service account): {exc}"
        ) from exc


def _client() -> Any:
    return _client_for(tuple(os.environ.get(name) for name in _SETTINGS))


def _retry(deadline: float | None = None) -> Any:
    from google.cloud.storage.retry import DEFAULT_RETRY

    return DEFAULT_RETRY if deadline is None else DEFAULT_RETRY.with_timeout(deadline)


def _status(exc: Exception) -> int | None:
    code = getattr(exc, "code", None)
    return int(code) if isinstance(code, int) else None


def _fail(location: ObjectPath, action: str, exc: Exception) -> StorageError:
    """One line for a failed request; URLs lose their queries (a resumable upload's session is in one)."""
    if isinstance(exc, StorageError):  # ours already (credentials, the library missing): one line as it is
        return StorageError(str(exc))
    cause = getattr(exc, "cause", None)  # a RetryError: the deadline passed; what the last attempt met
    if cause is not None and "Timeout of" in str(exc):
        return StorageError(
            f"{location}: cannot {action} (no answer within the retry deadline: "
            f"{type(cause).__name__}: {without_url_queries(str(cause))})"
        )
    message = without_url_queries(str(getattr(exc, "message", None) or exc))
    status = _status(exc)
    reason = f"{status} {message}" if status else f"{type(exc).__name__}: {message}"
    return StorageError(f"{location}: cannot {action} ({reason})")


def _ranged_get(blob: Any, location: ObjectPath) -> Callable[[int, int], bytes]:
    """One ranged GET of ``blob`` (a generation of ``location``) per call."""

    def fetch(length: int, position: int) -> bytes:
        try:
            data: bytes = blob.download_as_bytes(
                start=position, end=position + length - 1, raw_download=True, timeout=TIMEOUT, retry=_retry()
            )
        except Exception as exc:
            raise _fail(location, "read", exc) from safe_cause(exc)
        return data

    return fetch


def _generation(blob: Any, location: ObjectPath) -> str:
    """The generation an answer named (the tag of the object's version)."""
    if blob.generation is None:
        raise StorageError(f"{location}: the store's answer named no generation (x-goog-generation)")
    return str(blob.generation)


class GcsStorage(ObjectStorage):
    def shared_client(self) -> Any:
        return _client()

    def _blob(self, target: ObjectPath, generation: int | None = None) -> Any:
        return self.client.bucket(target.bucket).blob(target.key, generation=generation)

    def _stat(self, target: ObjectPath) -> Any | None:
        try:
            return self.client.bucket(target.bucket).get_blob(target.key, timeout=TIMEOUT, retry=_retry())
        except Exception as exc:
            raise _fail(target, "look up", exc) from safe_cause(exc)

    def stat(self, location: ObjectPath) -> tuple[int, str] | None:
        blob = self._stat(location)
        return None if blob is None else (int(blob.size), _generation(blob, location))

    def fetcher(self, location: ObjectPath, tag: str) -> Callable[[int, int], bytes]:
        return _ranged_get(self._blob(location, int(tag)), location)

    def write_whole(self, location: Location, data: bytes, *, sync: bool = True) -> None:
        target = object_location(location)
        try:
            self._blob(target).upload_from_string(data, timeout=TIMEOUT, retry=_retry())
        except Exception as exc:
            raise _fail(target, "write", exc) from safe_cause(exc)

    def create_exclusive_tagged(self, location: Location, data: bytes, *, patient: bool = False) -> str | None:
        return self._conditional_write(object_location(location), data, 0, "create", patient=patient)

    def read_tagged(self, location: Location) -> tuple[bytes, str] | None:
        target = object_location(location)
        blob = self._blob(target)
        try:
            data = blob.download_as_bytes(end=(1 << 16) - 1, timeout=LEASE_TIMEOUT, retry=_retry(LEASE_DEADLINE))
        except Exception as exc:
            if _status(exc) == 404:
                return None
            if _status(exc) != 416:  # an empty object has no first byte to ask for
                raise _fail(target, "read", exc) from safe_cause(exc)
            found = self._stat(target)
            if found is None:
                return None
            data, blob = b"", found
        return data, _generation(blob, target)

    def replace_if(self, location: Location, data: bytes, tag: str) -> str | None:
        return self._conditional_write(object_location(location), data, int(tag), "replace")

    def delete_if(self, location: Location, tag: str) -> None:
        """Delete the object if it still has generation ``tag``. GCS enforces the precondition; the generation is
        also looked up first, for emulators that do not enforce it on deletes (fake-gcs-server 1.56 enforces it on
        uploads only)."""
        target = object_location(location)
        current = self._stat(target)
        if current is None or str(current.generation) != tag:
            return
        try:
            self._blob(target).delete(if_generation_match=int(tag), timeout=LEASE_TIMEOUT, retry=_retry(LEASE_DEADLINE))
        except Exception as exc:
            if _status(exc) not in (404, 412):
                raise _fail(target, "delete", exc) from safe_cause(exc)

    def _conditional_write(
        self, target: ObjectPath, data: bytes, generation: int, action: str, *, patient: bool = False
    ) -> str | None:
        blob = self._blob(target)
        timeout, retry = (TIMEOUT, _retry()) if patient else (LEASE_TIMEOUT, _retry(LEASE_DEADLINE))
        try:
            blob.upload_from_string(data, if_generation_match=generation, timeout=timeout, retry=retry)
        except Exception as exc:
            if _status(exc) == 412:
                return None
            raise _fail(target, action, exc) from safe_cause(exc)
        return _generation(blob, target)

    def upload(self, location: Location, source: Path) -> None:
        target = object_location(location)
        try:
            self._blob(target).upload_from_filename(str(source), timeout=TIMEOUT, retry=_retry())
        except Exception as exc:
            raise _fail(target, "upload", exc) from safe_cause(exc)

    def delete(self, location: Location) -> None:
        target = object_location(location)
        try:
            self._blob(target).delete(timeout=TIMEOUT, retry=_retry())
        except Exception as exc:
            if _status(exc) != 404:
                raise _fail(target, "delete", exc) from safe_cause(exc)

    def list_level(self, directory: ObjectPath, starting_with: str = "") -> tuple[list[str], list[str]]:
        prefix = f"{directory.key}/" if directory.key else ""
        wanted = prefix + starting_with
        files: list[str] = []
        try:
            listing = self.client.list_blobs(
                directory.bucket, prefix=wanted, delimiter="/", timeout=TIMEOUT, retry=_retry()
            )
            for page in listing.pages:
                files.extend(blob.name[len(prefix) :] for blob in page)
            dirs = [name[len(prefix) :].rstrip("/") for name in sorted(listing.prefixes)]
        except Exception as exc:
            if _status(exc) == 404:  # a prefix with nothing under it lists empty: the bucket is missing
                raise StorageError(f"{directory}: bucket {directory.bucket!r} does not exist") from exc
            raise _fail(directory, "list", exc) from safe_cause(exc)
        return files, dirs

    def check_bucket(self, location: ObjectPath) -> None:
        try:
            next(iter(self.client.list_blobs(location.bucket, max_results=1, timeout=TIMEOUT, retry=_retry())), None)
        except Exception as exc:
            if _status(exc) == 404:
                raise StorageError(f"{location}: bucket {location.bucket!r} does not exist") from exc
            raise _fail(location, "reach the bucket", exc) from safe_cause(exc)


@functools.cache
def gcs_storage() -> GcsStorage:
    return GcsStorage()
