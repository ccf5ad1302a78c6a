"""The library imports light: the CLI's `validate` starts fast without Prefect or pandas.

One fresh interpreter takes the steps in order and says what was loaded after each: a step that
must stay light is checked with everything before it loaded too (a stronger check than alone).
Here, not in the unit layer: each check starts an interpreter of its own (seconds, not ms).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("prefect", "pandas", "google.genai", "sqlalchemy", "alembic", "matplotlib")
STEPS = {
    "nightshift": "import nightshift",
    "catalogue": "from nightshift.config.loader import parse_catalogue\n"
    "parse_catalogue('jobs: [{label: a, backend: command, argv: [x]}]')",
    "lookup": "from nightshift.budgets import Budget, Budgets, classify\n"
    "classify(1.0, Budget(1.0, 2.0, 7, 'job')); Budgets()",
    "gemini states": "import nightshift.backends.gemini.wait, nightshift.backends.gemini.results",
    "night": "import nightshift.engine.night",
    # a night's start reads its poll hints (usual durations) from the ledger: rows, no frame
    "poll hints": "import tempfile\n"
    "from datetime import UTC, datetime, timedelta\n"
    "from nightshift.engine.poll_hints import ledger_poll_hints\n"
    "from nightshift.store.ledger import Ledger\n"
    "ledger = Ledger(f'sqlite:///{tempfile.mkdtemp()}/l.db', 'c')\n"
    "t = datetime.now(UTC) - timedelta(days=1)\n"
    "for state, s in (('submitted', 0), ('running', 2), ('succeeded', 7)):\n"
    "    ledger.transition('n1', 'r', 'a', 'command', 'x', state, at=t + timedelta(seconds=s))\n"
    "catalogue = parse_catalogue('jobs: [{label: a, backend: command, argv: [x]}]')\n"
    "assert ledger_poll_hints(catalogue, ledger, datetime.now(UTC))['a'].p50 == 7.0\n"
    "ledger.close()",
    "table": "import nightshift.budgets.table",
}


def loaded_after(code: str) -> list[str]:
    """The heavy modules a fresh interpreter has loaded after running ``code``."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    modules = set(json.loads(out.stdout.splitlines()[-1]))
    return [m for m in HEAVY if m in modules]


@pytest.fixture(scope="module")
def loaded() -> dict[str, list[str]]:
    """Step -> the heavy modules loaded once it (and every step before it) ran."""
    probe = ["import json, sys", "loaded = {}"]
    for name, code in STEPS.items():
        probe += [code, f"loaded[{name!r}] = sorted(sys.modules)"]
    probe.append("print(json.dumps(loaded))")
    out = subprocess.run(
        [sys.executable, "-c", "\n".join(probe)], capture_output=True, text=True, check=True
    )
    steps = json.loads(out.stdout.splitlines()[-1])
    return {name: [m for m in HEAVY if m in modules] for name, modules in steps.items()}


def test_import_nightshift_pulls_in_nothing_heavy(loaded: dict[str, list[str]]) -> None:
    assert loaded["nightshift"] == []


def test_reading_a_catalogue_pulls_in_nothing_heavy(loaded: dict[str, list[str]]) -> None:
    assert loaded["catalogue"] == []


def test_budget_lookup_pulls_in_nothing_heavy(loaded: dict[str, list[str]]) -> None:
    assert loaded["lookup"] == []


def test_reading_gemini_states_and_results_pulls_in_no_sdk(loaded: dict[str, list[str]]) -> None:
    """The google-genai SDK is for talking to Gemini; a state or a results file needs none."""
    assert loaded["gemini states"] == []


def test_a_night_pulls_in_no_pandas(loaded: dict[str, list[str]]) -> None:
    """pandas is for the budgets' tables and plots; a night only looks budgets up."""
    assert "pandas" not in loaded["night"]


def test_a_nights_poll_hints_pull_in_no_pandas(loaded: dict[str, list[str]]) -> None:
    """Read at every night's start: pandas there costs a night ~50 MB for four columns."""
    assert "pandas" not in loaded["poll hints"]


def test_computing_budgets_is_where_pandas_comes_in(loaded: dict[str, list[str]]) -> None:
    assert "pandas" in loaded["table"]


def test_detection_imports_nothing_heavy() -> None:
    assert loaded_after("import nightshift.engine.detection, nightshift.engine.alerts") == []


def test_a_night_watching_with_a_fresh_snapshot_loads_no_pandas(tmp_path) -> None:
    """The budgets flow stores a snapshot weekly; a night reads it as rows (~50 MB spared)."""
    from datetime import UTC, datetime, timedelta

    from nightshift.budgets.current import build_snapshot
    from nightshift.store.ledger import Ledger

    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    ledger = Ledger(url, "c")
    now = datetime.now(UTC)
    for night in range(8):  # eight nights of `a` queued 10 s: a budget is learned
        at = now - timedelta(days=night + 1)
        ledger.transition(f"n{night}", "r", "a", "cli", "x", "queued", at=at)
        ledger.transition(
            f"n{night}", "r", "a", "cli", "x", "running", at=at + timedelta(seconds=10)
        )
    build_snapshot(ledger, now - timedelta(hours=1))
    ledger.close()
    code = (
        "from datetime import UTC, datetime\n"
        "from nightshift.budgets.current import current_budgets\n"
        "from nightshift.store.ledger import Ledger\n"
        f"budgets = current_budgets(Ledger({url!r}, 'c'), datetime.now(UTC))\n"
        "assert budgets.budget('c', 'a', 'queued') is not None, budgets\n"
        # and the night's report at its end, with each job's usual time from the same snapshot
        "from nightshift.config.loader import parse_catalogue\n"
        "from nightshift.engine.outcomes import JobOutcome, NightSummary, Outcome, Severity\n"
        "from nightshift.orchestration.report_inputs import gather_report\n"
        "catalogue = parse_catalogue('name: c\\njobs: [{label: a, backend: cli, task: t}]')\n"
        "summary = NightSummary(Severity.OK, [JobOutcome('a', Outcome.SUCCEEDED, 12.0)])\n"
        "report = gather_report(summary, catalogue, Ledger(" + repr(url) + ", 'c'), 'n9')\n"
        "assert report['jobs'][0]['usual_p50_s'] is not None, report"
    )
    assert "pandas" not in loaded_after(code)


def test_the_nights_report_picture_is_drawn_without_matplotlib_here() -> None:
    code = (
        "from nightshift.orchestration.report_plot import draw_apart\n"
        "job = {'label': 'a', 'shown_as': '1m, failed', 'usual_p50_s': 30.0,\n"
        "       'usual_p95_s': 50.0, 'duration_s': 60.0, 'tonight': 'ran', 'state': 'failed'}\n"
        "png = draw_apart({'night': '2026-11-30', 'jobs': [job]})\n"
        "assert png.startswith(b'\\x89PNG'), png[:100]"
    )
    assert "matplotlib" not in loaded_after(code)
