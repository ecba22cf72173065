"""The package's layers point one way: a module imports only from its own unit and the layers below; the modules of
a unit import each other without a cycle; code that runs on Spark's executors never imports the driver's.

Every ``import`` counts, at module level, inside a function or under ``TYPE_CHECKING`` (an import moved into a
function to dodge a cycle is still a dependency), and ``from spark_kafka_backup import cli`` imports the module
``cli``, not the package. A unit is a subpackage of ``spark_kafka_backup`` or a top-level module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "spark_kafka_backup"

#: Lowest first. A unit may import from its own unit and from any unit of a lower layer, never sideways.
LAYERS: list[set[str]] = [
    {"spark_kafka_backup", "errors", "text"},
    {"fsutil", "properties", "progress", "logsetup", "jars", "boundary"},
    {"argtypes"},
    {"metrics"},
    {"format"},
    {"storage"},
    {"partition"},
    {"catalog"},
    {"schema_registry"},
    {"kafka"},
    {"spark"},
    {"datasource"},
    {"arguments"},
    {"job_options"},
    {"backup", "restore"},
    {"report", "jobs"},
    {"jvm_archive"},
    {"spark_submit"},
    {"launcher"},
    {"cli"},
    {"__main__"},
    # Scaffolding for the demo, the tests and the benchmarks: nothing of the installed tool may need it.
    {"devkit"},
]
RANK = {unit: rank for rank, units in enumerate(LAYERS) for unit in units}

#: The modules Spark runs on its executors (the tasks' code, pickled there): with every module they import. The Kafka
#: source's reader is one: Spark unpickles it on executors to call its ``read``.
EXECUTOR_ENTRIES = (
    "restore.task", "spark.kafka_reader", "spark.kafka_task", "spark.columnar_reader", "spark.kafka_source",
    "spark.v1_sink", "datasource.source", "datasource.segment_scan", "datasource.match_runs",
)  # fmt: skip
#: Modules of the driver alone (planning, sessions, the jobs' and the commands' entry points): never on an executor.
DRIVER_ONLY = (
    "backup.job", "backup.settings", "restore.job", "restore.plan", "restore.settings", "restore.access",
    "job_options", "spark.session", "spark_submit", "jvm_archive", "launcher", "cli",
)  # fmt: skip


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _module_name(path: Path) -> str:
    return ".".join(("spark_kafka_backup", *path.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__")


def _imports(path: Path) -> list[tuple[str, int]]:
    """The spark-kafka-backup modules ``path`` imports, with line numbers (relative imports resolved; a name imported
    from a package is the module of that name when there is one)."""
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
                for alias in node.names:
                    named = f"{module}.{alias.name}"
                    found.append((named if _exists(named) else module, node.lineno))
    return found


def _exists(module: str) -> bool:
    path = PACKAGE.joinpath(*module.split(".")[1:])
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _modules() -> dict[str, set[str]]:
    """Every module and the modules it imports (a name inside a module resolved to that module)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        graph[_module_name(path)] = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        for module, _ in _imports(path):
            while module and module not in graph:
                module = module.rpartition(".")[0]
            if module and module != _module_name(path):
                graph[_module_name(path)].add(module)
    return graph


def _cycles_inside_units() -> list[list[str]]:
    """The import cycles among the modules of one unit (strongly connected components of more than one module)."""
    graph = _modules()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph[module]):
            if _unit(target) != _unit(module):
                continue
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return cycles


def _driver_modules_on_executors() -> list[str]:
    """Driver-only modules reached from an executor entry, with the import path that reaches them."""
    graph = _modules()
    driver = {f"spark_kafka_backup.{name}" for name in DRIVER_ONLY}
    wrong = []
    for entry in EXECUTOR_ENTRIES:
        start = f"spark_kafka_backup.{entry}"
        came_from: dict[str, str | None] = {start: None}
        todo = [start]
        while todo:
            module = todo.pop(0)
            for target in sorted(graph[module]):
                if target not in came_from:
                    came_from[target] = module
                    todo.append(target)
        for module in sorted(driver & set(came_from)):
            chain: list[str] = []
            at: str | None = module
            while at is not None:
                chain.append(at.removeprefix("spark_kafka_backup."))
                at = came_from[at]
            wrong.append(" -> ".join(reversed(chain)))
    return wrong


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


def test_no_cycle_inside_a_unit() -> None:
    assert _cycles_inside_units() == []


def test_executor_code_never_imports_the_drivers() -> None:
    named = {f"spark_kafka_backup.{name}" for name in (*EXECUTOR_ENTRIES, *DRIVER_ONLY)}
    assert named - set(_modules()) == set(), "the rule names modules that do not exist"
    assert _driver_modules_on_executors() == []


def test_the_checks_see_each_kind_of_violation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A module imported through its package from below, a cycle inside a unit, and an executor module that
    reaches a driver module, each named."""
    fake = tmp_path / "spark_kafka_backup"
    for unit in ("format", "catalog", "restore"):
        (fake / unit).mkdir(parents=True)
        (fake / unit / "__init__.py").write_text("")
    (fake / "__init__.py").write_text("__version__ = '0'\n")
    (fake / "cli.py").write_text("")
    (fake / "format" / "record.py").write_text("from spark_kafka_backup import __version__, cli\n")
    (fake / "catalog" / "merge.py").write_text("from spark_kafka_backup.catalog import prune\n")
    (fake / "catalog" / "prune.py").write_text("def f():\n    from spark_kafka_backup.catalog.merge import g\n")
    (fake / "restore" / "task.py").write_text("from spark_kafka_backup.restore.selection import same_record\n")
    (fake / "restore" / "selection.py").write_text("from spark_kafka_backup.restore import plan\n")
    (fake / "restore" / "plan.py").write_text("")
    monkeypatch.setitem(globals(), "PACKAGE", fake)
    monkeypatch.setitem(globals(), "EXECUTOR_ENTRIES", ("restore.task",))
    monkeypatch.setitem(globals(), "DRIVER_ONLY", ("restore.plan",))
    assert _violations() == ["spark_kafka_backup/format/record.py:1: format imports spark_kafka_backup.cli"]
    assert _cycles_inside_units() == [["spark_kafka_backup.catalog.merge", "spark_kafka_backup.catalog.prune"]]
    assert _driver_modules_on_executors() == ["restore.task -> restore.selection -> restore.plan"]


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
