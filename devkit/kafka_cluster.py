"""Apache Kafka on loopback, started from its own jars, for the demo, the tests and the benchmarks.

The jars of :data:`KAFKA_VERSION` (``org.apache.kafka:kafka_2.13`` and its
runtime dependencies, plus a log4j binding) are resolved from Maven Central
once into the cache of :mod:`spark_kafka_backup.jars`; later starts take a few seconds.

A :class:`KafkaCluster` of N nodes runs each node in KRaft combined mode
(broker and controller in one JVM, static quorum of all N) on free loopback
ports with its storage formatted in a private temporary directory. Lifecycle:

- ``start()`` formats and launches every node, each in its own process group
  and with a parent-death signal, then waits until the cluster lists all its
  brokers and its group and transaction coordinators answer (the internal
  topics exist), so the first test does not meet ``COORDINATOR_LOAD_IN_PROGRESS``
  (``warm_up=False`` skips that: a cluster as new as an operator's);
- ``kill_node(id)`` / ``start_node(id)`` take one node down hard and bring it
  back on the same ports and storage (fault tests);
- ``stop()`` kills every node's process group and removes the directory. The
  context manager calls it also when the body raised.

Nodes of a cluster of three or more default to replication factor 3 and
``min.insync.replicas=2``.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from devkit.kafka_security import BrokerSecurity
from spark_kafka_backup.errors import SparkKafkaBackupError
from spark_kafka_backup.jars import Artifact, classpath, resolve

#: The Apache Kafka release the project runs against.
KAFKA_VERSION = "4.1.1"

KAFKA_ARTIFACTS = (
    Artifact("org.apache.kafka", "kafka_2.13", KAFKA_VERSION),
    # Kafka 4.1 logs through slf4j 1.7; this binds it to the log4j2 that Kafka carries.
    Artifact("org.apache.logging.log4j", "log4j-slf4j-impl", "2.24.3"),
)

_LOG4J = """\
status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.file.ref = file
logger.request.name = kafka.request.logger
logger.request.level = warn
"""


class KafkaClusterError(SparkKafkaBackupError):
    """A local Apache Kafka cluster could not be started."""


def kafka_jars() -> Path:
    """The directory of Apache Kafka's jars, fetched from Maven Central on first use."""
    return resolve(f"kafka-{KAFKA_VERSION}", KAFKA_ARTIFACTS)


def kafka_tool(main: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """One of Apache Kafka's own command-line tools, by its class (``kafka.admin.ConfigCommand`` is
    ``kafka-configs.sh``), run as its script would: for tests that change a cluster through Kafka rather than through
    the clients spark-kafka-backup uses."""
    command = ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true",
               "-Dlog4j2.level=error", "-cp", classpath(kafka_jars()), main, *args]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


