"""A fault-injecting, request-counting HTTP proxy for the object-store servers of the tests.

It stands between the clients (boto3, google-cloud-storage, azure-storage-blob, in the test process and in the jobs'
Spark processes) and a server (moto, fake-gcs-server, Azurite): the clients' endpoint setting points at the proxy,
which forwards each request to the server and its answer back, except for a share of them (``rate``), where it
does what a busy or flaky store does:

- ``throttle``: answers 503 (S3's ``SlowDown``, Azure's ``ServerBusy``) or 429 (GCS's ``rateLimitExceeded``)
  without forwarding;
- ``drop``: closes the connection without forwarding (the request never reached the store);
- ``lose``: forwards, then closes the connection instead of answering (the store did it, the client never learns:
  its retry meets the result of its own first attempt).

Rules (:meth:`FaultProxy.once`) inject a chosen fault into the next request that matches, for the paths a random
share would rarely reach; a rule may also give a chosen answer without forwarding (``answer``: a status the store
gives in a race the emulator does not enforce, such as a GCS delete's failed generation precondition). It also
counts what reached the server, by kind (``PUT``, ``GET``, ``LIST``, ``DELETE``, ``HEAD``, ``POST``), for the
request-cost benchmark.

Plain HTTP/1.1 with keep-alive; a request's body (length-delimited or chunked) is read whole and forwarded with a
length, an answer likewise. A ``Location`` header that points at the server (GCS's resumable upload sessions) is
rewritten to point at the proxy, so that the upload's next requests come through it too.
"""

from __future__ import annotations

import http.client
import random
import socket
import threading
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FAULTS = ("throttle", "drop", "lose")
#: A rule's fault that answers with the rule's own ``answer`` instead of forwarding.
ANSWER = "answer"

#: Answers a throttled request gets, by the store's dialect.
THROTTLED: dict[str, tuple[int, dict[str, str], bytes]] = {
    "s3": (503, {"Content-Type": "application/xml"},
           b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>SlowDown</Code>"
           b"<Message>Please reduce your request rate.</Message></Error>"),
    "gs": (429, {"Content-Type": "application/json"},
           b'{"error": {"code": 429, "message": "rateLimitExceeded", "errors": [{"reason": "rateLimitExceeded"}]}}'),
    "az": (503, {"Content-Type": "application/xml", "x-ms-error-code": "ServerBusy"},
           b"<?xml version='1.0' encoding='utf-8'?><Error><Code>ServerBusy</Code>"
           b"<Message>The server is busy.</Message></Error>"),
}  # fmt: skip


#: Answers a conditional request gets when its condition fails (another writer changed the object), by dialect.
PRECONDITION_FAILED: dict[str, tuple[int, dict[str, str], bytes]] = {
    "s3": (412, {"Content-Type": "application/xml"},
           b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>PreconditionFailed</Code>"
           b"<Message>At least one of the pre-conditions you specified did not hold</Message></Error>"),
    "gs": (412, {"Content-Type": "application/json"},
           b'{"error": {"code": 412, "message": "conditionNotMet", "errors": [{"reason": "conditionNotMet"}]}}'),
    "az": (412, {"Content-Type": "application/xml", "x-ms-error-code": "ConditionNotMet"},
           b"<?xml version='1.0' encoding='utf-8'?><Error><Code>ConditionNotMet</Code>"
           b"<Message>The condition specified using HTTP conditional header(s) is not met.</Message></Error>"),
}  # fmt: skip


@dataclass(frozen=True)
class Seen:
    """A request as the proxy received it."""

    method: str
    target: str  # the path and query
    body: bytes

    def names(self, name: str) -> bool:
        """Whether the request is about an object named ``...name``: in its URL (S3, Azure, GCS's downloads and
        deletes) or in its body's metadata (GCS's uploads)."""
        return name in urllib.parse.unquote(self.target) or name.encode() in self.body[:4096]


@dataclass
class Rule:
    """Inject ``fault`` into the next ``times`` requests ``matches`` holds for."""

    matches: Callable[[Seen], bool]
    fault: str
    times: int = 1
    answer: tuple[int, dict[str, str], bytes] | None = None


def request_kind(method: str, target: str) -> str:
    """What a request is, for counting: ``LIST`` for a listing in each store's API, else its method."""
    parsed = urllib.parse.urlsplit(target)
    query = urllib.parse.parse_qs(parsed.query)
    if method == "GET":
        if "list-type" in query or ("versions" in query and "versionId" not in query):  # S3 ListObjectsV2, versions
            return "LIST"
        if query.get("comp") == ["list"]:  # Azure List Blobs
            return "LIST"
        if parsed.path.rstrip("/").endswith("/o") and "/storage/v1/b/" in parsed.path:  # GCS objects.list
            return "LIST"
        if parsed.path.count("/") == 1 and "prefix" in query:  # S3 ListObjects (v1) on a path-style bucket
            return "LIST"
    if method == "PUT" or (method == "POST" and "/upload/" in parsed.path):  # GCS uploads are POSTs
        return "PUT"
    return method


