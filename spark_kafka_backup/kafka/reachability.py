"""Why the bootstrap servers cannot be reached, told apart in seconds: a name that does not resolve, a port where
nothing listens, a network that has no route to it.

librdkafka retries an unreachable bootstrap server until its request times out and then says "broker transport
failure" whatever the cause (about 26 s on a job's first request). The jobs ask this first: when every server of
``bootstrap.servers`` is refused for a definite cause, they stop with one line naming each server and its cause;
otherwise (one accepts a connection, or one does not answer in time, or a name server does not answer yet)
librdkafka takes over, with its own patience (TLS, SASL and Kafka's own answers are its to judge).
"""

from __future__ import annotations

import errno
import re
import socket

from spark_kafka_backup.errors import ClusterError

#: How long one server is given to accept a connection.
CONNECT_SECONDS = 3.0


def unreachable(servers: str, *, timeout: float = CONNECT_SECONDS) -> list[str] | None:
    """For each of ``servers`` (``[PROTOCOL://]host:port,...``) the definite reason it cannot be reached; ``None``
    when one can, or when a reason is not definite (no answer in time, a name server not answering, a form librdkafka
    reads its own way): librdkafka then tries, with its own patience."""
    reasons = []
    for server in (part.strip() for part in servers.split(",") if part.strip()):
        address = re.sub(r"^[A-Za-z_]+://", "", server)
        host, _, port_text = address.rpartition(":")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        elif ":" in host or not host or not port_text.isdigit():
            return None  # an IPv6 address without a port, or no port: librdkafka's defaults apply
        reason = _reason(host, int(port_text), timeout)
        if reason is None:
            return None
        reasons.append(f"{server}: {reason}")
    return reasons or None


#: getaddrinfo's answers that say the name does not exist (not "try again later").
_NO_SUCH_NAME = {getattr(socket, name) for name in ("EAI_NONAME", "EAI_NODATA") if hasattr(socket, name)}


def _reason(host: str, port: int, timeout: float) -> str | None:
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        if exc.errno in _NO_SUCH_NAME:
            return f"the name {host} does not resolve ({exc.strerror})"
        return None  # a name server that does not answer (yet): not definite
    causes = []
    for family, kind, protocol, _, address in addresses:
        try:
            with socket.socket(family, kind, protocol) as connection:
                connection.settimeout(timeout)  # each address its own time
                connection.connect(address)
                return None
        except ConnectionRefusedError:
            causes.append(f"nothing listens at {address[0]} port {port} (connection refused)")
        except OSError as exc:
            if exc.errno not in (errno.ENETUNREACH, errno.EHOSTUNREACH):
                return None  # no answer in time, or another cause librdkafka may see through: not definite
            causes.append(f"no route to {address[0]} ({exc.strerror})")
    return "; ".join(dict.fromkeys(causes)) or None


def refuse_unreachable(servers: str) -> None:
    """Stop, in one line, when no bootstrap server can be reached (module docstring)."""
    reasons = unreachable(servers)
    if reasons:
        raise ClusterError(f"cannot reach Kafka at {servers}: {'; '.join(reasons)}")
