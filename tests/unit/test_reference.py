"""docs/reference.md is what the catalogue's models accept; every backend's example validates."""

from __future__ import annotations

from pathlib import Path

import pytest

from nightshift.config.catalogue import BACKENDS, job_model
from nightshift.config.loader import parse_catalogue
from nightshift.config.reference import DESCRIPTIONS, EXAMPLES, field_rows, render_reference

REPO = Path(__file__).resolve().parents[2]


def test_the_reference_page_is_the_one_the_models_draw() -> None:
    written = (REPO / "docs" / "reference.md").read_text(encoding="utf-8")
    assert written == render_reference(), (
        "docs/reference.md drifted from the models: python -m nightshift.config.reference > "
        "docs/reference.md"
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_field_a_job_may_write_is_on_the_page_with_a_line(backend: str) -> None:
    fields = {name for name, f in job_model(backend).model_fields.items() if not f.exclude}
    assert fields <= set(DESCRIPTIONS), fields - set(DESCRIPTIONS)
    assert [row[0] for row in field_rows(backend)] == [
        name for name in job_model(backend).model_fields if name in fields
    ]


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_backends_example_validates(backend: str, tmp_path: Path) -> None:
    catalogue = parse_catalogue("name: example\n" + EXAMPLES[backend], tmp_path / "n.yaml")
    assert [job.backend for job in catalogue.jobs] == [backend]
