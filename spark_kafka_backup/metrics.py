"""A job's metrics, published where monitoring systems collect them.

A job builds a list of :class:`Sample` (a gauge or counter with labels) every
``--metrics-interval`` seconds and hands it to a :class:`MetricsPublisher`,
which

* serves it at ``http://HOST:PORT/metrics`` in Prometheus' text exposition
  format (``--metrics-port [HOST:]PORT``) for a Prometheus scrape, and
* pushes it to a Prometheus Pushgateway (``--metrics-pushgateway URL``), into the group of the job and its labels,
  which keeps the last snapshot after the job's process has exited (a snapshot or a restore run by a scheduler
  ends before a scrape would find its endpoint), and
* replaces a file with it (``--metrics-file PATH``): Prometheus text when the
  name ends in ``.prom`` (node_exporter's textfile collector reads such a
  directory), a JSON object otherwise (``{"job", "updated_at", "metrics":
  [{"name", "labels", "value"}]}``) for scripts and cron jobs.

The file is written to a temporary sibling and renamed: a reader sees the
previous snapshot or the new one, never half of one. The last snapshot stays
after the job ends, so a cron-run snapshot backup leaves its outcome behind.

Prometheus text format, as written here::

    # HELP kbackup_backup_lag_records Records in the cluster ...
    # TYPE kbackup_backup_lag_records gauge
    kbackup_backup_lag_records{topic="orders",partition="0"} 42
"""

from __future__ import annotations

import base64
import http.client
import json
import logging
import math
import re
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from spark_kafka_backup.errors import UsageError
from spark_kafka_backup.fsutil import atomic_write

log = logging.getLogger("spark_kafka_backup.metrics")


@dataclass(frozen=True)
class Sample:
    """One value of one metric: ``kind`` is ``gauge`` or ``counter`` (Prometheus' types)."""

    name: str
    value: float
    help: str
    labels: Mapping[str, str] = field(default_factory=dict)
    kind: str = "gauge"


def render_prometheus(samples: Iterable[Sample]) -> str:
    """Prometheus text exposition (version 0.0.4): each metric's HELP and TYPE once, before its samples."""
    lines: list[str] = []
    seen: set[str] = set()
    for sample in sorted(samples, key=lambda s: s.name):  # stable: a metric's samples stay together
        if sample.name not in seen:
            seen.add(sample.name)
            lines.append(f"# HELP {sample.name} {_escape_help(sample.help)}")
            lines.append(f"# TYPE {sample.name} {sample.kind}")
        labels = ",".join(f'{key}="{_escape_label(value)}"' for key, value in sample.labels.items())
        lines.append(
            f"{sample.name}{{{labels}}} {_number(sample.value)}" if labels else f"{sample.name} {_number(sample.value)}"
        )
    return "\n".join(lines) + "\n"


def render_json(job: str, samples: Iterable[Sample], *, updated_at: float) -> str:
    """The JSON snapshot (module docstring); values that are not finite become null."""
    metrics = [
        {
            "name": sample.name,
            "labels": dict(sample.labels),
            "value": sample.value if math.isfinite(sample.value) else None,
        }
        for sample in samples
    ]
    return json.dumps({"job": job, "updated_at": updated_at, "metrics": metrics}, indent=1) + "\n"


#: Where the metrics listen unless told: loopback only (a scraper elsewhere needs ``--metrics-bind``).
DEFAULT_METRICS_BIND = "127.0.0.1"


