"""Catalogue jobs of the ``deployment`` backend: what loads, what reaches the backend, what
is refused (file:line, job, field)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nightshift.config.catalogue import DeploymentJob
from nightshift.config.loader import load_catalogue, parse_catalogue
from nightshift.engine.jobspec import job_spec
from nightshift.errors import CatalogueError

GOOD = """\
deployment: {api_url: "http://prefect.internal:4200/api"}
limits: {deployment: 3}
jobs:
  - label: train
    backend: deployment
    deployment: train-model/nightly
    parameters: {epochs: 3, data: {path: s3://bucket/x}}
    work_queue: gpu
    job_variables: {env: {MODE: nightly}}
    timeout: 30m
  - label: report
    backend: deployment
    deployment: "weekly report/default"
    depends_on: [train]
"""


def problems(text: str) -> list[str]:
    with pytest.raises(CatalogueError) as info:
        parse_catalogue(text, "night.yaml")
    return [p.render("night.yaml") for p in info.value.problems]


def test_a_deployment_job_loads_and_its_options_reach_the_backend(tmp_path: Path) -> None:
    path = tmp_path / "nightshift.yaml"
    path.write_text(GOOD)
    catalogue = load_catalogue(path)
    train = catalogue.job("train")
    assert isinstance(train, DeploymentJob)
    assert (train.deployment, train.work_queue, train.timeout) == (
        "train-model/nightly",
        "gpu",
        1800,
    )
    assert catalogue.caps == {"deployment": 3}
    assert catalogue.deployment.api_url == "http://prefect.internal:4200/api"
    spec = job_spec(catalogue, "train", "cat/2026-01-02/train/1")
    assert spec.backend == "deployment"
    assert spec.options["deployment"] == "train-model/nightly"
    assert spec.options["parameters"] == {"epochs": 3, "data": {"path": "s3://bucket/x"}}
    assert spec.options["job_variables"] == {"env": {"MODE": "nightly"}}
    assert spec.options["submission_key"] == "cat/2026-01-02/train/1"
    report = job_spec(catalogue, "report")
    assert (report.options["work_queue"], report.options["parameters"]) == (None, {})


def test_without_settings_the_night_s_own_api_is_used() -> None:
    catalogue = parse_catalogue("jobs:\n  - {label: a, backend: deployment, deployment: f/d}\n")
    assert catalogue.deployment.api_url is None


@pytest.mark.parametrize("name", ["just-a-flow", "a/b/c", "/d", "f/", " f/d"])
def test_a_deployment_name_must_be_flow_slash_deployment(name: str) -> None:
    text = f"jobs:\n  - label: a\n    backend: deployment\n    deployment: {name!r}\n"
    assert problems(text) == [
        "night.yaml:4: job 'a': field 'deployment': "
        'name the deployment as "flow-name/deployment-name"'
    ]


def test_missing_name_bad_fields_and_bad_settings_are_located() -> None:
    text = (
        "deployment: {api_url: prefect.internal}\n"
        "jobs:\n"
        "  - label: a\n"
        "    backend: deployment\n"
        "    parameters: [1, 2]\n"
        "    argv: [x]\n"
        "  - {label: b, backend: deployment, deployment: f/d, work_queue: ''}\n"
    )
    assert problems(text) == [
        "night.yaml:1: field 'deployment.api_url': must be an http(s):// URL of a Prefect API",
        "night.yaml:3: job 'a': field 'deployment': required field is missing",
        "night.yaml:5: job 'a': field 'parameters': Input should be a valid dictionary",
        "night.yaml:6: job 'a': field 'argv': unknown key",
        "night.yaml:7: job 'b': field 'work_queue': String should have at least 1 character",
    ]


def test_limits_take_the_deployment_backend() -> None:
    jobs = "jobs:\n  - {label: a, backend: deployment, deployment: f/d}\n"
    assert problems("limits: {deployment: 0}\n" + jobs) == [
        "night.yaml:1: field 'limits.deployment.concurrency': "
        "Input should be greater than or equal to 1"
    ]
    (unknown,) = problems("limits: {ftp: 1}\n" + jobs)
    assert unknown == (
        "night.yaml:1: field 'limits.ftp': unknown backend; "
        "use one of: command, cli, gemini_batch, deployment, http"
    )
