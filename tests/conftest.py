"""Shared fixtures: where the upstream golden files are, and small builders."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.broker import BrokerUnderTest, broker_under_test
from tests.restore_helpers import Target

REPO = Path(__file__).resolve().parent.parent


def pytest_configure(config: pytest.Config) -> None:
    """``KBACKUP_TEST_BROKER=docker`` without an engine stops the run before any test."""
    if os.environ.get("KBACKUP_TEST_BROKER") == "docker" and not os.environ.get("KBACKUP_TEST_BOOTSTRAP"):
        from tests.broker import NO_ENGINE, docker_answers

        if not docker_answers():
            pytest.exit(f"{NO_ENGINE} (DOCKER_HOST={os.environ.get('DOCKER_HOST', 'default')})", returncode=3)


def upstream_golden_dir() -> Path:
    """The original project's v1 golden files (``../shared/compat/upstream-v1``).

    ``KBACKUP_UPSTREAM_GOLDEN`` overrides the location. A missing directory is
    an error, not a skip: these files are the compatibility bar.
    """
    configured = os.environ.get("KBACKUP_UPSTREAM_GOLDEN")
    path = Path(configured) if configured else REPO.parent / "shared" / "compat" / "upstream-v1"
    if not (path / "README.md").is_file():
        raise RuntimeError(
            f"upstream golden files not found at {path}; set KBACKUP_UPSTREAM_GOLDEN to the upstream-v1 directory"
        )
    return path


@pytest.fixture(scope="session")
def upstream() -> Path:
    return upstream_golden_dir()


@pytest.fixture(scope="session")
def kafka() -> Iterator[BrokerUnderTest]:
    """The suite's broker (see tests/broker.py); started once per session."""
    with broker_under_test() as broker:
        yield broker


@pytest.fixture(scope="module")
def target(kafka: BrokerUnderTest) -> Iterator[Target]:
    if kafka.kind == "embedded":
        from kbackup.embedded_broker import CLIENT_SETTINGS, EmbeddedBroker

        with EmbeddedBroker() as broker:
            yield Target(BrokerUnderTest("embedded", broker.bootstrap_servers, dict(CLIENT_SETTINGS)))
    else:
        yield Target(kafka, prefix="restored-")
