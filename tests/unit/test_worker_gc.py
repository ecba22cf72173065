"""The one-time freeze of what imports created, in a reused Python worker (spark/worker_gc.py)."""

from __future__ import annotations

import gc
import sys
import types
from collections.abc import Iterator

import pytest

from spark_kafka_backup.spark import worker_gc


@pytest.fixture
def fresh_worker(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process as a worker that has not frozen anything yet; what the test froze is unfrozen after it."""
    gc.unfreeze()
    monkeypatch.setattr(worker_gc, "_modules_at_freeze", 0)
    yield
    gc.unfreeze()


def test_what_is_loaded_is_frozen_once_and_later_objects_stay_collectable(fresh_worker: None) -> None:
    worker_gc.freeze_loaded_objects()
    frozen = gc.get_freeze_count()
    assert frozen > 1000  # the modules' objects

    # Tasks that load nothing new freeze nothing more, however many run: what they hold stays collectable.
    # (The count may drop: a frozen object whose last reference goes, e.g. in pytest-xdist's own thread, is freed.
    # A second freeze would add the 303 lists held here.)
    held = []
    for _ in range(3):
        held.append([[n] for n in range(100)])
        worker_gc.freeze_loaded_objects()
    assert gc.get_freeze_count() <= frozen

    # A task's cyclic garbage is still found by the collection PySpark runs between tasks.
    class Node:
        other: object = None

    first, second = Node(), Node()
    first.other, second.other = second, first
    del first, second
    assert gc.collect() >= 2


def test_a_module_loaded_by_a_later_task_is_frozen_with_what_it_made(
    fresh_worker: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker_gc.freeze_loaded_objects()
    before = gc.get_freeze_count()
    module = types.ModuleType("kbackup_test_late_module")
    module.table = [[n] for n in range(500)]  # type: ignore[attr-defined]  # lists: always tracked
    monkeypatch.setitem(sys.modules, module.__name__, module)
    worker_gc.freeze_loaded_objects()
    # At least most of the 500 (as above, a frozen object another thread lets go of meanwhile is freed).
    assert gc.get_freeze_count() >= before + 400
