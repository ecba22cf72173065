"""The local Apache Kafka the suite, the demo and the benchmarks run on: it starts, and it never outlives its owner."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from devkit.kafka_cluster import KAFKA_VERSION, KafkaCluster
from tests.conftest import REPO
from tests.leftovers import marked_processes


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes.
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _marked_env(marker: str) -> dict[str, str]:
    return {**os.environ, "KBACKUP_TEST_RUN": marker, "PYTHONPATH": str(REPO)}


def _wait_gone(marker: str, timeout: float = 20) -> list[tuple[int, str]]:
    deadline = time.monotonic() + timeout
    left = marked_processes(marker)
    while left and time.monotonic() < deadline:
        time.sleep(0.3)
        left = marked_processes(marker)
    return left


# CI time: in the long tier; the quick tier covers every quick test runs on the pinned node
@pytest.mark.long
def test_the_cluster_is_apache_kafka_of_the_pinned_version(kafka_cluster_version: str) -> None:
    assert kafka_cluster_version == KAFKA_VERSION


@pytest.fixture(scope="module")
def kafka_cluster_version() -> str:
    """The version the running broker reports in its log (its own jars, not a stand-in)."""
    with KafkaCluster() as cluster:
        assert cluster.directory is not None
        log = (cluster.nodes[0].directory / "server.log").read_text()
        marker = "Kafka version: "
        assert marker in log, log[-2000:]
        return log.split(marker, 1)[1].split()[0]


def _fail_inside(cluster: KafkaCluster, pids: list[int], directories: list[Path]) -> None:
    with cluster:
        pids.extend(node.process.pid for node in cluster.nodes if node.process)
        assert cluster.directory is not None
        directories.append(cluster.directory)
        assert pids and all(_alive(pid) for pid in pids)
        raise RuntimeError("test body failed")


@pytest.mark.long
def test_every_node_stops_when_the_body_raises() -> None:
    pids: list[int] = []
    directories: list[Path] = []
    with pytest.raises(RuntimeError, match="test body failed"):
        _fail_inside(KafkaCluster(), pids, directories)
    assert pids and not any(_alive(pid) for pid in pids)
    assert directories and not directories[0].exists()


# CI time: in the long tier; the quick tier covers the run's end checks that nothing is left (tests/conftest.py)
@pytest.mark.long
def test_a_failing_test_leaves_no_broker(tmp_path: Path) -> None:
    """A pytest run whose test fails inside the broker fixture: the broker is gone when the run ends."""
    (tmp_path / "test_fails.py").write_text(
        textwrap.dedent(
            """
            from tests.broker import local_cluster

            def test_fails():
                with local_cluster() as broker:
                    assert broker.bootstrap_servers == "something else"
            """
        )
    )
    marker = uuid.uuid4().hex
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path / "test_fails.py")],
        capture_output=True,
        text=True,
        env=_marked_env(marker),
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 1, result.stdout[-2000:]
    assert "1 failed" in result.stdout
    assert _wait_gone(marker, timeout=5) == []


@pytest.mark.long
def test_a_killed_owner_takes_its_brokers_with_it(tmp_path: Path) -> None:
    """kill -9 of the process that started a cluster: its nodes die too (parent-death signal)."""
    marker = uuid.uuid4().hex
    code = textwrap.dedent(
        """
        import time
        from devkit.kafka_cluster import KafkaCluster
        cluster = KafkaCluster().start()
        print("ready", flush=True)
        time.sleep(600)
        """
    )
    owner = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=_marked_env(marker), cwd=tmp_path
    )
    try:
        assert owner.stdout is not None
        assert owner.stdout.readline().strip() == "ready"
        assert [c for _, c in marked_processes(marker) if c.startswith("kafka.Kafka")]
        owner.send_signal(signal.SIGKILL)
        owner.wait(30)
        assert _wait_gone(marker) == []
    finally:
        if owner.poll() is None:
            owner.kill()


@pytest.mark.long
def test_a_port_taken_before_the_node_binds_it_is_a_start_on_new_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    """The port chosen for a node is taken (by a client's connection, in the suite) before the node binds it: the
    cluster starts again on new ports instead of failing."""
    import socket

    from devkit import kafka_cluster

    real = kafka_cluster.free_port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", real()))
        taken.listen()
        occupied = taken.getsockname()[1]
        handed = iter([occupied])
        monkeypatch.setattr(kafka_cluster, "free_port", lambda: next(handed, None) or real())
        with KafkaCluster() as cluster:
            assert occupied not in {node.port for node in cluster.nodes}
            assert cluster.nodes[0].running


def test_chosen_ports_are_below_the_kernels_ephemeral_range() -> None:
    from devkit.kafka_cluster import free_port

    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    assert all(10_000 <= free_port() < low for _ in range(20))
