"""The one place tests get a Kafka broker from.

In order of preference:

1. ``KBACKUP_TEST_BOOTSTRAP=host:port``: an external cluster (extra client
   settings may be given as ``KBACKUP_TEST_CLIENT_*`` variables, e.g.
   ``KBACKUP_TEST_CLIENT_SECURITY_PROTOCOL=SASL_SSL``).
2. A Docker engine that answers: Apache Kafka in a testcontainers container.
   ``KBACKUP_TEST_BROKER=docker`` demands this path and fails at once when no
   engine answers.
3. Otherwise the embedded broker (:mod:`kbackup.embedded_broker`) on a free
   loopback port. ``KBACKUP_TEST_BROKER=embedded`` demands it.

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
    """A running broker and the client settings to reach it."""

    kind: str  # "external", "docker" or "embedded"
    bootstrap_servers: str
    extra_settings: dict[str, str] = field(default_factory=dict)

    def client_settings(self, **overrides: str) -> dict[str, str]:
        """``bootstrap.servers`` plus what this broker needs, plus ``overrides``."""
        return {"bootstrap.servers": self.bootstrap_servers, **self.extra_settings, **overrides}

    @property
    def aborted_records_take_offsets(self) -> bool:
        """Apache Kafka keeps aborted transactional records (hidden) in the log; the embedded broker does not."""
        return self.kind != "embedded"


def docker_answers() -> bool:
    try:
        import docker

        client = docker.from_env(timeout=3)
        client.ping()
        return True
    except Exception:
        return False


@contextmanager
def broker_under_test() -> Iterator[BrokerUnderTest]:
    external = os.environ.get("KBACKUP_TEST_BOOTSTRAP")
    wanted = os.environ.get("KBACKUP_TEST_BROKER", "")
    if external:
        prefix = "KBACKUP_TEST_CLIENT_"
        extra = {
            name[len(prefix) :].lower().replace("_", "."): value
            for name, value in os.environ.items()
            if name.startswith(prefix)
        }
        yield BrokerUnderTest("external", external, extra)
        return
    if wanted == "docker" or (wanted != "embedded" and docker_answers()):
        if not docker_answers():
            raise RuntimeError(f"{NO_ENGINE} (DOCKER_HOST={os.environ.get('DOCKER_HOST', 'default')})")
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer(compose_kafka_image()).with_kraft() as container:
            yield BrokerUnderTest("docker", container.get_bootstrap_server())
        return
    from kbackup.embedded_broker import CLIENT_SETTINGS, EmbeddedBroker

    with EmbeddedBroker() as broker:
        yield BrokerUnderTest("embedded", broker.bootstrap_servers, dict(CLIENT_SETTINGS))
