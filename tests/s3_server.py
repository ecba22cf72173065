"""The one place tests get an S3 API server from.

``KBACKUP_TEST_S3_ENDPOINT=http://host:port`` (with the usual ``AWS_*``
credentials in the environment) uses an existing S3-compatible server, for
example MinIO. Otherwise the fixture starts moto in server mode, a real HTTP
S3 API, on a free loopback port in its own process group, and stops the
group afterwards. Nothing skips: no server means the tests fail.
"""

from __future__ import annotations

import os
import re
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devkit.emulators import free_port
from tests.server_process import serving


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    env: dict[str, str]
    #: moto's request log (one line per request); ``None`` for a server the tests did not start.
    log: Path | None = None

    def requests(self) -> list[str] | None:
        """The requests the server has answered so far (method and path, one line each), when its log tells
        (``None``: it does not)."""
        if self.log is None:
            return None
        found = (re.search(r"(GET|PUT|HEAD|POST|DELETE) (\S+) HTTP/1\.1", line)
                 for line in self.log.read_text(errors="replace").splitlines())  # fmt: skip
        return [f"{match[1]} {match[2]}" for match in found if match]

    def new_bucket(self, *, versioned: bool = False, lock: str | None = None) -> str:
        """Create an empty bucket with a fresh name; return the name. ``versioned``: with versioning on; ``lock``
        (``"GOVERNANCE"`` or ``"COMPLIANCE"``): with Object Lock, every new version retained one day in that mode."""
        client: Any = self.client()
        name = f"kbackup-{uuid.uuid4().hex[:12]}"
        client.create_bucket(Bucket=name, ObjectLockEnabledForBucket=lock is not None)
        if versioned and lock is None:
            client.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
        if lock is not None:
            rule = {"DefaultRetention": {"Mode": lock, "Days": 1}}
            client.put_object_lock_configuration(
                Bucket=name, ObjectLockConfiguration={"ObjectLockEnabled": "Enabled", "Rule": rule}
            )
        return name

    def versions(self, bucket: str, prefix: str = "") -> list[dict[str, Any]]:
        """Every version of every object under ``prefix`` (not the delete markers)."""
        client: Any = self.client()
        found: list[dict[str, Any]] = []
        for page in client.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix):
            found.extend(page.get("Versions", ()))
        return found

    def download_versions(self, bucket: str, into: Path) -> Path:
        """Every version of every object of ``bucket`` as a file ``into/<version id>/<key>``."""
        client: Any = self.client()
        for item in self.versions(bucket):
            body = client.get_object(Bucket=bucket, Key=item["Key"], VersionId=item["VersionId"])["Body"].read()
            path = into / item["VersionId"] / item["Key"]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(body)
        return into

    def client(self) -> object:
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, **_credentials(self.env))

    def objects(self, root: str) -> dict[str, tuple[str, object]]:
        """Every object under ``root`` (``s3://bucket/prefix``): key -> (ETag, last modified), so that a rewrite
        with the same bytes still shows."""
        bucket, _, prefix = root.removeprefix("s3://").partition("/")
        client: Any = self.client()
        found = {}
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for item in page.get("Contents", []):
                found[item["Key"]] = (item["ETag"], item["LastModified"])
        return found


def _credentials(env: dict[str, str]) -> dict[str, str]:
    return {
        "region_name": env["AWS_REGION"],
        "aws_access_key_id": env["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": env["AWS_SECRET_ACCESS_KEY"],
    }


@contextmanager
def s3_server_under_test(log_dir: Path) -> Iterator[S3Server]:
    external = os.environ.get("KBACKUP_TEST_S3_ENDPOINT")
    if external:
        env = {
            "AWS_ENDPOINT_URL": external,
            "AWS_REGION": os.environ.get("AWS_REGION", "us-east-1"),
            "AWS_ACCESS_KEY_ID": os.environ["AWS_ACCESS_KEY_ID"],
            "AWS_SECRET_ACCESS_KEY": os.environ["AWS_SECRET_ACCESS_KEY"],
        }
        yield S3Server(external, env)
        return
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    with serving(command, log_dir / "moto-server.log", f"{endpoint}/moto-api/", "the S3 test server (moto)"):
        env = {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "kbackup-test",
            "AWS_SECRET_ACCESS_KEY": "kbackup-test-secret",
        }
        yield S3Server(endpoint, env, log_dir / "moto-server.log")
