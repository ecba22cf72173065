"""Cloud storage emulators the tests and benchmarks start like the broker, built into spark-kafka-backup's cache
from a registry this project may reach.

- fake-gcs-server (github.com/fsouza/fake-gcs-server: Google Cloud Storage's JSON API), a Go program: ``go install``
  of a pinned version through the Go module proxy, once per machine (about 2.5 CPU minutes, and its modules).

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


def main() -> None:
    print(fake_gcs_server())


if __name__ == "__main__":
    main()
