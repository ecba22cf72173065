"""The package's layers point one way: a module imports only from its own unit and the layers below.

Every ``import`` counts, at module level or inside a function (an import moved into a
function to dodge a cycle is still a dependency). A unit is a subpackage of ``spark-kafka-backup``
or a top-level module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "spark_kafka_backup"

#: Lowest first. A unit may import from its own unit and from any unit of a lower layer, never sideways.
LAYERS: list[set[str]] = [
    {"spark_kafka_backup", "errors", "text"},
    {"fsutil", "properties", "progress", "logsetup", "jars"},
    {"metrics"},
    {"format"},
    {"storage"},
    {"partition"},
    {"catalog"},
    {"schema_registry"},
    {"kafka"},
    {"spark"},
    {"job_options"},
    {"backup", "restore"},
    {"report", "jobs"},
    {"spark_submit"},
    {"launcher"},
    {"cli"},
    {"__main__"},
    # Scaffolding for the demo, the tests and the benchmarks: nothing of the installed tool may need it.
    {"devkit"},
]
RANK = {unit: rank for rank, units in enumerate(LAYERS) for unit in units}


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _module_name(path: Path) -> str:
    return ".".join(("spark_kafka_backup", *path.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__")


def _imports(path: Path) -> list[tuple[str, int]]:
    """The spark-kafka-backup modules ``path`` imports, with line numbers (relative imports resolved)."""
    found = []
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [
                (alias.name, node.lineno) for alias in node.names if alias.name.split(".")[0] == "spark_kafka_backup"
            ]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            if module.split(".")[0] == "spark_kafka_backup":
                found.append((module, node.lineno))
    return found


def _violations() -> list[str]:
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = _unit(_module_name(path))
        for module, line in _imports(path):
            target = _unit(module)
            if target != source and RANK[target] >= RANK[source]:
                wrong.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {source} imports {module}")
    return wrong


def test_every_unit_has_a_layer() -> None:
    units = {_unit(_module_name(path)) for path in PACKAGE.rglob("*.py")}
    assert units <= set(RANK), f"units without a layer: {sorted(units - set(RANK))}"


def test_imports_point_down() -> None:
    assert _violations() == []


def test_the_check_sees_an_upward_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An import inside a function from a higher layer (the old partition -> catalog dodge) is found."""
    fake = tmp_path / "spark_kafka_backup"
    (fake / "partition").mkdir(parents=True)
    (fake / "catalog").mkdir()
    (fake / "partition" / "writer.py").write_text(
        "def f():\n    from spark_kafka_backup.catalog.store import read_catalog\n"
    )
    (fake / "catalog" / "store.py").write_text("from ..partition import writer\n")
    monkeypatch.setitem(globals(), "PACKAGE", fake)
    assert _violations() == [
        "spark_kafka_backup/partition/writer.py:2: partition imports spark_kafka_backup.catalog.store"
    ]
