"""Cloud storage emulators the tests and benchmarks start like the broker, built into spark-kafka-backup's cache
from a registry this project may reach.

- fake-gcs-server (github.com/fsouza/fake-gcs-server: Google Cloud Storage's JSON API), a Go program: ``go install``
  of a pinned version through the Go module proxy, once per machine (about 2.5 CPU minutes, and its modules);
- Azurite (Microsoft's Azure Storage emulator, npm): ``npm install`` of a pinned version, once per machine.

``python devkit/emulators.py`` builds what is missing; ``./dev test`` runs it beside the rest of its set-up, and a
fixture that finds the binary missing builds it then. Stdlib only, so that ``./dev`` can run it before the
project's environment exists.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

#: fake-gcs-server's release: generation preconditions on every upload path (simple, multipart and resumable).
#: It does not enforce them on deletes (storage/gcs.py looks the generation up first).
FAKE_GCS_SERVER = "v1.56.1"


def cache_root() -> Path:
    """spark-kafka-backup's cache, as :func:`spark_kafka_backup.jars.cache_root` finds it (tests/unit checks both)."""
    configured = os.environ.get("KBACKUP_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "spark-kafka-backup"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def fake_gcs_server() -> Path:
    """The fake-gcs-server binary, built into the cache the first time (one build at a time per machine)."""
    directory = cache_root() / "emulators" / f"fake-gcs-server-{FAKE_GCS_SERVER}"
    binary = directory / "fake-gcs-server"
    if binary.is_file():
        return binary
    go = shutil.which("go")
    if go is None:
        raise RuntimeError("building fake-gcs-server for the tests needs Go (apt-get install golang-go, or go.dev)")
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if binary.is_file():  # another process built it while this one waited
            return binary
        print(f"building fake-gcs-server {FAKE_GCS_SERVER} (Go module proxy) into {directory}", file=sys.stderr)
        partial = directory / ".partial"
        env = {**os.environ, "GOBIN": str(partial), "CGO_ENABLED": "0", "GOFLAGS": "-modcacherw"}
        subprocess.run([go, "install", f"github.com/fsouza/fake-gcs-server@{FAKE_GCS_SERVER}"], env=env, check=True)
        (partial / "fake-gcs-server").replace(binary)
        shutil.rmtree(partial, ignore_errors=True)
    return binary


#: Azurite's release (npm). Its package asks for Node.js 22; its Blob service runs on Debian's Node.js 20 (checked).
AZURITE = "3.37.0"
#: Azurite's well-known development account and key (public: in Microsoft's documentation and every Azurite).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def azurite_command() -> list[str]:
    """``node .../azurite/dist/src/blob/main.js``: Azurite's Blob service, installed into the cache the first time."""
    directory = cache_root() / "emulators" / f"azurite-{AZURITE}"
    main = directory / "node_modules" / "azurite" / "dist" / "src" / "blob" / "main.js"
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        raise RuntimeError("Azurite for the tests needs Node.js and npm (apt-get install nodejs npm)")
    if main.is_file():
        return [node, str(main)]
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not main.is_file():
            print(f"installing Azurite {AZURITE} (npm) into {directory}", file=sys.stderr)
            subprocess.run(
                [npm, "install", "--prefix", str(directory), "--no-audit", "--no-fund", "--omit=dev",
                 "--loglevel=error", f"azurite@{AZURITE}"],
                check=True,
            )  # fmt: skip
    return [node, str(main)]


def main() -> None:
    print(fake_gcs_server())
    print(" ".join(azurite_command()))


if __name__ == "__main__":
    main()
