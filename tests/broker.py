"""The one place tests get a Kafka cluster from.

In order of preference:

1. ``KBACKUP_TEST_BOOTSTRAP=host:port``: an external cluster (extra client
   settings may be given as ``KBACKUP_TEST_CLIENT_*`` variables, e.g.
   ``KBACKUP_TEST_CLIENT_SECURITY_PROTOCOL=SASL_SSL``).
2. ``KBACKUP_TEST_BROKER=docker``: Apache Kafka in a testcontainers container
   (the image of docker/compose.yaml); fails at once when no Docker engine answers.
3. Otherwise (the default): Apache Kafka started from its own jars on free
   loopback ports (:mod:`devkit.kafka_cluster`, one KRaft node).

No path skips: a suite that cannot get a broker fails.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

#: The compose file of docker/, whose Kafka image the Docker path uses too.
COMPOSE_FILE = Path(__file__).resolve().parent.parent / "docker" / "compose.yaml"


def compose_kafka_image() -> str:
    """The image of the ``kafka`` service in docker/compose.yaml."""
    import yaml

    image: str = yaml.safe_load(COMPOSE_FILE.read_text())["services"]["kafka"]["image"]
    return image


NO_ENGINE = "KBACKUP_TEST_BROKER=docker, but no Docker engine answered"


@dataclass(frozen=True)
class BrokerUnderTest:
    """A running cluster and the client settings to reach it."""

    kind: str  # "external", "docker" or "local" (Apache Kafka from its jars)
    bootstrap_servers: str
    extra_settings: dict[str, str] = field(default_factory=dict)
    description: str = ""

    def client_settings(self, **overrides: str) -> dict[str, str]:
        """``bootstrap.servers`` plus what this broker needs, plus ``overrides``."""
        return {"bootstrap.servers": self.bootstrap_servers, **self.extra_settings, **overrides}


def docker_answers() -> bool:
    try:
        import docker

        client = docker.from_env(timeout=3)
        client.ping()
        return True
    except Exception:
        return False


def wanted_kind() -> str:
    if os.environ.get("KBACKUP_TEST_BOOTSTRAP"):
        return "external"
    wanted = os.environ.get("KBACKUP_TEST_BROKER", "local")
    if wanted not in ("local", "docker"):
        raise RuntimeError(f"KBACKUP_TEST_BROKER must be local or docker, not {wanted!r}")
    return wanted


@contextmanager
def local_cluster(nodes: int = 1, *, warm_up: bool = True, **broker_config: str) -> Iterator[BrokerUnderTest]:
    """A fresh local Apache Kafka cluster, stopped (every node's process group killed) on exit.

    ``warm_up=False``: no internal topic exists yet, as on a cluster no consumer has used.
    """
    from devkit.kafka_cluster import KafkaCluster
    from tests.jvm_archive import kafka_node_options

    with KafkaCluster(
        nodes, broker_config=broker_config, warm_up=warm_up, quick_jit=True, java_options=kafka_node_options()
    ) as cluster:
        yield BrokerUnderTest("local", cluster.bootstrap_servers, description=cluster.describe())


@contextmanager
def broker_under_test() -> Iterator[BrokerUnderTest]:
    kind = wanted_kind()
    if kind == "external":
        prefix = "KBACKUP_TEST_CLIENT_"
        extra = {
            name[len(prefix) :].lower().replace("_", "."): value
            for name, value in os.environ.items()
            if name.startswith(prefix)
        }
        external = os.environ["KBACKUP_TEST_BOOTSTRAP"]
        yield BrokerUnderTest("external", external, extra, description=f"external cluster at {external}")
        return
    if kind == "docker":
        if not docker_answers():
            raise RuntimeError(f"{NO_ENGINE} (DOCKER_HOST={os.environ.get('DOCKER_HOST', 'default')})")
        from testcontainers.kafka import KafkaContainer

        image = compose_kafka_image()
        with KafkaContainer(image).with_kraft() as container:
            yield BrokerUnderTest("docker", container.get_bootstrap_server(), description=f"container {image}")
        return
    with local_cluster() as broker:
        yield broker
