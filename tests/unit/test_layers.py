"""The package's layers point one way: a module imports only from its own unit and the layers below; the modules of
a unit import each other without a cycle; code that runs on Spark's executors never imports the driver's.

Every ``import`` counts, at module level, inside a function or under ``TYPE_CHECKING`` (an import moved into a
function to dodge a cycle is still a dependency), and ``from spark_kafka_backup import cli`` imports the module
``cli``, not the package. A unit is a subpackage of ``spark_kafka_backup`` or a top-level module.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "spark_kafka_backup"

#: Lowest first. A unit may import from its own unit and from any unit of a lower layer, never sideways.
LAYERS: list[set[str]] = [
    {"arrow_runtime"},  # the package's __init__ runs it first in every process (no pandas in a job's)
    {"spark_kafka_backup", "errors", "text", "packed"},
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
    {"jvm_archive", "packing"},
    {"spark_submit"},
    {"launcher"},
    {"cli"},
    {"__main__"},
]
RANK = {unit: rank for rank, units in enumerate(LAYERS) for unit in units}

#: The base classes of PySpark's Python data sources: a subclass's instances are pickled to executors, which import
#: its module to call ``read``/``write``.
DATA_SOURCE_BASES = "pyspark.sql.datasource"
#: Methods of a DataFrame whose first argument runs on the executors.
TASK_METHODS = frozenset({
    "mapInArrow", "mapInPandas", "mapPartitions", "mapPartitionsWithIndex", "foreachPartition", "flatMap",
    "applyInArrow", "applyInPandas",
})  # fmt: skip
#: Methods whose first argument runs on the executors when called on an RDD (a receiver naming ``rdd`` or made by
#: ``parallelize``; ``map`` of a thread pool is not Spark's).
RDD_METHODS = frozenset({"map", "foreach", "filter"})
#: What only a driver does: start or hold a Spark session, run a streaming query, make a DataFrame, parse a command
#: line, start processes. A module naming one of these never belongs on an executor.
DRIVER_NAMES = frozenset({"SparkSession", "ArgumentParser"})
DRIVER_ATTRIBUTES = frozenset({"sparkContext", "readStream", "writeStream", "createDataFrame", "ArgumentParser"})
DRIVER_IMPORTS = frozenset({"subprocess", "argparse.ArgumentParser"})
#: Not shipped (the repository's scaffolding): the package never imports them.
NOT_SHIPPED = frozenset({"devkit", "tests", "benchmarks"})


def _nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of the module at ``path``, parsed and walked once per text (each check looks at every module)."""
    return _walked(path.read_text(), str(path))


@functools.cache
def _walked(text: str, filename: str) -> tuple[ast.AST, ...]:
    return tuple(ast.walk(ast.parse(text, filename=filename)))


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
    for node in _nodes(path):
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


def _imported_names(nodes: tuple[ast.AST, ...], module: str, is_package: bool) -> dict[str, tuple[str, str]]:
    """Each name bound by ``from X import name [as alias]`` in a module: alias -> (X, name), relative X resolved."""
    found = {}
    parts = module.split(".") if is_package else module.split(".")[:-1]
    for node in nodes:
        if isinstance(node, ast.ImportFrom):
            base = parts[: len(parts) - node.level + 1] if node.level else []
            source = ".".join([*base, *([node.module] if node.module else [])])
            for alias in node.names:
                found[alias.asname or alias.name] = (source, alias.name)
    return found


def _executor_entries() -> dict[str, str]:
    """The modules Spark ships to its executors, computed from the code, each with why: a subclass of a PySpark data
    source class (its instances are pickled and read or written there), and each function handed to a DataFrame's
    ``mapInArrow``-like method or an RDD's ``map``-like method (through ``functools.partial`` too; a lambda's own
    module)."""
    entries: dict[str, str] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        nodes = _nodes(path)
        imported = _imported_names(nodes, module, path.name == "__init__.py")

        def defined_in(
            function: ast.expr, module: str = module, imported: dict[str, tuple[str, str]] = imported
        ) -> str:
            if isinstance(function, ast.Call) and ast.unparse(function.func) in {"functools.partial", "partial"}:
                return defined_in(function.args[0])
            if isinstance(function, ast.Name) and function.id in imported:
                source, name = imported[function.id]
                return f"{source}.{name}" if _exists(f"{source}.{name}") else source
            return module

        for node in nodes:
            if isinstance(node, ast.ClassDef):
                for base in node.bases:
                    if isinstance(base, ast.Name) and imported.get(base.id, ("", ""))[0] == DATA_SOURCE_BASES:
                        entries.setdefault(module, f"class {node.name}({base.id})")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
                method, receiver = node.func.attr, ast.unparse(node.func.value)
                on_rdd = method in RDD_METHODS and ("rdd" in receiver or "parallelize" in receiver)
                if method in TASK_METHODS or on_rdd:
                    entries.setdefault(defined_in(node.args[0]), f"{module}:{node.lineno} {method}")
    return {module: why for module, why in entries.items() if module.startswith("spark_kafka_backup")}


