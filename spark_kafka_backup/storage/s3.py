"""S3 (and S3-compatible) storage through boto3.

Endpoint, region and credentials come from the usual AWS settings
(``AWS_ENDPOINT_URL`` / ``AWS_ENDPOINT_URL_S3``, ``AWS_REGION``,
``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``, profiles, instance roles),
read by boto3 in each process that touches the store, driver and executors
alike.

Objects are never appended to or renamed: a file is published by one PUT
(multipart for large uploads), which S3 makes visible whole or not at all,
and ``create_exclusive`` is a conditional PUT (``If-None-Match: *``). Reads
are ranged GETs, so a segment is never downloaded whole to be read.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from spark_kafka_backup.errors import StorageError
from spark_kafka_backup.storage.base import Location, ObjectStorage, object_location
from spark_kafka_backup.storage.object_path import ObjectPath
from spark_kafka_backup.storage.retention import KeptVersion, Purge

#: The settings a client depends on; a change (tests, a re-configured process) makes a new client.
_SETTINGS = (
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ACCESS_KEY_ID",
    "AWS_PROFILE",
    "AWS_MAX_ATTEMPTS",
)


def _client() -> Any:
    return _client_for(tuple(os.environ.get(name) for name in _SETTINGS))


@functools.cache
def _client_for(settings: tuple[str | None, ...]) -> Any:
    try:
        import boto3
        from botocore.config import Config
    except ImportError as exc:  # pragma: no cover - boto3 is a dependency
        raise StorageError("s3:// locations need boto3 (pip install boto3)") from exc
    # boto3 reads endpoint, region and credentials from the environment and its files itself.
    attempts = int(os.environ.get("AWS_MAX_ATTEMPTS") or 10)
    return boto3.client("s3", config=Config(retries={"total_max_attempts": attempts, "mode": "standard"}))


def _reason(exc: Exception) -> str:
    """What a failed request met, for a report line (the text after the location of a :func:`_fail` error)."""
    text = str(exc)
    return text[text.find("(") + 1 : -1] if text.endswith(")") and "(" in text else text


def _fail(location: ObjectPath, action: str, exc: Exception) -> StorageError:
    code = _error_code(exc)
    if code == "NoSuchBucket":
        return StorageError(f"{location}: bucket {location.bucket!r} does not exist")
    reason = f"{code}: {exc}" if code else f"{type(exc).__name__}: {exc}"
    return StorageError(f"{location}: cannot {action} ({reason})")


def _error_code(exc: Exception) -> str:
    """The S3 error code of a client error ("" for anything else)."""
    response = getattr(exc, "response", None)
    return str(response.get("Error", {}).get("Code", "")) if isinstance(response, dict) else ""


def _precondition_failed(exc: Exception) -> bool:
    """A conditional write lost (the object exists, or has another version)."""
    return _error_code(exc) in ("PreconditionFailed", "412", "ConditionalRequestConflict")


def _is_missing(exc: Exception) -> bool:
    return _error_code(exc) in ("404", "NoSuchKey", "NotFound", "NoSuchVersion")


def _ranged_get(client: Any, location: ObjectPath) -> Callable[[int, int], bytes]:
    """One ranged GET of ``location`` per call."""

    def fetch(length: int, position: int) -> bytes:
        try:
            response = client.get_object(
                Bucket=location.bucket, Key=location.key, Range=f"bytes={position}-{position + length - 1}"
            )
            data: bytes = response["Body"].read()
        except Exception as exc:
            raise _fail(location, "read", exc) from exc
        return data

    return fetch


class S3Storage(ObjectStorage):
    def shared_client(self) -> Any:
        return _client()

    def stat(self, location: ObjectPath) -> tuple[int, str] | None:
        try:
            head = self.client.head_object(Bucket=location.bucket, Key=location.key)
        except Exception as exc:
            if _is_missing(exc):
                return None
            raise _fail(location, "look up", exc) from exc
        return int(head["ContentLength"]), str(head["ETag"])

    def fetcher(self, location: ObjectPath, tag: str) -> Callable[[int, int], bytes]:
        return _ranged_get(self.client, location)

    def write_whole(self, location: Location, data: bytes, *, sync: bool = True) -> None:
        target = object_location(location)
        try:
            self.client.put_object(Bucket=target.bucket, Key=target.key, Body=data)
        except Exception as exc:
            raise _fail(target, "write", exc) from exc

    # -- conditional writes (the object-store lease, spark_kafka_backup.storage.lease) ----------------

    def create_exclusive_tagged(self, location: Location, data: bytes, *, patient: bool = False) -> str | None:
        """Create the object unless it exists; its ETag, or ``None`` when it existed (every request is retried by
        the client's standard retry mode, patient or not)."""
        target = object_location(location)
        try:
            response = self.client.put_object(Bucket=target.bucket, Key=target.key, Body=data, IfNoneMatch="*")
        except Exception as exc:
            if _precondition_failed(exc):
                return None
            raise _fail(target, "create", exc) from exc
        return str(response["ETag"])

    def read_tagged(self, location: Location) -> tuple[bytes, str] | None:
        """A small object's bytes and ETag, or ``None`` when it does not exist."""
        target = object_location(location)
        try:
            response = self.client.get_object(Bucket=target.bucket, Key=target.key)
            return response["Body"].read(1 << 16), str(response["ETag"])
        except Exception as exc:
            if _is_missing(exc):
                return None
            raise _fail(target, "read", exc) from exc

    def replace_if(self, location: Location, data: bytes, tag: str) -> str | None:
        """Replace the object if it still has ``tag`` (its ETag); the new ETag, or ``None`` when it changed."""
        target = object_location(location)
        try:
            response = self.client.put_object(Bucket=target.bucket, Key=target.key, Body=data, IfMatch=tag)
        except Exception as exc:
            if _precondition_failed(exc) or _is_missing(exc):
                return None
            raise _fail(target, "replace", exc) from exc
        return str(response["ETag"])

    def delete_if(self, location: Location, tag: str) -> None:
        """Delete the object if it still has ``tag`` (its ETag; otherwise leave it: it is someone else's now)."""
        target = object_location(location)
        try:
            self.client.delete_object(Bucket=target.bucket, Key=target.key, IfMatch=tag)
        except Exception as exc:
            if not (_precondition_failed(exc) or _is_missing(exc)):
                raise _fail(target, "delete", exc) from exc

    def upload(self, location: Location, source: Path) -> None:
        target = object_location(location)
        try:
            self.client.upload_file(str(source), target.bucket, target.key)
        except Exception as exc:
            raise _fail(target, "upload", exc) from exc

    def delete(self, location: Location) -> None:
        target = object_location(location)
        try:
            self.client.delete_object(Bucket=target.bucket, Key=target.key)
        except Exception as exc:
            if not _is_missing(exc):
                raise _fail(target, "delete", exc) from exc

    # -- versioned and locked buckets (spark_kafka_backup.storage.retention) ----------------------------------

    def remove(self, location: Location) -> list[KeptVersion]:
        target = object_location(location)
        try:
            answer = self.client.delete_object(Bucket=target.bucket, Key=target.key)
        except Exception as exc:
            if _is_missing(exc):
                return []
            raise _fail(target, "delete", exc) from exc
        if not answer.get("DeleteMarker"):
            return []  # an unversioned bucket: gone
        try:  # the delete is done: what follows only tells what the bucket keeps, and never fails the caller
            return [self._kept(target, item) for item in self._versions(target.bucket, target.key, exact=True)
                    if "Size" in item]  # fmt: skip
        except StorageError as exc:
            return [KeptVersion(str(target), "", 0, unseen=_reason(exc))]

    def purge_deleted(self, directory: Location, prefix: str, *, bypass_governance: bool = False) -> Purge:
        """Every noncurrent version (and delete marker) of the objects named ``prefix...`` goes for good; a live
        object keeps its current version. Delete markers stay over a deleted object a lock still keeps a version of
        (they keep it out of the backup). Nothing is asked beyond the bucket's versioning state on a bucket that
        was never versioned."""
        folder = object_location(directory)
        key_prefix = f"{folder.key}/{prefix}" if folder.key else prefix
        done = Purge()
        self._abort_uploads(folder, key_prefix, done)
        if not self._ever_versioned(folder):
            return done
        by_key: dict[str, list[dict[str, Any]]] = {}
        for item in self._versions(folder.bucket, key_prefix, exact=False):
            by_key.setdefault(item["Key"], []).append(item)
        for key, items in sorted(by_key.items()):
            location = ObjectPath(folder.scheme, folder.bucket, key)
            history = [item for item in items if not item.get("IsLatest", True) or "Size" not in item]
            kept = False
            for item in history:
                if "Size" not in item:
                    continue  # delete markers last: they hide what a lock keeps
                refused = self._delete_version(folder.bucket, key, item["VersionId"], bypass_governance)
                if refused is None:
                    done.deleted.append((str(location), str(item["VersionId"])))
                    continue
                version = self._kept(location, item)
                if version.lock is None:  # refused, and no lock holds it: the principal may not delete versions
                    raise _fail(location, f"delete version {version.version}", refused) from refused
                done.kept.append(version)
                kept = True
            live = any(item.get("IsLatest", True) and "Size" in item for item in items)
            for item in history:
                if "Size" not in item and (live or not kept or not item.get("IsLatest")):
                    refused = self._delete_version(folder.bucket, key, item["VersionId"], False)
                    if refused is not None:
                        raise _fail(location, f"delete its delete marker {item['VersionId']}", refused) from refused
                    done.deleted.append((str(location), str(item["VersionId"])))
        return done

    def _abort_uploads(self, folder: ObjectPath, key_prefix: str, done: Purge) -> None:
        """Abort the multipart uploads under ``key_prefix`` that never completed (a backup or merge killed while
        uploading a large segment): their parts hold records and are billed, yet no listing of objects shows them."""
        try:
            pages = self.client.get_paginator("list_multipart_uploads").paginate(
                Bucket=folder.bucket, Prefix=key_prefix
            )
            for page in pages:
                for upload in page.get("Uploads", ()):
                    self.client.abort_multipart_upload(Bucket=folder.bucket, Key=upload["Key"],
                                                       UploadId=upload["UploadId"])  # fmt: skip
                    done.deleted.append((str(ObjectPath(folder.scheme, folder.bucket, upload["Key"])),
                                         f"upload {upload['UploadId']}"))  # fmt: skip
        except Exception as exc:
            if _is_missing(exc):
                return  # completed or aborted meanwhile
            raise _fail(ObjectPath(folder.scheme, folder.bucket, key_prefix),
                        "abort the unfinished multipart uploads under it", exc) from exc  # fmt: skip

    def _ever_versioned(self, folder: ObjectPath) -> bool:
        """Whether the bucket has, or had, versioning (and so may keep versions); ``True`` when not allowed to ask."""
        try:
            return "Status" in self.client.get_bucket_versioning(Bucket=folder.bucket)
        except Exception as exc:
            if _error_code(exc) in ("AccessDenied", "NotImplemented"):
                return True  # the listing will tell
            raise _fail(folder, "ask the bucket's versioning state", exc) from exc

    def _versions(self, bucket: str, prefix: str, *, exact: bool) -> list[dict[str, Any]]:
        """Every version and delete marker of the objects named ``prefix...`` (only ``prefix`` itself when
        ``exact``); a delete marker is the one without ``Size``."""
        found: list[dict[str, Any]] = []
        try:
            for page in self.client.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix):
                for item in (*page.get("Versions", ()), *page.get("DeleteMarkers", ())):
                    if not exact or item["Key"] == prefix:
                        found.append(item)
        except Exception as exc:
            raise _fail(ObjectPath("s3", bucket, prefix), "list the object versions under it", exc) from exc
        return found

    def _delete_version(self, bucket: str, key: str, version: str, bypass_governance: bool) -> Exception | None:
        """Delete one version for good (gone already is fine); the refusal when access is denied (a lock, or no
        permission: the caller tells which)."""
        extra = {"BypassGovernanceRetention": True} if bypass_governance else {}
        try:
            self.client.delete_object(Bucket=bucket, Key=key, VersionId=version, **extra)
        except Exception as exc:
            if _error_code(exc) == "AccessDenied":
                return exc
            if not _is_missing(exc):
                raise _fail(ObjectPath("s3", bucket, key), f"delete version {version}", exc) from exc
        return None

    def _kept(self, location: ObjectPath, item: dict[str, Any]) -> KeptVersion:
        """A kept version with its lock, as a HEAD of that version tells."""
        version = str(item["VersionId"])
        try:
            head = self.client.head_object(Bucket=location.bucket, Key=location.key, VersionId=version)
        except Exception as exc:
            raise _fail(location, f"look up version {version}", exc) from exc
        lock = head.get("ObjectLockMode")
        until = head.get("ObjectLockRetainUntilDate")
        if until is not None and until <= datetime.now(UTC):
            lock, until = None, None  # a lock that has run out holds nothing
        if head.get("ObjectLockLegalHoldStatus") == "ON":
            lock = "legal hold" if lock is None else f"{lock} and a legal hold"
        return KeptVersion(str(location), version, int(item.get("Size", 0)), until, lock)

    def list_level(self, directory: ObjectPath, starting_with: str = "") -> tuple[list[str], list[str]]:
        prefix = f"{directory.key}/" if directory.key else ""
        wanted = prefix + starting_with
        files: list[str] = []
        dirs: list[str] = []
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=directory.bucket, Prefix=wanted, Delimiter="/"
            )
            for page in pages:
                files.extend(item["Key"][len(prefix) :] for item in page.get("Contents", ()))
                dirs.extend(item["Prefix"][len(prefix) :].rstrip("/") for item in page.get("CommonPrefixes", ()))
        except Exception as exc:
            raise _fail(directory, "list", exc) from exc
        return files, dirs

    def check_bucket(self, location: ObjectPath) -> None:
        """Fail with one clear error when the bucket is absent or unreachable."""
        try:
            self.client.head_bucket(Bucket=location.bucket)
        except Exception as exc:
            if _is_missing(exc):
                raise StorageError(f"{location}: bucket {location.bucket!r} does not exist") from exc
            raise _fail(location, "reach the bucket", exc) from exc


@functools.cache
def s3_storage() -> S3Storage:
    return S3Storage()
