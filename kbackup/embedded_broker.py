"""A Kafka-protocol broker started on loopback, for the demo and the tests.

It runs the broker binary of the ``noida-db`` package (installed with the
``test`` extra) in its own process group on a free port with a private data
directory, and stops the whole group on exit, so no broker outlives its
owner. It is not Apache Kafka; the deviations that matter for kbackup are:

- it ignores ``fetch.max.bytes`` / ``max.partition.fetch.bytes``: one fetch
  response can carry a whole partition, so clients need a large
  ``receive.message.max.bytes`` (see :data:`CLIENT_SETTINGS`);
- aborted transactional records take no offsets (Apache Kafka keeps them,
  hidden, plus transaction markers);
- subscribe-based consumer group joins and ``delete_records`` are unreliable.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from importlib.resources import files
from pathlib import Path
from types import TracebackType

#: Client settings every client of the embedded broker needs.
CLIENT_SETTINGS: dict[str, str] = {"receive.message.max.bytes": "1000000000"}


class EmbeddedBrokerError(RuntimeError):
    """The embedded broker could not be started."""


def _binary() -> Path:
    try:
        path = Path(str(files("noida_db").joinpath("noida-db")))
    except ModuleNotFoundError:
        raise EmbeddedBrokerError(
            "the embedded broker needs the noida-db package: pip install 'kbackup[test]'"
        ) from None
    if not path.is_file():
        raise EmbeddedBrokerError(f"noida-db binary not found at {path}")
    if not os.access(path, os.X_OK):
        path.chmod(0o755)
    return path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class EmbeddedBroker:
    """A broker process on ``127.0.0.1:<port>``; use as a context manager.

    ``data_dir`` defaults to a temporary directory removed on :meth:`stop`.
    """

    def __init__(self, *, port: int | None = None, data_dir: Path | None = None, start_timeout: float = 30) -> None:
        self.port = port or free_port()
        self._own_dir = data_dir is None
        self.data_dir = data_dir or Path(tempfile.mkdtemp(prefix="kbackup-broker-"))
        self.start_timeout = start_timeout
        self._process: subprocess.Popen[bytes] | None = None
        self._log_path = self.data_dir / "broker.log"

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    def client_settings(self) -> dict[str, str]:
        """Kafka client settings (``bootstrap.servers`` included) for this broker."""
        return {"bootstrap.servers": self.bootstrap_servers, **CLIENT_SETTINGS}

    def start(self) -> EmbeddedBroker:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self._log_path, "ab")  # noqa: SIM115 (the child keeps writing to it)
        self._process = subprocess.Popen(
            [
                str(_binary()),
                "start",
                "--only",
                "kafka",
                "--kafka-port",
                str(self.port),
                "--data-dir",
                str(self.data_dir),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise EmbeddedBrokerError(f"embedded broker exited at start: {self._log_tail()}")
            if self._ready():
                return self
            time.sleep(0.1)
        self.stop()
        raise EmbeddedBrokerError(
            f"embedded broker did not answer on {self.bootstrap_servers} within {self.start_timeout} s"
        )

    def _ready(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                pass
        except OSError:
            return False
        from confluent_kafka.admin import AdminClient

        try:
            AdminClient(self.client_settings()).list_topics(timeout=2)
        except Exception:
            return False
        return True

    def _log_tail(self) -> str:
        try:
            return self._log_path.read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """Stop the broker's whole process group; remove its data if it was temporary."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(timeout=10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
