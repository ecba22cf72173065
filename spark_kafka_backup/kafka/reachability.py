"""Why the bootstrap servers cannot be reached, told apart in seconds: a name that does not resolve, a port where
nothing listens, an address that does not answer.

librdkafka retries an unreachable bootstrap server until its request times out and then says "broker transport
failure" whatever the cause (about 26 s on a job's first request). The jobs ask this first: when no server of
``bootstrap.servers`` accepts a TCP connection, they stop with one line naming each server and its cause; when one
does, librdkafka takes over (TLS, SASL and Kafka's own answers are its to judge).
"""

from __future__ import annotations

import socket
import time

from spark_kafka_backup.errors import ClusterError

#: How long one server is given to accept a connection.
CONNECT_SECONDS = 3.0


def unreachable(servers: str, *, timeout: float = CONNECT_SECONDS) -> list[str] | None:
    """For each of ``servers`` (``host:port,...``) the reason it cannot be reached; ``None`` when one can (or a
    server is not of the form host:port: librdkafka says what is wrong with it)."""
    reasons = []
    for server in (part.strip() for part in servers.split(",") if part.strip()):
        host, _, port_text = server.rpartition(":")
        host = host.strip("[]")
        if not host or not port_text.isdigit():
            return None
        reason = _reason(host, int(port_text), timeout)
        if reason is None:
            return None
        reasons.append(f"{server}: {reason}")
    return reasons or None


def _reason(host: str, port: int, timeout: float) -> str | None:
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return f"the name {host} does not resolve ({exc.strerror})"
    deadline = time.monotonic() + timeout
    causes = []
    for family, kind, protocol, _, address in addresses:
        try:
            with socket.socket(family, kind, protocol) as connection:
                connection.settimeout(max(0.1, deadline - time.monotonic()))
                connection.connect(address)
                return None
        except ConnectionRefusedError:
            causes.append(f"nothing listens at {address[0]} port {port} (connection refused)")
        except TimeoutError:
            causes.append(f"{address[0]} did not answer within {timeout:.0f} s (a firewall, or a host that is down)")
        except OSError as exc:
            causes.append(f"{address[0]}: {exc.strerror or exc}")
    return "; ".join(dict.fromkeys(causes)) or f"the name {host} has no address"


def refuse_unreachable(servers: str) -> None:
    """Stop, in one line, when no bootstrap server can be reached (module docstring)."""
    reasons = unreachable(servers)
    if reasons:
        raise ClusterError(f"cannot reach Kafka at {servers}: {'; '.join(reasons)}")
