"""The library imports light: the CLI's `validate` starts fast without Prefect or pandas."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("prefect", "pandas", "google.genai", "sqlalchemy", "alembic")


def loaded_after(code: str) -> list[str]:
    """The heavy modules a fresh interpreter has loaded after running ``code``."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    modules = set(json.loads(out.stdout.splitlines()[-1]))
    return [m for m in HEAVY if m in modules]


def test_import_nightshift_pulls_in_nothing_heavy() -> None:
    assert loaded_after("import nightshift") == []


def test_reading_a_catalogue_pulls_in_nothing_heavy() -> None:
    code = "from nightshift.config.loader import parse_catalogue\n"
    code += "parse_catalogue('jobs: [{label: a, backend: command, argv: [x]}]')"
    assert loaded_after(code) == []


def test_budget_lookup_pulls_in_nothing_heavy() -> None:
    code = "from nightshift.budgets import Budget, Budgets, classify\n"
    code += "classify(1.0, Budget(1.0, 2.0, 7, 'job')); Budgets()"
    assert loaded_after(code) == []


def test_computing_budgets_is_where_pandas_comes_in() -> None:
    assert "pandas" in loaded_after("import nightshift.budgets.table")
