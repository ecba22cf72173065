"""The one place tests get an Azure Blob Storage API server from: Azurite.

Azurite (the npm package ``azurite``: Microsoft's emulator of Azure Storage) serves the Blob service over HTTP with
its well-known development account, and enforces ``If-None-Match: *`` and ``If-Match`` on writes and deletes.
``./dev`` installs it once from npm into spark-kafka-backup's cache (:mod:`devkit.emulators`); the fixture runs its
Blob service with Node.js on a free loopback port, its data in the test's directory, in its own process group, and
stops the group afterwards. ``AZURE_STORAGE_CONNECTION_STRING`` points every client at it, the jobs' too. Nothing
skips: no server means the tests fail.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devkit.emulators import AZURITE_ACCOUNT, AZURITE_KEY, azurite_command, free_port
from tests.server_process import serving


@dataclass(frozen=True)
class AzureServer:
    endpoint: str
    env: dict[str, str]

    def service(self) -> Any:
        from azure.storage.blob import BlobServiceClient

        return BlobServiceClient.from_connection_string(self.env["AZURE_STORAGE_CONNECTION_STRING"])

    def new_bucket(self) -> str:
        """Create an empty container with a fresh name; return the name."""
        name = f"kbackup-{uuid.uuid4().hex[:12]}"
        self.service().create_container(name)
        return name

    def objects(self, root: str) -> dict[str, tuple[str, object]]:
        """Every blob under ``root`` (``az://container/prefix``): name -> (ETag, last modified)."""
        container, _, prefix = root.removeprefix("az://").partition("/")
        client = self.service().get_container_client(container)
        return {blob.name: (blob.etag, blob.last_modified) for blob in client.list_blobs(name_starts_with=prefix)}


@contextmanager
def azure_server_under_test(log_dir: Path) -> Iterator[AzureServer]:
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}/{AZURITE_ACCOUNT}"
    data = log_dir / "azurite-data"
    data.mkdir()
    command = [*azurite_command(), "--blobHost", "127.0.0.1", "--blobPort", str(port), "--location", str(data),
               "--silent", "--skipApiVersionCheck", "--loose"]  # fmt: skip
    # Any answer (403 to an unsigned request) means it listens.
    with serving(command, log_dir / "azurite.log", f"http://127.0.0.1:{port}/", "the Azure test server (Azurite)",
                 any_answer=True):  # fmt: skip
        connection = (
            f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
            f"BlobEndpoint={endpoint};"
        )
        yield AzureServer(endpoint, {"AZURE_STORAGE_CONNECTION_STRING": connection})