def parse_listen_address(text: str, bind: str | None = None) -> tuple[str, int]:
    """``PORT`` (on ``bind``, loopback by default), ``HOST:PORT`` or ``[IPV6]:PORT`` -> (host, port); a
    :class:`UsageError` otherwise, or when both name a host and differ."""
    host, _, port_text = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    try:
        port = int(port_text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise UsageError(f"--metrics-port: expected PORT or HOST:PORT with a port 0..65535, got {text!r}")
    if bind is not None:
        bind = bind.removeprefix("[").removesuffix("]")
        if host and host != bind:
            raise UsageError(f"--metrics-port {text} names host {host!r} and --metrics-bind {bind!r}: give one")
        if not bind:
            raise UsageError("--metrics-bind: expected an address (0.0.0.0 for every IPv4 interface, :: for all)")
    return host or bind or DEFAULT_METRICS_BIND, port


#: A Prometheus label name.
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def pushgateway_url(gateway: str, job: str, labels: Mapping[str, str]) -> str:
    """The URL of a Prometheus Pushgateway's group for ``job`` and ``labels`` (its grouping key):
    ``GATEWAY/metrics/job@base64/JOB/NAME@base64/VALUE...``, every value in base64url, so that a path (a backup's
    target) or any other text is one path segment."""

    def encoded(value: str) -> str:
        return base64.urlsafe_b64encode(value.encode()).decode() or "="

    parts = [f"job@base64/{encoded(job)}"]
    for name, value in sorted(labels.items()):
        if not _LABEL_NAME.fullmatch(name):
            raise UsageError(f"metrics label {name!r}: not a Prometheus label name")
        parts.append(f"{name}@base64/{encoded(value)}")
    return f"{gateway.rstrip('/')}/metrics/" + "/".join(parts)


def check_pushgateway(url: str) -> str:
    """``--metrics-pushgateway URL`` as given: http(s)://HOST[:PORT][/PATH], no credentials in it (they would be in
    the process list and the logs)."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise UsageError(f"--metrics-pushgateway {url!r}: expected http://HOST:PORT of a Prometheus Pushgateway")
    if parsed.username or parsed.password:
        raise UsageError("--metrics-pushgateway: credentials do not belong in the URL (the process list shows it)")
    if parsed.query or parsed.fragment:
        raise UsageError(f"--metrics-pushgateway {url!r}: expected no query or fragment")
    try:
        parsed.port  # noqa: B018 (a port that is no number raises here, not at every push)
    except ValueError as exc:
        raise UsageError(f"--metrics-pushgateway {url!r}: {exc}") from exc
    return url


class MetricsPublisher:
    """Publishes a job's latest samples by HTTP and/or to a file (module docstring).

    Lifecycle: :meth:`start` (binds the port: a port in use is a :class:`UsageError`
    before the job does anything), :meth:`publish` as often as the job likes,
    :meth:`close` at the end (stops serving; the file stays).
    """

    def __init__(
        self,
        job: str,
        *,
        file: Path | None = None,
        listen: tuple[str, int] | None = None,
        push: str | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        """``labels`` are added to every sample: what tells two jobs' series apart (the backup's target); with
        ``push`` (a Pushgateway's URL) they and ``job`` are the group each snapshot replaces there."""
        self.job = job
        self.file = file
        self.listen = listen
        self.push = push
        self.labels = dict(labels or {})
        self._pusher: _Pusher | None = None
        self._text = ""
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def enabled(self) -> bool:
        return self.file is not None or self.listen is not None or self.push is not None

    @property
    def port(self) -> int | None:
        """The port served (the one the system chose when ``listen`` asked for 0)."""
        return self._server.server_address[1] if self._server is not None else None

    def start(self) -> None:
        if self.listen is None or self._server is not None:
            return
        publisher = self

        class Handler(BaseHTTPRequestHandler):
            timeout = 10  # a scraper that stops reading does not hold a thread

            def do_GET(self) -> None:
                if self.path.split("?")[0] not in ("/metrics", "/"):
                    self.send_error(404, "spark-kafka-backup serves /metrics")
                    return
                body = publisher.text().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # scrapes are not the job's log
                return

        host, port = self.listen

        class Server(ThreadingHTTPServer):
            address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

            def handle_error(self, request: Any, client_address: Any) -> None:
                log.debug("metrics request from %s failed", client_address, exc_info=True)  # a scraper hung up

        try:
            self._server = Server((host, port), Handler)
        except OSError as exc:
            raise UsageError(f"--metrics-port: cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="spark-kafka-backup-metrics-http", daemon=True).start()

    def text(self) -> str:
        with self._lock:
            return self._text

    def publish(self, samples: Sequence[Sample], *, now: float | None = None) -> None:
        """Make ``samples`` the current snapshot (served at once; the file replaced; pushed)."""
        if self.labels:
            samples = [replace(sample, labels={**self.labels, **sample.labels}) for sample in samples]
        text = render_prometheus(samples)
        with self._lock:
            self._text = text
        if self.file is not None:
            if self.file.suffix == ".prom":
                data = text
            else:
                data = render_json(self.job, samples, updated_at=time.time() if now is None else now)
            atomic_write(self.file, data.encode(), sync=False)
        if self.push is not None:
            if self._pusher is None:
                self._pusher = _Pusher(self.push, pushgateway_url(self.push, self.job, self.labels))
            self._pusher.offer(text)

    def close(self) -> None:
        """Stop serving; the last snapshot pushed (waiting up to :data:`FINAL_PUSH_SECONDS` for it)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._pusher is not None:
            self._pusher.close(FINAL_PUSH_SECONDS)
            self._pusher = None


#: How long a job's end waits for its last snapshot to reach the Pushgateway.
FINAL_PUSH_SECONDS = 15.0
#: One push's limit (connect, then each read).
PUSH_TIMEOUT_SECONDS = 10.0


class _Pusher:
    """PUTs the latest snapshot into its group on a Pushgateway, from a thread of its own: a gateway that is slow or
    gone never holds up the job (its stop signal, its lease checks); a snapshot not pushed yet when a newer one comes
    is replaced by it. A failing gateway is said once, and once when it answers again."""

    def __init__(self, gateway: str, url: str) -> None:
        self.gateway = gateway
        self.url = url
        self._pending: str | None = None
        self._closing = False
        self._failing = False
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="spark-kafka-backup-metrics-push", daemon=True)
        self._thread.start()

    def offer(self, text: str) -> None:
        with self._changed:
            self._pending = text
            self._changed.notify()

    def close(self, timeout: float) -> None:
        with self._changed:
            self._closing = True
            self._changed.notify()
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning("the last metrics were not pushed to %s within %.0f s", self.gateway, timeout)

    def _run(self) -> None:
        while True:
            with self._changed:
                while self._pending is None and not self._closing:
                    self._changed.wait()
                text, self._pending = self._pending, None
                if text is None:
                    return  # closing, and everything offered was pushed
            self._push(text)

    def _push(self, text: str) -> None:
        request = urllib.request.Request(
            self.url,
            data=text.encode(),
            method="PUT",
            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
        )
        try:
            with urllib.request.urlopen(request, timeout=PUSH_TIMEOUT_SECONDS) as response:
                response.read()
        except (OSError, ValueError, http.client.HTTPException) as exc:
            if not self._failing:
                log.warning("metrics not pushed to %s: %s (the job goes on; each interval tries again)",
                            self.gateway, _push_failure(exc))  # fmt: skip
            self._failing = True
            return
        if self._failing:
            log.info("metrics pushed to %s again", self.gateway)
        self._failing = False


def _push_failure(exc: BaseException) -> str:
    """What a failed push says: the gateway's own answer when it gave one (what was inconsistent)."""
    if isinstance(exc, urllib.error.HTTPError):
        try:
            body = exc.read()[:300].decode(errors="replace").strip()
        except OSError:
            body = ""
        return f"HTTP {exc.code} {exc.reason}" + (f": {body}" if body else "")
    if isinstance(exc, urllib.error.URLError):
        return str(exc.reason)
    return str(exc) or type(exc).__name__


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return str(int(value)) if value == int(value) and abs(value) < 2**63 else repr(value)


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")