#: What a Kafka node logs when its port was taken between :func:`free_port` and its bind.
PORT_TAKEN = "Address already in use"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing uses right now, below the kernel's ephemeral range when it can be: a port
    the kernel would pick for an outgoing connection can be taken by any client between this call and the server's
    bind (seen in the test suite: a Kafka node failing to start with "Address already in use")."""
    low = 32768
    with contextlib.suppress(OSError, ValueError), open("/proc/sys/net/ipv4/ip_local_port_range") as ports:
        low = int(ports.read().split()[0])
    chooser = random.SystemRandom()
    for _ in range(200 if low > 11_000 else 0):
        port = chooser.randrange(10_000, low)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        chosen: int = sock.getsockname()[1]
        return chosen


def _refuse_unusable(port: int) -> None:
    """A :class:`KafkaClusterError` saying why a node cannot listen on ``port`` of 127.0.0.1 (none: it can)."""
    if not 1 <= port <= 65535:
        raise KafkaClusterError(f"port {port}: expected 1 to 65535")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except PermissionError as exc:
            raise KafkaClusterError(
                f"port {port} needs privileges this user does not have: give one above 1023"
            ) from exc
        except OSError as exc:
            raise KafkaClusterError(f"port {port} is taken: give another, or none") from exc


def die_with_parent() -> None:
    """In the child before exec: its own session, and SIGKILL when the starting process dies."""
    os.setsid()
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)


@dataclass
class KafkaNode:
    """One KRaft node (broker and controller) of a :class:`KafkaCluster`."""

    node_id: int
    port: int
    controller_port: int
    directory: Path
    process: subprocess.Popen[bytes] | None = None
    #: Ports of the TLS and SASL_SSL listeners of a secured cluster (0: none).
    ssl_port: int = 0
    sasl_ssl_port: int = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_mentions(self, text: str) -> bool:
        return any(
            text in (self.directory / name).read_text(errors="replace")
            for name in ("stdout.log", "server.log")
            if (self.directory / name).is_file()
        )

    def log_tail(self, lines: int = 20) -> str:
        text = ""
        for name in ("stdout.log", "server.log"):
            path = self.directory / name
            if path.is_file():
                text += "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) + "\n"
        return text


@dataclass
class KafkaCluster:
    """N Apache Kafka nodes on loopback; use as a context manager.

    ``broker_config`` adds to or overrides the node settings (``server.properties`` keys).
    """

    nodes_count: int = 1
    broker_config: Mapping[str, str] = field(default_factory=dict)
    #: False: ready once every broker is listed, as a brand-new cluster is (no internal topics yet).
    warm_up: bool = True
    heap: str = "768m"
    #: Nodes that live for seconds or minutes (tests): the quick compiler tier only, about a third less CPU to
    #: start. Benchmarks and the demo keep the JVM's defaults.
    quick_jit: bool = False
    #: More options for every JVM of the cluster (its nodes and the storage tool), e.g. a class-data-sharing archive.
    java_options: tuple[str, ...] = ()
    start_timeout: float = 120.0
    #: The first node's client (PLAINTEXT) port; ``None``: a free one (each node's other ports are always free ones).
    port: int | None = None
    #: TLS, SASL_SSL and ACLs (see :mod:`devkit.kafka_security`); None: PLAINTEXT only, no
    #: authorizer.
    security: BrokerSecurity | None = None
    nodes: list[KafkaNode] = field(default_factory=list, init=False)
    directory: Path | None = field(default=None, init=False)
    cluster_id: str = field(default_factory=lambda: base64.urlsafe_b64encode(uuid.uuid4().bytes).decode()[:22])

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(node.address for node in self.nodes)

    @property
    def ssl_bootstrap_servers(self) -> str:
        """The TLS listeners (client certificate required) of a secured cluster."""
        return ",".join(f"127.0.0.1:{node.ssl_port}" for node in self.nodes)

    @property
    def sasl_ssl_bootstrap_servers(self) -> str:
        """The SASL_SSL (SCRAM) listeners of a secured cluster."""
        return ",".join(f"127.0.0.1:{node.sasl_ssl_port}" for node in self.nodes)

    def client_settings(self) -> dict[str, str]:
        """The PLAINTEXT listeners (a super user's on a secured cluster)."""
        return {"bootstrap.servers": self.bootstrap_servers}

    def describe(self) -> str:
        return f"Apache Kafka {KAFKA_VERSION} (KRaft, {self.nodes_count} node{'s' if self.nodes_count != 1 else ''})"

    # -- lifecycle -----------------------------------------------------------

    def start(self) -> KafkaCluster:
        """Start the nodes; a node that could not bind its port (taken since it was chosen) is a start on new ports,
        twice at most."""
        for attempt in range(3):
            if self.port is not None:
                _refuse_unusable(self.port)  # before anything is fetched, made or started
            try:
                return self._start()
            except KafkaClusterError as exc:
                if PORT_TAKEN in str(exc) and self.port is not None:
                    _refuse_unusable(self.port)
                if attempt == 2 or PORT_TAKEN not in str(exc):
                    raise
        raise AssertionError("unreachable")

    def _start(self) -> KafkaCluster:
        jars = kafka_jars()
        self.directory = Path(tempfile.mkdtemp(prefix="kbackup-kafka-"))
        self.nodes = [
            KafkaNode(node_id, self.port if node_id == 1 and self.port is not None else free_port(), free_port(),
                      self.directory / f"node-{node_id}")
            for node_id in range(1, self.nodes_count + 1)
        ]  # fmt: skip
        if self.security is not None:
            for node in self.nodes:
                node.ssl_port, node.sasl_ssl_port = free_port(), free_port()
        try:
            for node in self.nodes:
                self._write_config(node)
                self._format(node, jars)
            for node in self.nodes:
                self._launch(node, jars)
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def kill_node(self, node_id: int, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to a node's process group and wait for it to exit."""
        node = self.node(node_id)
        if node.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(node.process.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            node.process.wait(60)
        if node.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.process.pid, signal.SIGKILL)
            node.process.wait(30)

    def start_node(self, node_id: int) -> None:
        """Start a killed node again on its ports and storage."""
        node = self.node(node_id)
        if node.running:
            return
        self._launch(node, kafka_jars())

    def node(self, node_id: int) -> KafkaNode:
        for node in self.nodes:
            if node.node_id == node_id:
                return node
        raise KeyError(node_id)

    def stop(self) -> None:
        for node in self.nodes:
            self.kill_node(node.node_id)
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- steps ---------------------------------------------------------------

    def _settings(self, node: KafkaNode) -> dict[str, str]:
        replicas = min(3, self.nodes_count)
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes)
        settings = {
            "process.roles": "broker,controller",
            "node.id": str(node.node_id),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(node.directory / "data"),
            "num.partitions": "1",
            "default.replication.factor": str(replicas),
            "min.insync.replicas": str(min(2, replicas)),
            "offsets.topic.replication.factor": str(replicas),
            "offsets.topic.num.partitions": "10",
            "transaction.state.log.replication.factor": str(replicas),
            "transaction.state.log.min.isr": str(min(2, replicas)),
            "transaction.state.log.num.partitions": "10",
            "share.coordinator.state.topic.replication.factor": str(replicas),
            "share.coordinator.state.topic.min.isr": str(min(2, replicas)),
            # Test-friendly timings; nothing here changes what a record or an offset is.
            "group.initial.rebalance.delay.ms": "0",
            "log.initial.task.delay.ms": "0",
            "log.cleaner.backoff.ms": "500",
            "log.retention.check.interval.ms": "5000",
            # Transactions past their timeout are aborted within a second (default: ten).
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
        }
        if self.security is not None:
            settings.update(
                self.security.listener_settings(
                    node.address,
                    f"127.0.0.1:{node.ssl_port}",
                    f"127.0.0.1:{node.sasl_ssl_port}",
                    f"127.0.0.1:{node.controller_port}",
                )
            )
        settings.update(self.broker_config)
        return settings

    def _write_config(self, node: KafkaNode) -> None:
        node.directory.mkdir(parents=True)
        text = "".join(f"{key}={value}\n" for key, value in self._settings(node).items())
        (node.directory / "server.properties").write_text(text)
        (node.directory / "log4j2.properties").write_text(_LOG4J.format(log=node.directory / "server.log"))

    def _java(self, node: KafkaNode, jars: Path, main: str, *args: str, heap: str) -> list[str]:
        return [
            "java",
            "-Xms64m",
            f"-Xmx{heap}",
            "-XX:+UseG1GC",
            # The storage tool runs for a second (and test nodes for minutes): the quick compiler tier alone starts
            # them faster and spends less CPU on compiling.
            *(["-XX:TieredStopAtLevel=1"] if main != "kafka.Kafka" or self.quick_jit else []),
            "-Djava.awt.headless=true",
            *(self.security.jvm_properties() if self.security is not None else []),
            *self.java_options,
            f"-Dlog4j2.configurationFile={node.directory / 'log4j2.properties'}",
            "-cp",
            classpath(jars),
            main,
            *args,
        ]

    def _format(self, node: KafkaNode, jars: Path) -> None:
        command = self._java(
            node,
            jars,
            "kafka.tools.StorageTool",
            "format",
            # One argument: a URL-safe base64 id may start with "-".
            f"--cluster-id={self.cluster_id}",
            "--config",
            str(node.directory / "server.properties"),
            *(self.security.format_arguments() if self.security is not None else []),
            heap="256m",
        )
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise KafkaClusterError(
                f"formatting node {node.node_id} failed (exit {result.returncode}): "
                + " | ".join((result.stdout + result.stderr).strip().splitlines()[-5:])
            )

    def _launch(self, node: KafkaNode, jars: Path) -> None:
        command = self._java(node, jars, "kafka.Kafka", str(node.directory / "server.properties"), heap=self.heap)
        with open(node.directory / "stdout.log", "ab") as out:
            node.process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, preexec_fn=die_with_parent
            )

    def _wait_ready(self) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + self.start_timeout
        # log_level 0: no "connection refused" lines while the nodes come up.
        admin = AdminClient({**self.client_settings(), "socket.timeout.ms": "5000", "log_level": "0"})

        def check_alive() -> None:
            for node in self.nodes:
                if not node.running:
                    taken = node.log_mentions(PORT_TAKEN)
                    raise KafkaClusterError(
                        f"Kafka node {node.node_id} exited during start-up"
                        f"{f' ({PORT_TAKEN}: a port chosen for it was taken)' if taken else ''}:\n{node.log_tail()}"
                    )
            if time.monotonic() > deadline:
                raise KafkaClusterError(
                    f"{self.describe()} did not become ready within {self.start_timeout:.0f} s:\n"
                    + "".join(node.log_tail() for node in self.nodes)
                )

        while True:
            check_alive()
            with contextlib.suppress(Exception):
                if len(admin.list_topics(timeout=2).brokers) == self.nodes_count:
                    break
            time.sleep(0.2)
        if not self.warm_up:
            return
        # The group coordinator answers once __consumer_offsets exists and is loaded;
        # the transaction coordinator once __transaction_state does. Both are
        # probed in a child process: librdkafka's admin offset listing crashes the
        # process while the group coordinator is not there yet (confluent-kafka
        # 2.16.1), and a dropped transactional handle keeps reconnecting once the
        # cluster is gone.
        probe = (
            "import sys\n"
            "from confluent_kafka import Consumer, Producer, TopicPartition\n"
            "servers, seconds = sys.argv[1], float(sys.argv[2])\n"
            "c = Consumer({'bootstrap.servers': servers, 'group.id': 'kbackup-ready'})\n"
            "c.committed([TopicPartition('kbackup-ready', 0)], timeout=seconds)\n"
            "c.close()\n"
            "p = Producer({'bootstrap.servers': servers, 'transactional.id': 'kbackup-ready'})\n"
            "p.init_transactions(seconds)\n"
        )
        while True:
            check_alive()
            left = max(1.0, deadline - time.monotonic())
            result = subprocess.run(
                [sys.executable, "-c", probe, self.bootstrap_servers, str(min(left, 20.0))],
                capture_output=True,
                text=True,
                timeout=left + 30,
            )
            if result.returncode == 0:
                break
            time.sleep(0.3)
