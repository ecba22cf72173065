"""Keys are passed, never kept: no module of the package holds key material or a key store between calls.

A :class:`~spark_kafka_backup.format.encryption.KeyRing` travels from the command line (or a job's settings, or a
task's key sources) to each reader and writer that needs it. These tests fail if a module-level store comes back: a
``global`` rebinding of a key name, a module-level ring other than the empty ``NO_KEYS``, or key bytes found in any
module's state after a sealed partition was written and read.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import sys
from pathlib import Path
from typing import Any

import pytest

import spark_kafka_backup
from spark_kafka_backup.catalog.build import rebuild_catalog
from spark_kafka_backup.catalog.ledger import CatalogLedger
from spark_kafka_backup.catalog.verify import verify_backup
from spark_kafka_backup.errors import DecryptionKeyError
from spark_kafka_backup.format.encryption import KeyRing
from spark_kafka_backup.format.record import Record
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.records_file import NO_KEYS
from spark_kafka_backup.partition.writer import PartitionWriter

PACKAGE = Path(spark_kafka_backup.__file__).parent
KEK = bytes(range(7, 39))


def _global_key_bindings() -> list[str]:
    """``global`` statements naming something key-like, and module-level assignments of a ring but ``NO_KEYS``."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Global) and any("key" in name.lower() for name in node.names):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: global {', '.join(node.names)}")
        for statement in tree.body:
            if isinstance(statement, ast.Assign | ast.AnnAssign) and statement.value is not None:
                targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
                names = [ast.unparse(target) for target in targets]
                if "KeyRing" in ast.unparse(statement.value) and names != ["NO_KEYS"]:
                    found.append(f"{path.relative_to(PACKAGE.parent)}:{statement.lineno}: {', '.join(names)}")
    return found


def _holders_of(secret: bytes) -> list[str]:
    """Module globals of the package (and what a container among them holds, one level down) that hold ``secret``
    or a ring with any key."""

    def holds(value: Any) -> bool:
        if isinstance(value, KeyRing):
            return bool(value.keys)
        if isinstance(value, bytes | bytearray | memoryview):
            return secret in bytes(value)
        return False

    found = []
    for name, module in sorted(sys.modules.items()):
        if not name.startswith("spark_kafka_backup"):
            continue
        for attribute, value in list(vars(module).items()):
            inside: list[Any] = [value]
            if isinstance(value, dict):
                inside += [*value.keys(), *value.values()]
            elif isinstance(value, list | set | tuple | frozenset):
                inside += list(value)
            if any(holds(item) for item in inside):
                found.append(f"{name}.{attribute}")
    return found


def test_no_module_binds_a_key_store() -> None:
    assert _global_key_bindings() == []
    assert NO_KEYS.keys == {}


def test_the_check_sees_a_global_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "spark_kafka_backup"
    fake.mkdir()
    (fake / "store.py").write_text(
        "from spark_kafka_backup.format.encryption import KeyRing\n_keys = KeyRing({})\n"
        "def install(keys):\n    global _keys\n    _keys = keys\n"
    )
    monkeypatch.setitem(globals(), "PACKAGE", fake)
    assert _global_key_bindings() == [
        "spark_kafka_backup/store.py:4: global _keys",
        "spark_kafka_backup/store.py:2: _keys",
    ]


def test_a_sealed_partition_is_written_and_read_with_keys_passed_and_leaves_none_behind(tmp_path: Path) -> None:
    for module in pkgutil.walk_packages(spark_kafka_backup.__path__, "spark_kafka_backup."):
        if ".jobs." not in module.name and not module.name.endswith("__main__"):
            importlib.import_module(module.name)
    root = tmp_path / "backup"
    records = [Record(offset, 0, 1_700_000_000_000 + offset, b"k%d" % offset, b"v" * 60) for offset in range(40)]
    with PartitionWriter(root / "t", "t", 0, max_segment_size=600, fsync=False, ledger=CatalogLedger(root),
                         compression="zstd", encryption_key=KEK) as writer:  # fmt: skip
        for record in records:
            writer.append(record)
        writer.seal_newest()
    ring = KeyRing.of([KEK])
    assert list(PartitionReader(root / "t", 0, keys=ring).records()) == records
    assert all(report.ok for report in verify_backup(root, ["t"], deep=True, keys=ring))
    rebuild_catalog(root, ["t"], keys=ring)
    # The writer's process keeps nothing: a reader without the ring cannot read what was just sealed.
    with pytest.raises(DecryptionKeyError, match="no key was given"):
        list(PartitionReader(root / "t", 0).records())
    assert _holders_of(KEK) == []


