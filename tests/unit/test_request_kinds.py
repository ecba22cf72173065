"""How the counting proxy (tests/fault_proxy.py) classes the requests of each store's API, for the cost benchmark."""

from __future__ import annotations

import pytest

from tests.fault_proxy import request_kind


@pytest.mark.parametrize(
    ("method", "path", "kind"),
    [
        ("GET", "/bucket?list-type=2&prefix=backups%2F&delimiter=%2F", "LIST"),  # S3 ListObjectsV2
        ("GET", "/bucket?versions&prefix=backups%2F", "LIST"),  # S3 ListObjectVersions
        ("GET", "/bucket/backups/t/segment_partition_000_from_offset_0000000000_records", "GET"),
        ("GET", "/bucket/key?versionId=3", "GET"),
        ("HEAD", "/bucket/key", "HEAD"),
        ("PUT", "/bucket/key", "PUT"),
        ("POST", "/bucket/key?uploads", "POST"),  # S3 multipart upload start
        ("DELETE", "/bucket/key?versionId=3", "DELETE"),
        ("GET", "/storage/v1/b/bucket/o?prefix=backups%2F&delimiter=%2F", "LIST"),  # GCS objects.list
        ("GET", "/storage/v1/b/bucket/o/backups%2Fkey", "GET"),  # GCS objects.get (metadata)
        ("GET", "/download/storage/v1/b/bucket/o/backups%2Fkey?alt=media", "GET"),
        ("POST", "/upload/storage/v1/b/bucket/o?uploadType=multipart&ifGenerationMatch=0", "PUT"),  # GCS upload
        ("GET", "/devstoreaccount1/container?restype=container&comp=list&prefix=backups%2F", "LIST"),  # Azure
        ("PUT", "/devstoreaccount1/container/backups/key", "PUT"),
    ],
)
def test_each_store_requests_kind(method: str, path: str, kind: str) -> None:
    assert request_kind(method, path) == kind
