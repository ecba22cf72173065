"""Azure Blob Storage through the azure-storage-blob library.

``az://CONTAINER/prefix`` names a container of the storage account the environment names, read by the library in
each process that touches the store, driver and executors alike (the names adlfs and fsspec use):

- ``AZURE_STORAGE_CONNECTION_STRING``: the account and its credentials (an account key or a SAS token) in one
  setting, as the portal shows it (and Azurite in the tests);
- otherwise ``AZURE_STORAGE_ACCOUNT_NAME`` (or ``AZURE_STORAGE_ACCOUNT_URL`` for another cloud or endpoint), with
  ``AZURE_STORAGE_SAS_TOKEN`` when set, else azure-identity's ``DefaultAzureCredential``: a service principal's
  ``AZURE_CLIENT_ID``/``AZURE_TENANT_ID``/``AZURE_CLIENT_SECRET`` or certificate, workload identity on AKS, a
  managed identity on a VM or in Databricks, ``az login``. An account key in an environment variable alone is not
  read: put it in a connection string.

Why this library: the writes the backup's commit protocol needs are single requests with conditions Blob Storage
enforces on the server, and the library sends them: ``upload_blob(overwrite=False)`` is a Put Blob with
``If-None-Match: *`` (create only when no blob has the name: the lease, ``create_exclusive``), and an ETag with
``MatchConditions.IfNotModified`` is ``If-Match`` (replace or delete only the version read: renewing and releasing
the lease). Its retry policy retries 408, 429, 5xx and dropped connections with exponential backoff (here from
about 3 s, not the library's 15 s). The ETag is the tag :mod:`spark_kafka_backup.storage.lease` keeps.

A file is published whole: a small one by one Put Blob, a large one as blocks that become the blob only when the
block list is committed. Reads are ranged and pinned to the ETag opened.
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

#: Seconds to connect and to wait for an answer, per request; retries after a first attempt (exponential backoff
#: from about 3 s: :func:`_retry_policy`).
CONNECT_SECONDS, READ_SECONDS, RETRIES = 10, 120, 6
#: The lease's requests (:mod:`spark_kafka_backup.storage.lease`): one attempt each, well inside a renewal period;
#: the lease tries a failed request again itself, and copes with a lost answer.
LEASE_REQUEST: dict[str, Any] = {"connection_timeout": 5, "read_timeout": 10, "retry_total": 0}

#: The settings a client depends on; a change (tests, a re-configured process) makes a new client.
_SETTINGS = (
    "AZURE_STORAGE_CONNECTION_STRING",
    "AZURE_STORAGE_ACCOUNT_NAME",
    "AZURE_STORAGE_ACCOUNT_URL",
    "AZURE_STORAGE_SAS_TOKEN",
    "AZURE_CLIENT_ID",
    "AZURE_TENANT_ID",
)


def _retry_policy() -> Any:
    """Exponential backoff from about 3 s (3, 5, 9, 17, 33, 65 s, each within 1 s either way) instead of the
    library's 15 s start: a throttled or dropped request costs seconds, as with S3's and GCS's clients."""
    from azure.storage.blob import ExponentialRetry

    # Each kind of failure (connection, read, status) may take every retry: the library caps each at 3 otherwise.
    return ExponentialRetry(initial_backoff=1, increment_base=2, retry_total=RETRIES, random_jitter_range=1,
                            retry_connect=RETRIES, retry_read=RETRIES, retry_status=RETRIES)  # fmt: skip


@functools.cache
def _client_for(settings: tuple[str | None, ...]) -> Any:
    try:
        from azure.storage.blob import BlobServiceClient
    except ImportError as exc:
        raise StorageError("az:// locations need azure-storage-blob (pip install azure-storage-blob)") from exc
    connection, account, url, sas = settings[:4]
    options: dict[str, Any] = {
        "connection_timeout": CONNECT_SECONDS,
        "read_timeout": READ_SECONDS,
        "retry_policy": _retry_policy(),
    }
    if connection:
        return BlobServiceClient.from_connection_string(connection, **options)
    if not (account or url):
        raise StorageError(
            "az:// locations need the storage account: AZURE_STORAGE_ACCOUNT_NAME (or AZURE_STORAGE_ACCOUNT_URL, or "
            "AZURE_STORAGE_CONNECTION_STRING) in the environment of the driver and of every executor"
        )
    credential: Any = sas
    if not sas:
        try:
            from azure.identity import DefaultAzureCredential
        except ImportError as exc:
            raise StorageError(
                "az:// locations without a SAS token need azure-identity (pip install azure-identity)"
            ) from exc
        credential = DefaultAzureCredential()
    return BlobServiceClient(url or f"https://{account}.blob.core.windows.net", credential=credential, **options)


def _client() -> Any:
    return _client_for(tuple(os.environ.get(name) for name in _SETTINGS))


def _status(exc: Exception) -> int | None:
    status = getattr(exc, "status_code", None)
    return int(status) if isinstance(status, int) else None


def _code(exc: Exception) -> str:
    code = getattr(exc, "error_code", "") or ""
    return str(getattr(code, "value", code))  # a StorageErrorCode member, or the service's string


def _container_missing(exc: Exception) -> bool:
    return _status(exc) == 404 and "ContainerNotFound" in _code(exc)


