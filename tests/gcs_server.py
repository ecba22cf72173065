"""The one place tests get a Google Cloud Storage API server from: fake-gcs-server.

fake-gcs-server (github.com/fsouza/fake-gcs-server, a Go program) serves GCS's JSON API over HTTP, with generation
preconditions on uploads. ``./dev`` builds it once from the Go module proxy into spark-kafka-backup's cache
(:mod:`devkit.emulators`); the fixture starts it on a free loopback port with an in-memory backend, in its own
process group, and stops the group afterwards. ``STORAGE_EMULATOR_HOST`` points every client at it, the jobs'
too. Nothing skips: no server means the tests fail.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from devkit.emulators import fake_gcs_server, free_port
from tests.server_process import serving


@dataclass(frozen=True)
class GcsServer:
    endpoint: str
    env: dict[str, str]

    def new_bucket(self) -> str:
        """Create an empty bucket with a fresh name; return the name."""
        name = f"kbackup-{uuid.uuid4().hex[:12]}"
        request = urllib.request.Request(
            f"{self.endpoint}/storage/v1/b?project=kbackup-test",
            data=json.dumps({"name": name}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=30):
            pass
        return name

    def objects(self, root: str) -> dict[str, tuple[str, object]]:
        """Every object under ``root`` (``gs://bucket/prefix``): name -> (generation, updated), so that a rewrite
        with the same bytes still shows."""
        bucket, _, prefix = root.removeprefix("gs://").partition("/")
        found: dict[str, tuple[str, object]] = {}
        token = ""
        while True:
            query = urllib.parse.urlencode({"prefix": prefix, **({"pageToken": token} if token else {})})
            with urllib.request.urlopen(f"{self.endpoint}/storage/v1/b/{bucket}/o?{query}", timeout=30) as answer:
                page = json.load(answer)
            for item in page.get("items", []):
                found[item["name"]] = (item["generation"], item["updated"])
            token = page.get("nextPageToken", "")
            if not token:
                return found


@contextmanager
def gcs_server_under_test(log_dir: Path) -> Iterator[GcsServer]:
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    command = [str(fake_gcs_server()), "-scheme", "http", "-host", "127.0.0.1", "-port", str(port),
               "-backend", "memory", "-external-url", endpoint, "-log-level", "warn"]  # fmt: skip
    with serving(command, log_dir / "fake-gcs-server.log", f"{endpoint}/storage/v1/b", "the GCS test server"):
        yield GcsServer(endpoint, {"STORAGE_EMULATOR_HOST": endpoint, "GOOGLE_CLOUD_PROJECT": "kbackup-test"})
