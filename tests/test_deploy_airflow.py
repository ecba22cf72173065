"""deploy/airflow/: the DAG imported and its tasks rendered by Airflow itself.

Apache Airflow and its Apache Spark provider are installed into a virtual environment of their own in the cache
(pinned below; they do not belong in spark-kafka-backup's). There the DAG folder is loaded by Airflow's ``DagBag``
(no import error), every task's templated fields are rendered with a run's context, and the ``SparkSubmitOperator``'s
hook builds the ``spark-submit`` command it would run. Here, every command the tasks would run goes through
spark-kafka-backup's real parsers, and the packed environment's settings are checked against the launcher's. A DAG
with a misspelled operator argument is an import error: the check can fail.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from spark_kafka_backup.jars import cache_root
from tests.deploy_arguments import parse_job

pytestmark = pytest.mark.long  # Airflow's own environment (made once), and its import of the DAG: a minute

REPO = Path(__file__).resolve().parent.parent
DAGS = REPO / "deploy" / "airflow"
AIRFLOW = ("apache-airflow==3.3.2", "apache-airflow-providers-apache-spark==6.3.4")

#: Run in Airflow's environment: load the folder, render every task, build the spark-submit command.
RENDER = r"""
import json, sys
from airflow.dag_processing.dagbag import DagBag
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

bag = DagBag(dag_folder=sys.argv[1])
out = {"errors": {str(k): str(v)[-2000:] for k, v in bag.import_errors.items()}, "dags": {}}
for dag_id, dag in bag.dags.items():
    context = {"ds": "2026-12-04", "params": dict(dag.params.dump())}
    tasks = {}
    for task in dag.tasks:
        task.render_template_fields(context)
        entry = {"kind": type(task).__name__, "downstream": sorted(task.downstream_task_ids)}
        if isinstance(task, SparkSubmitOperator):
            task._hook = None
            entry["command"] = task._get_hook()._build_spark_submit_command(task.application)
        else:
            entry["bash_command"] = task.bash_command
        tasks[task.task_id] = entry
    out["dags"][dag_id] = {"max_active_runs": dag.max_active_runs, "schedule": str(dag.schedule), "tasks": tasks}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def airflow_python() -> Path:
    """Airflow's own virtual environment, made once in the cache."""
    home = cache_root().absolute() / f"airflow-{AIRFLOW[0].split('==')[1]}"
    python = home / "bin" / "python"
    if not (home / ".complete").is_file():
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([sys.executable, "-m", "uv", "venv", "-q", "--python", base, str(home)], check=True)
        installed = subprocess.run(
            [sys.executable, "-m", "uv", "pip", "install", "-q", "--python", str(python), *AIRFLOW],
            capture_output=True, text=True, timeout=1200,
        )  # fmt: skip
        assert installed.returncode == 0, installed.stderr[-3000:]
        (home / ".complete").write_text("")
    return python


def render(airflow_python: Path, folder: Path, tmp_path: Path) -> dict[str, Any]:
    environment = {
        **{key: value for key, value in os.environ.items() if not key.startswith(("AIRFLOW", "PYTHONPATH"))},
        "AIRFLOW_HOME": str(tmp_path / "airflow-home"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW_CONN_SPARK_DEFAULT": "spark://spark-master:7077",
    }
    done = subprocess.run(
        [str(airflow_python), "-c", RENDER, str(folder)],
        capture_output=True, text=True, env=environment, cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rendered: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return rendered


def test_the_dag_imports_and_its_tasks_render_to_commands_that_parse(airflow_python: Path, tmp_path: Path) -> None:
    from spark_kafka_backup.cli import build_parser

    rendered = render(airflow_python, DAGS, tmp_path)
    assert rendered["errors"] == {}
    dag = rendered["dags"]["kafka_backup_nightly"]
    assert dag["max_active_runs"] == 1  # never two snapshots of one backup at once
    tasks = dag["tasks"]
    assert tasks["snapshot"]["downstream"] == ["verify"] and tasks["verify"]["downstream"] == ["report"]
    command: list[str] = tasks["snapshot"]["command"]
    assert command[:3] == ["spark-submit", "--master", "spark://spark-master:7077"]
    settings = dict(command[i + 1].split("=", 1) for i, word in enumerate(command) if word == "--conf")
    assert command[command.index("--archives") + 1].endswith("/kbackup-env.tar.gz#kbackup-env")
    assert settings["spark.executorEnv.PYTHONPATH"] == "./kbackup-env/site-packages"
    assert settings["spark.pyspark.python"] == f"python{sys.version_info.major}.{sys.version_info.minor}"
    job = next(index for index, word in enumerate(command) if word.endswith("/jobs/backup.py"))
    arguments = command[job + 1 :]
    assert "{{" not in " ".join(arguments)  # every template rendered
    parse_job("backup", arguments, tmp_path)
    assert "--snapshot" in arguments
    for task_id in ("verify", "report"):
        words = shlex.split(tasks[task_id]["bash_command"])
        assert words[0] == "spark-kafka-backup", words
        build_parser().parse_args(words[1:])


def test_a_misspelled_operator_argument_is_an_import_error(airflow_python: Path, tmp_path: Path) -> None:
    folder = tmp_path / "dags"
    folder.mkdir()
    text = (DAGS / "kafka_backup_nightly.py").read_text()
    assert "archives=" in text
    (folder / "kafka_backup_nightly.py").write_text(text.replace("archives=", "archive=", 1))
    rendered = render(airflow_python, folder, tmp_path)
    (error,) = rendered["errors"].values()
    assert "archive" in error
