"""How ``validate --show`` writes a job's values: durations as the catalogue writes them when
that is exact, text YAML reads back as it is, secrets masked, unknown labels named."""

from __future__ import annotations

import pytest
import yaml

from nightshift.cli.job_view import _duration, _text, masked, unknown_label
from nightshift.config.loader import parse_catalogue


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(0.5, "500ms"), (2, "2s"), (90, "90s"), (1200, "20m"), (3900, "1h05m"), (0.0005, "0.0005s")],
)
def test_durations_are_written_as_the_catalogue_writes_them_when_exact(
    seconds: float, shown: str
) -> None:
    assert _duration(seconds) == shown


@pytest.mark.parametrize(
    "text", ["plain", "/jobs/{id}", "{label}", "a: b", "a #b", "", " pad", "true", "12", "*x"]
)
def test_text_reads_back_as_the_same_string(text: str) -> None:
    assert yaml.safe_load(f"k: {_text(text)}") == {"k": text}


def test_secret_like_keys_of_free_mappings_are_masked_not_the_schemas_own_names() -> None:
    catalogue = parse_catalogue(
        "jobs:\n"
        "  - label: a\n"
        "    backend: http\n"
        "    base_url: https://jobs.internal\n"
        "    auth: {secret_block: jobs-token}\n"
        "    submit: {url: /jobs, body: {api_key: k1, task: t}, headers: {X-Auth-Token: k2}}\n"
        "    id_path: id\n"
        '    status_url: "/jobs/{id}"\n'
        "    state_path: s\n"
        "    states: {succeeded: [ok], failed: [err]}\n",
        environ={},
    )
    job = catalogue.jobs[0]
    shown = masked(job.model_dump(mode="json"), job)
    assert shown["auth"]["secret_block"] == "jobs-token"  # a block's name, not its secret
    assert shown["submit"]["body"] == {"api_key": "***", "task": "t"}
    assert shown["submit"]["headers"] == {"X-Auth-Token": "***"}


def test_an_unknown_label_names_the_close_ones_first() -> None:
    line = unknown_label("rollup:oders", "n.yaml", ["hello", "rollup:refunds", "rollup:orders"])
    assert line == (
        "nightshift validate: no job 'rollup:oders' in n.yaml; "
        "known: rollup:orders, rollup:refunds, hello"
    )
