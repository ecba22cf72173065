"""devkit/emulators.py runs before the project's environment exists, so it finds spark-kafka-backup's cache by
itself: the same place as the package's own lookup, with and without KBACKUP_CACHE."""

from __future__ import annotations

from pathlib import Path

import pytest

from devkit import emulators
from spark_kafka_backup.jars import cache_root


@pytest.mark.parametrize("configured", [None, "/srv/kbackup-cache"])
def test_the_emulators_are_built_into_the_packages_cache(
    configured: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if configured is None:
        monkeypatch.delenv("KBACKUP_CACHE", raising=False)
    else:
        monkeypatch.setenv("KBACKUP_CACHE", configured)
    assert emulators.cache_root() == cache_root()
    if configured is not None:
        assert emulators.cache_root() == Path(configured)
