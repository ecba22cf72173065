"""The unit layer holds by construction: a test here that asks for the suite's broker, restore target or S3
server, or starts a process (a JVM, a job, the CLI as a subprocess), fails and says to move it up to ``tests/``."""

from __future__ import annotations

import subprocess

import pytest

#: The fixtures of the integration layer (tests/conftest.py).
INTEGRATION_FIXTURES = frozenset({"kafka", "target", "s3"})


def pytest_runtest_setup(item: pytest.Item) -> None:
    used = INTEGRATION_FIXTURES & set(getattr(item, "fixturenames", ()))
    if used:
        pytest.fail(f"a unit test may not use {', '.join(sorted(used))}: it belongs in tests/, the integration layer")


@pytest.fixture(autouse=True)
def no_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """No process is started by a unit test."""

    def refuse(self: subprocess.Popen[bytes], args: object, *rest: object, **options: object) -> None:
        raise AssertionError(f"a unit test may not start a process ({args!r}): it belongs in tests/")

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
