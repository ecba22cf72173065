"""The unit layer holds by construction: a test here that asks for the suite's broker, restore target or S3
server, or starts a process (a JVM, a job, the CLI as a subprocess; through ``subprocess``, ``os.system``,
``os.posix_spawn``, a fork, ``multiprocessing``), fails and says to move it up to ``tests/``. The guard is in place
for the whole package, module-scoped fixtures included, and gone when a run goes on to the integration layer."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

#: The fixtures of the integration layer (tests/conftest.py).
INTEGRATION_FIXTURES = frozenset({"kafka", "target", "s3"})


def pytest_runtest_setup(item: pytest.Item) -> None:
    used = INTEGRATION_FIXTURES & set(getattr(item, "fixturenames", ()))
    if used:
        pytest.fail(f"a unit test may not use {', '.join(sorted(used))}: it belongs in tests/, the integration layer")


def _refuse(what: str) -> object:
    def refuse(*args: object, **options: object) -> None:
        shown = args[1] if what == "subprocess" and len(args) > 1 else args[:1]
        raise AssertionError(f"a unit test may not start a process ({what} {shown!r}): it belongs in tests/")

    return refuse


@pytest.fixture(scope="package", autouse=True)
def no_processes() -> Iterator[None]:
    """No process is started while the unit layer runs."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(subprocess.Popen, "__init__", _refuse("subprocess"))
        for name in ("system", "fork", "forkpty", "posix_spawn", "posix_spawnp", "execv", "execve", "execvp"):
            if hasattr(os, name):
                patch.setattr(os, name, _refuse(f"os.{name}"))
        yield