def _sealed_before_cataloged(root: Path) -> list[Record]:
    """A sealed partition whose newest segment was sealed and not cataloged yet (a writer killed between the two, or
    a reader looking while a continuous backup rolls): the catalog's recorded prefix of it is checked on the
    decrypted bytes, which needs the key."""
    records = [Record(offset, 0, 1_700_000_000_000 + offset, b"k%d" % offset, b"v" * 60) for offset in range(40)]
    with PartitionWriter(root / "t", "t", 0, max_segment_size=1500, fsync=False, ledger=CatalogLedger(root),
                         compression="zstd", encryption_key=KEK) as writer:  # fmt: skip
        for record in records:
            writer.append(record)
    with PartitionWriter(root / "t", "t", 0, max_segment_size=1500, fsync=False, compression="zstd",
                         encryption_key=KEK) as writer:  # fmt: skip
        assert writer.seal_newest()  # no ledger: the catalog still records the plain prefix
    return records


def test_every_reader_that_checks_a_sealed_tail_is_handed_the_key(tmp_path: Path) -> None:
    """cat's damage check, the restore plan's and the data source's scans (review of the key ring's change)."""
    from spark_kafka_backup.catalog.integrity import bad_segments
    from spark_kafka_backup.catalog.segment_set import damaged_segments
    from spark_kafka_backup.catalog.store import read_catalog
    from spark_kafka_backup.datasource.segment_scan import SegmentScan, read_scan
    from spark_kafka_backup.partition.selection import Window

    root = tmp_path / "backup"
    records = _sealed_before_cataloged(root)
    ring = KeyRing.of([KEK])
    catalog = read_catalog(root, "t", 0)
    assert catalog is not None and catalog.tail is not None
    with pytest.raises(DecryptionKeyError, match="no key was given"):
        bad_segments(root, "t", 0)  # the tail's prefix is a sealed file's plain bytes
    assert bad_segments(root, "t", 0, keys=ring) == []
    assert damaged_segments(root, "t", 0, PartitionReader(root / "t", 0, keys=ring)) == []
    (tmp_path / "kek.hex").write_text(KEK.hex())
    names = tuple((segment.name, segment.start_offset) for segment in PartitionReader(root / "t", 0).segments)
    scan = SegmentScan(root=str(root), topic="t", partition=0, segments=names, next_start=None, window=Window(),
                       key_sources=((str(tmp_path / "kek.hex"), None),), verify=True)  # fmt: skip
    rows = [row for batch in read_scan(scan) for row in batch.column("offset").to_pylist()]
    assert rows == [record.offset for record in records]


def test_the_reference_producer_reports_a_fenced_delivery_behind_a_system_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """confluent-kafka raises SystemError when a report is served while a call fails (a newer restore fenced this
    one mid-transaction): the delivery's fenced code, not an unknown error, is what the task reports."""
    import confluent_kafka

    from spark_kafka_backup.kafka.columnar_producer import ProducerError
    from spark_kafka_backup.restore.reference_producer import ReferenceProducer

    class FencedDelivery:
        def code(self) -> int:
            return 47  # INVALID_PRODUCER_EPOCH

    class Producer:
        def __init__(self, config: dict[str, Any]) -> None:
            self.on_delivery = config["on_delivery"]

        def poll(self, timeout: float) -> int:
            return 0

        def commit_transaction(self, timeout: float) -> None:
            self.on_delivery(FencedDelivery(), None)
            raise SystemError("a delivery report was served while commit_transaction failed")

    monkeypatch.setattr(confluent_kafka, "Producer", Producer)
    producer = ReferenceProducer({}, group_metadata=object)
    with pytest.raises(ProducerError) as raised:
        producer.commit_transaction(1.0)
    assert raised.value.code == 47 and not raised.value.fatal
    assert producer.deliveries().failures == [(0, 47)]