def _fail(location: ObjectPath, action: str, exc: Exception) -> StorageError:
    """One line for a failed request (the service's first line and its error code); URLs lose their queries (a
    SAS token is one)."""
    if isinstance(exc, StorageError):  # ours already (the account or the library missing): one line as it is
        return exc
    if _container_missing(exc):
        return StorageError(f"{location}: container {location.bucket!r} does not exist")
    first = without_url_queries(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
    status, code = _status(exc), _code(exc)
    reason = " ".join(part for part in (str(status) if status else type(exc).__name__, code, first) if part)
    return StorageError(f"{location}: cannot {action} ({reason})")


def _ranged_get(blob: Any, location: ObjectPath, etag: str) -> Callable[[int, int], bytes]:
    """One ranged GET of ``location`` per call, of the version with ``etag``."""
    from azure.core import MatchConditions

    def fetch(length: int, position: int) -> bytes:
        try:
            data: bytes = blob.download_blob(
                offset=position, length=length, etag=etag, match_condition=MatchConditions.IfNotModified
            ).readall()
        except Exception as exc:
            raise _fail(location, "read", exc) from safe_cause(exc)
        return data

    return fetch


class AzureStorage(ObjectStorage):
    def shared_client(self) -> Any:
        return _client()

    def _blob(self, target: ObjectPath) -> Any:
        return self.client.get_blob_client(target.bucket, target.key)

    def stat(self, location: ObjectPath) -> tuple[int, str] | None:
        try:
            properties = self._blob(location).get_blob_properties()
        except Exception as exc:
            if _status(exc) == 404 and not _container_missing(exc):
                return None
            raise _fail(location, "look up", exc) from safe_cause(exc)
        return int(properties.size), str(properties.etag)

    def fetcher(self, location: ObjectPath, tag: str) -> Callable[[int, int], bytes]:
        return _ranged_get(self._blob(location), location, tag)

    def write_whole(self, location: Location, data: bytes, *, sync: bool = True) -> None:
        target = object_location(location)
        try:
            self._blob(target).upload_blob(data, overwrite=True)
        except Exception as exc:
            raise _fail(target, "write", exc) from safe_cause(exc)

    def create_exclusive_tagged(self, location: Location, data: bytes, *, patient: bool = False) -> str | None:
        target = object_location(location)
        try:
            answer = self._blob(target).upload_blob(data, overwrite=False, **({} if patient else LEASE_REQUEST))
        except Exception as exc:
            if _code(exc) in ("BlobAlreadyExists", "ConditionNotMet"):  # If-None-Match: * found a blob
                return None
            raise _fail(target, "create", exc) from safe_cause(exc)
        return str(answer["etag"])

    def read_tagged(self, location: Location) -> tuple[bytes, str] | None:
        target = object_location(location)
        try:
            download = self._blob(target).download_blob(**LEASE_REQUEST)
            data = download.read(1 << 16)
        except Exception as exc:
            if _status(exc) == 404 and not _container_missing(exc):
                return None
            raise _fail(target, "read", exc) from safe_cause(exc)
        return data, str(download.properties.etag)

    def replace_if(self, location: Location, data: bytes, tag: str) -> str | None:
        from azure.core import MatchConditions

        target = object_location(location)
        try:
            answer = self._blob(target).upload_blob(
                data, overwrite=True, etag=tag, match_condition=MatchConditions.IfNotModified, **LEASE_REQUEST
            )
        except Exception as exc:
            if _status(exc) == 412 or (_status(exc) == 404 and not _container_missing(exc)):
                return None
            raise _fail(target, "replace", exc) from safe_cause(exc)
        return str(answer["etag"])

    def delete_if(self, location: Location, tag: str) -> None:
        from azure.core import MatchConditions

        target = object_location(location)
        try:
            self._blob(target).delete_blob(etag=tag, match_condition=MatchConditions.IfNotModified, **LEASE_REQUEST)
        except Exception as exc:
            if _status(exc) not in (404, 412) or _container_missing(exc):
                raise _fail(target, "delete", exc) from safe_cause(exc)

    def upload(self, location: Location, source: Path) -> None:
        """One Put Blob up to the library's single-put size (64 MiB), else blocks committed by one Put Block List:
        either way the blob appears whole."""
        target = object_location(location)
        try:
            with open(source, "rb") as stream:
                self._blob(target).upload_blob(stream, length=source.stat().st_size, overwrite=True, max_concurrency=1)
        except Exception as exc:
            raise _fail(target, "upload", exc) from safe_cause(exc)

    def delete(self, location: Location) -> None:
        target = object_location(location)
        try:
            self._blob(target).delete_blob(delete_snapshots="include")
        except Exception as exc:
            if _status(exc) != 404 or _container_missing(exc):
                raise _fail(target, "delete", exc) from safe_cause(exc)

    def list_level(self, directory: ObjectPath, starting_with: str = "") -> tuple[list[str], list[str]]:
        prefix = f"{directory.key}/" if directory.key else ""
        wanted = prefix + starting_with
        files: list[str] = []
        dirs: list[str] = []
        try:
            container = self.client.get_container_client(directory.bucket)
            for item in container.walk_blobs(name_starts_with=wanted or None, delimiter="/", include=["metadata"]):
                name = item.name[len(prefix) :]
                if (getattr(item, "metadata", None) or {}).get("hdi_isfolder") == "true":
                    continue  # an account with a hierarchical namespace lists its directories as blobs too
                if name.endswith("/"):
                    dirs.append(name.rstrip("/"))
                else:
                    files.append(name)
        except Exception as exc:
            raise _fail(directory, "list", exc) from safe_cause(exc)
        return files, dirs

    def check_bucket(self, location: ObjectPath) -> None:
        try:
            container = self.client.get_container_client(location.bucket)
            next(iter(container.list_blobs(results_per_page=1)), None)
        except StorageError:
            raise
        except Exception as exc:
            raise _fail(location, "reach the container", exc) from safe_cause(exc)


@functools.cache
def azure_storage() -> AzureStorage:
    return AzureStorage()
