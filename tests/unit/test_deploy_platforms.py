"""deploy/databricks/ and deploy/emr-serverless/: each file checked against its platform's own model, strictly (a field
the model does not know fails, as a wrong type does), and the jobs' arguments in it through the jobs' parsers.

- Databricks: every job of the asset bundle against the Databricks SDK's ``JobSettings`` (its dataclasses and their
  type hints, walked field by field: ``from_dict`` alone drops what it does not know without a word);
- EMR Serverless: the ``start-job-run`` request against botocore's service model of ``StartJobRun`` (the
  validation the AWS CLI runs before it sends).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import shlex
import types
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy_arguments import parse_job

REPO = Path(__file__).resolve().parents[2]
BUNDLE = REPO / "deploy" / "databricks" / "databricks.yml"
START_JOB_RUN = REPO / "deploy" / "emr-serverless" / "start-job-run.json"


def model_problems(value: Any, kind: Any, where: str) -> list[str]:
    """What in ``value`` does not fit the type ``kind`` of the Databricks SDK (dataclasses, enums, lists, dicts)."""
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        options = [option for option in typing.get_args(kind) if option is not type(None)]
        if value is None:
            return []
        found = [model_problems(value, option, where) for option in options]
        return [] if any(not problems for problems in found) else found[0]
    if origin is list:
        if not isinstance(value, list):
            return [f"{where}: expected a list, found {value!r}"]
        (item,) = typing.get_args(kind)
        return [
            problem for index, entry in enumerate(value) for problem in model_problems(entry, item, f"{where}[{index}]")
        ]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{where}: expected a mapping, found {value!r}"]
        _, item = typing.get_args(kind)
        return [problem for key, entry in value.items() for problem in model_problems(entry, item, f"{where}.{key}")]
    if dataclasses.is_dataclass(kind) and isinstance(kind, type):
        if not isinstance(value, dict):
            return [f"{where}: expected a mapping, found {value!r}"]
        hints = typing.get_type_hints(kind)
        problems = [f"{where}.{key}: not a field of {kind.__name__}" for key in value if key not in hints]
        for key, entry in value.items():
            if key in hints:
                problems += model_problems(entry, hints[key], f"{where}.{key}")
        return problems
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        allowed = [member.value for member in kind]
        return [] if value in allowed else [f"{where}: {value!r} is not one of {allowed}"]
    if kind is Any:
        return []
    if (kind is int and isinstance(value, bool)) or not isinstance(value, kind):
        return [f"{where}: expected {kind.__name__}, found {value!r}"]
    return []


def bundle_jobs() -> dict[str, dict[str, Any]]:
    jobs: dict[str, dict[str, Any]] = yaml.safe_load(BUNDLE.read_text())["resources"]["jobs"]
    return jobs


def job_problems(job: dict[str, Any]) -> list[str]:
    from databricks.sdk.service.jobs import JobSettings

    return model_problems(job, JobSettings, "job")


@pytest.mark.parametrize("name", sorted(bundle_jobs()))
def test_each_databricks_job_matches_the_sdks_job_settings(name: str, tmp_path: Path) -> None:
    job = bundle_jobs()[name]
    assert job_problems(job) == []
    assert job["max_concurrent_runs"] == 1  # never two backups of one target at once
    for task in job["tasks"]:
        arguments = task["spark_python_task"]["parameters"]
        assert Path(task["spark_python_task"]["python_file"]).name == "backup.py"
        assert (BUNDLE.parent / task["spark_python_task"]["python_file"]).resolve() == REPO / "jobs" / "backup.py"
        parse_job("backup", arguments, tmp_path)
    for cluster in job["job_clusters"]:
        for variable, value in cluster["new_cluster"].get("spark_env_vars", {}).items():
            if "SECRET" in variable or "PASSWORD" in variable:
                assert value.startswith("{{secrets/"), f"{name}: {variable} is not a secret reference"


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda job: job.__setitem__("max_concurent_runs", 1), "job.max_concurent_runs: not a field of JobSettings"),
        (lambda job: job["tasks"][0].__setitem__("max_retries", "two"), "expected int, found 'two'"),
        (lambda job: job["schedule"].__setitem__("pause_status", "SOMETIMES"), "'SOMETIMES' is not one of"),
        (
            lambda job: job["tasks"][0]["spark_python_task"].__setitem__("file", "x.py"),
            "not a field of SparkPythonTask",
        ),
    ],
)
def test_a_wrong_databricks_field_or_type_fails(change: Any, expected: str) -> None:
    job = bundle_jobs()["kafka_snapshot_nightly"]
    change(job)
    assert any(expected in problem for problem in job_problems(job)), job_problems(job)


def emr_problems(request: dict[str, Any]) -> str:
    import botocore.session
    from botocore.validate import ParamValidator

    model = botocore.session.get_session().get_service_model("emr-serverless").operation_model("StartJobRun")
    report: str = ParamValidator().validate(request, model.input_shape).generate_report()
    return report


def test_the_emr_serverless_request_matches_botocores_model(tmp_path: Path) -> None:
    request = json.loads(START_JOB_RUN.read_text())
    assert emr_problems(request) == ""
    submit = request["jobDriver"]["sparkSubmit"]
    parse_job("backup", submit["entryPointArguments"], tmp_path)
    settings = dict(part.split("=", 1) for part in shlex.split(submit["sparkSubmitParameters"]) if part != "--conf")
    # The packed environment, as the launcher's --archive ships it (spark_submit.with_packed_environment), for the
    # driver too: on EMR Serverless it runs on the cluster, with the archive unpacked in its working directory.
    assert settings["spark.archives"].endswith("/kbackup-env.tar.gz#kbackup-env")
    assert settings["spark.executorEnv.PYTHONPATH"] == settings["spark.emr-serverless.driverEnv.PYTHONPATH"]
    assert settings["spark.executorEnv.PYTHONPATH"] == "./kbackup-env/site-packages"
    assert settings["spark.pyspark.python"].startswith("python3.")
    broken = json.loads(START_JOB_RUN.read_text())
    broken["jobDriver"]["sparkSubmit"]["entryPointArgs"] = []
    broken["executionTimeoutMinutes"] = "six hours"
    report = emr_problems(broken)
    assert 'Unknown parameter in jobDriver.sparkSubmit: "entryPointArgs"' in report
    assert "Invalid type for parameter executionTimeoutMinutes" in report