def _driver_modules() -> dict[str, str]:
    """The modules that do what only a driver does (:data:`DRIVER_NAMES` and the like), each with what it does."""
    driver: dict[str, str] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        for node in _nodes(path):
            if isinstance(node, ast.Import) and {alias.name for alias in node.names} & DRIVER_IMPORTS:
                driver.setdefault(module, f"imports {sorted({alias.name for alias in node.names} & DRIVER_IMPORTS)[0]}")
            elif isinstance(node, ast.Name) and node.id in DRIVER_NAMES:
                driver.setdefault(module, f"names {node.id}")
            elif isinstance(node, ast.Attribute) and node.attr in DRIVER_ATTRIBUTES:
                driver.setdefault(module, f"uses .{node.attr}")
    return driver


def _driver_modules_on_executors() -> list[str]:
    """Driver modules reached from an executor entry, with the import path that reaches them and what makes them the
    driver's."""
    graph = _modules()
    driver = _driver_modules()
    wrong = []
    for start in sorted(_executor_entries()):
        came_from: dict[str, str | None] = {start: None}
        todo = [start]
        while todo:
            module = todo.pop(0)
            for target in sorted(graph[module]):
                if target not in came_from:
                    came_from[target] = module
                    todo.append(target)
        for module in sorted(set(driver) & set(came_from)):
            chain: list[str] = []
            at: str | None = module
            while at is not None:
                chain.append(at.removeprefix("spark_kafka_backup."))
                at = came_from[at]
            wrong.append(f"{' -> '.join(reversed(chain))} ({driver[module]})")
    return wrong


def _imports_of_the_unshipped() -> list[str]:
    """Imports of the repository's scaffolding (:data:`NOT_SHIPPED`) from the package."""
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in _nodes(path):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            wrong += [
                f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: imports {name}"
                for name in names
                if name.split(".")[0] in NOT_SHIPPED
            ]
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
    entries = _executor_entries()
    # The computation sees the code Spark ships today: the backup's source and sink, the data source, the restore's
    # and --where's tasks (a new entry is found by it, not added here).
    shipped = ("spark.kafka_source", "spark.kafka_ranges", "spark.v1_sink", "datasource.source", "restore.task")
    assert {f"spark_kafka_backup.{name}" for name in (*shipped, "datasource.match_runs")} <= set(entries), entries
    assert {"spark_kafka_backup.restore.job", "spark_kafka_backup.backup.job", "spark_kafka_backup.launcher"} <= set(
        _driver_modules()
    )
    assert _driver_modules_on_executors() == []


def test_the_package_never_imports_the_repositorys_scaffolding() -> None:
    assert _imports_of_the_unshipped() == []


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
    (fake / "restore" / "plan.py").write_text("import subprocess\n")
    (fake / "restore" / "job.py").write_text(
        "import functools\nfrom spark_kafka_backup.restore.task import run\n"
        "def go(context, shared):\n    context.parallelize([1]).map(functools.partial(run, shared)).collect()\n"
    )
    (fake / "restore" / "source.py").write_text(
        "from pyspark.sql.datasource import DataSourceReader\nfrom spark_kafka_backup.restore import job\n"
        "class Reader(DataSourceReader):\n    pass\n"
    )
    (fake / "cli.py").write_text("import argparse\nimport devkit.demo\nparser = argparse.ArgumentParser()\n")
    monkeypatch.setitem(globals(), "PACKAGE", fake)
    assert _violations() == ["spark_kafka_backup/format/record.py:1: format imports spark_kafka_backup.cli"]
    assert _cycles_inside_units() == [["spark_kafka_backup.catalog.merge", "spark_kafka_backup.catalog.prune"]]
    assert _executor_entries() == {
        "spark_kafka_backup.restore.task": "spark_kafka_backup.restore.job:4 map",
        "spark_kafka_backup.restore.source": "class Reader(DataSourceReader)",
    }
    assert _driver_modules_on_executors() == [
        "restore.source -> restore.job -> restore.task -> restore.selection -> restore.plan (imports subprocess)",
        "restore.task -> restore.selection -> restore.plan (imports subprocess)",
    ]
    assert _imports_of_the_unshipped() == ["spark_kafka_backup/cli.py:2: imports devkit.demo"]


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