class FaultProxy:
    """The proxy, serving on a free loopback port in a daemon thread (see the module docstring)."""

    def __init__(self, upstream: str, dialect: str, *, rate: float = 0.0, faults: tuple[str, ...] = FAULTS,
                 seed: int = 1) -> None:  # fmt: skip
        parsed = urllib.parse.urlsplit(upstream)
        assert parsed.hostname is not None and parsed.port is not None
        self.upstream = (parsed.hostname, parsed.port)
        self.upstream_origin = f"{parsed.scheme}://{parsed.netloc}"
        self.dialect = dialect
        self.rate = rate
        self.faults = faults
        self._random = random.Random(seed)
        self._rules: list[Rule] = []
        self._lock = threading.Lock()
        #: Requests that reached the server, by kind.
        self.served: Counter[str] = Counter()
        #: Faults injected, by kind.
        self.injected: Counter[str] = Counter()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._server.block_on_close = False
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="fault-proxy", daemon=True)

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def once(self, matches: Callable[[Seen], bool], fault: str, times: int = 1,
             answer: tuple[int, dict[str, str], bytes] | None = None) -> Rule:  # fmt: skip
        """Inject ``fault`` (or :data:`ANSWER` with ``answer``) into the next ``times`` matching requests; the rule's
        ``times`` counts down to 0."""
        assert fault in FAULTS or (fault == ANSWER and answer is not None)
        rule = Rule(matches, fault, times, answer)
        with self._lock:
            self._rules.append(rule)
        return rule

    def reset_counts(self) -> None:
        with self._lock:
            self.served.clear()
            self.injected.clear()

    def _choose(self, seen: Seen) -> tuple[str, tuple[int, dict[str, str], bytes] | None] | None:
        with self._lock:
            for rule in self._rules:
                if rule.times > 0 and rule.matches(seen):
                    rule.times -= 1
                    self.injected[rule.fault] += 1
                    return rule.fault, rule.answer
            if self.rate and self._random.random() < self.rate:
                fault = self._random.choice(self.faults)
                self.injected[fault] += 1
                return fault, None
        return None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def _body(self) -> bytes:
                if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                    parts: list[bytes] = []
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            while self.rfile.readline().strip():  # trailers
                                pass
                            return b"".join(parts)
                        parts.append(self.rfile.read(size))
                        self.rfile.readline()
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else b""

            def _cut(self) -> None:
                """Close the connection with no answer (a reset, as a dropped connection looks to a client)."""
                self.close_connection = True
                try:
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

            def _forward(self, body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
                connection = http.client.HTTPConnection(*proxy.upstream, timeout=120)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in ("transfer-encoding",
                                                                                         "connection")}  # fmt: skip
                    if (
                        body
                        or "Content-Length" in self.headers
                        or "chunked" in self.headers.get("Transfer-Encoding", "").lower()
                    ):
                        headers["Content-Length"] = str(len(body))
                    connection.request(self.command, self.path, body=body, headers=headers)
                    answer = connection.getresponse()
                    data = answer.read()
                    return answer.status, answer.reason, answer.getheaders(), data
                finally:
                    connection.close()

            def _serve(self) -> None:
                body = self._body()
                chosen = proxy._choose(Seen(self.command, self.path, body))
                fault, answer = chosen if chosen is not None else (None, None)
                if fault in ("throttle", ANSWER):
                    given_status, given_headers, payload = answer if answer is not None else THROTTLED[proxy.dialect]
                    self.send_response(given_status)
                    for name, value in given_headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(payload) if self.command != "HEAD" else 0))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(payload)
                    return
                if fault == "drop":
                    self._cut()
                    return
                status, reason, headers, data = self._forward(body)
                with proxy._lock:
                    proxy.served[request_kind(self.command, self.path)] += 1
                if fault == "lose":
                    self._cut()
                    return
                self.send_response(status, reason)
                for name, value in headers:
                    lower = name.lower()
                    if lower in ("transfer-encoding", "connection", "content-length", "server", "date"):
                        continue
                    if lower == "location":
                        value = value.replace(proxy.upstream_origin, proxy.endpoint)
                    self.send_header(name, value)
                if self.command == "HEAD":
                    length = next((v for k, v in headers if k.lower() == "content-length"), "0")
                    self.send_header("Content-Length", length)
                    self.end_headers()
                    return
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        for method in ("GET", "PUT", "POST", "DELETE", "HEAD", "PATCH"):
            setattr(Handler, f"do_{method}", Handler._serve)
        return Handler


@contextmanager
def fault_proxy(upstream: str, dialect: str, **options: object) -> Iterator[FaultProxy]:
    proxy = FaultProxy(upstream, dialect, **options).start()  # type: ignore[arg-type]
    try:
        yield proxy
    finally:
        proxy.close()
