"""deploy/kubernetes/: every manifest an operator copies is checked against the schema of its kind, pinned in
deploy/kubernetes/schemas/ (the CRDs of the Kubeflow Spark operator and of the Prometheus Operator), strictly: a
field the schema does not know fails as a wrong type does (the API server would drop it without a word). The jobs'
arguments in them go through the jobs' own parsers.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.deploy_arguments import parse_job

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "deploy" / "kubernetes"
SCHEMAS = MANIFESTS / "schemas"
#: ObjectMeta fields a manifest may set (the CRDs leave metadata open; the API server knows these).
METADATA = {"name", "namespace", "labels", "annotations"}


def strict(schema: Any) -> Any:
    """``schema`` with every object that lists its properties closed to others (as kubeconform -strict does), but
    where the schema keeps unknown fields on purpose."""
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    closed = {key: strict(value) for key, value in schema.items()}
    if (
        "properties" in closed
        and "additionalProperties" not in closed
        and not closed.get("x-kubernetes-preserve-unknown-fields")
    ):
        closed["additionalProperties"] = False
    return closed


def validator(document: dict[str, Any]) -> jsonschema.Draft7Validator:
    group_version, kind = document["apiVersion"], document["kind"]
    path = SCHEMAS / f"{group_version.replace('/', '-')}-{kind}.json"
    assert path.is_file(), f"no pinned schema for {group_version} {kind} ({path.name})"
    return jsonschema.Draft7Validator(strict(json.loads(path.read_text())))


def problems(document: dict[str, Any]) -> list[str]:
    found = [
        f"{'.'.join(map(str, error.absolute_path)) or '(top)'}: {error.message}"
        for error in validator(document).iter_errors(document)
    ]
    metadata = document.get("metadata", {})
    found += [f"metadata.{key}: not an ObjectMeta field" for key in set(metadata) - METADATA]
    if not metadata.get("name"):
        found.append("metadata.name: missing")
    return found


def documents() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(MANIFESTS.glob("*.yaml")):
        for index, document in enumerate(yaml.safe_load_all(path.read_text())):
            found.append((f"{path.name}#{index}", document))
    return found


def spark_applications() -> list[tuple[str, dict[str, Any]]]:
    """(name, SparkApplication spec) of every manifest, a scheduled one's template included."""
    specs = []
    for name, document in documents():
        if document["kind"] == "SparkApplication":
            specs.append((name, document["spec"]))
        elif document["kind"] == "ScheduledSparkApplication":
            specs.append((name, document["spec"]["template"]))
    return specs


def test_every_kind_is_there() -> None:
    kinds = sorted(document["kind"] for _, document in documents())
    assert kinds == ["PodMonitor", "ScheduledSparkApplication", "SparkApplication", "SparkApplication"]


@pytest.mark.parametrize(("name", "document"), documents(), ids=[name for name, _ in documents()])
def test_each_manifest_matches_its_kinds_schema(name: str, document: dict[str, Any]) -> None:
    assert problems(document) == [], name


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda spec: spec.__setitem__("sparkConfs", {}), "'sparkConfs' was unexpected"),
        (lambda spec: spec["driver"].__setitem__("coresCount", 1), "'coresCount' was unexpected"),
        (lambda spec: spec["executor"].__setitem__("instances", "two"), "'two' is not of type 'integer'"),
        (lambda spec: spec["restartPolicy"].__setitem__("type", "Sometimes"), "'Sometimes' is not one of"),
        (lambda spec: spec["driver"]["secrets"][0].__setitem__("mountPath", "/x"), "'mountPath' was unexpected"),
    ],
)
def test_a_wrong_field_or_type_fails(change: Any, expected: str) -> None:
    (_, document), *_ = [(n, d) for n, d in documents() if d["kind"] == "SparkApplication"]
    broken = copy.deepcopy(document)
    change(broken["spec"])
    assert any(expected in problem for problem in problems(broken)), problems(broken)


def test_a_nightly_snapshot_never_overlaps_itself() -> None:
    (scheduled,) = [d for _, d in documents() if d["kind"] == "ScheduledSparkApplication"]
    assert scheduled["spec"]["concurrencyPolicy"] == "Forbid"
    assert "--snapshot" in scheduled["spec"]["template"]["arguments"]


@pytest.mark.parametrize(("name", "spec"), spark_applications(), ids=[name for name, _ in spark_applications()])
def test_the_jobs_arguments_parse_and_secrets_are_mounted_not_inline(
    name: str, spec: dict[str, Any], tmp_path: Path
) -> None:
    job = Path(spec["mainApplicationFile"]).name
    assert job in ("backup.py", "restore.py"), name
    arguments = [str(argument) for argument in spec["arguments"]]
    mounted = {secret["path"] for role in ("driver", "executor") for secret in spec[role].get("secrets", [])}
    parse_job(job.removesuffix(".py"), arguments, tmp_path)
    text = json.dumps(spec).lower()
    for secret_word in ("password", "secret_access_key", "sasl.jaas.config"):
        assert secret_word not in text, f"{name}: a secret inline ({secret_word})"
    for path in (argument for argument in arguments if argument.startswith("/etc/kbackup/")):
        assert any(path.startswith(mount + "/") for mount in mounted), f"{name}: {path} is not in a mounted secret"
