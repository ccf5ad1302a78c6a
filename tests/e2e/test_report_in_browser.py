"""The deployed night's report, as the on-call engineer opens it: the ``nightly-report``
artifact page of the Prefect UI in headless Chromium renders its table and its plot.

A real ``prefect server start`` (its UI), a process work pool and worker, ``prefect deploy
--all`` from a copy of the checkout, a month of seeded history, one night run by the worker.
Skipped where there is no Chromium (``apt-get install -y chromium``; ``.ci/run`` does it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.prefect_processes import prefect_site
from tests.support import eventually, wait_until

REPO = Path(__file__).resolve().parents[2]
SKIP = shutil.ignore_patterns(".venv", ".git", ".nightshift", "__pycache__", ".*_cache", ".tools")
PY = sys.executable
CHROMIUM = os.environ.get("NIGHTSHIFT_CHROMIUM") or shutil.which("chromium")
SCREENSHOT_DIR = os.environ.get("NIGHTSHIFT_SCREENSHOT_DIR")  # keep the picture to look at

CATALOGUE = """\
name: morning
defaults: {poll: {initial: 0.2s, factor: 2, max: 1s}, deadline: 120s, retries: 0}
jobs:
  - {label: "audit:links", backend: command, argv: [%(py)s, -c, "import time; time.sleep(2)"]}
  - {label: "gen:articles", backend: command, argv: [%(py)s, -c, "print('ok')"]}
  - label: "feed:fetch"
    backend: command
    argv: [%(py)s, -c, "import sys; print('feed down: 503 upstream', file=sys.stderr); exit(3)"]
  - {label: "feed:summarize", backend: command, argv: [%(py)s, -c, "print(1)"],
     depends_on: ["feed:fetch"]}
"""

pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="no Chromium on this machine: apt-get install -y chromium (.ci/run installs it)",
)


def _chromium(
    *args: str, budget_ms: int = 30_000, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    argv = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        "--window-size=1400,2600",
        # the UI is a single-page app: let its scripts fetch and draw before the capture
        f"--virtual-time-budget={budget_ms}",
        *args,
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def _seed(state_dir: Path, night: str) -> None:
    """A month of ordinary nights of each job, so tonight's budgets are learned."""
    from datetime import date

    from nightshift.sandbox.history import Usual, seed
    from nightshift.store.ledger import Ledger

    usual = [
        Usual("audit:links", "command", (("running", 2.5),)),
        Usual("gen:articles", "command", (("running", 0.8),)),
        Usual("feed:fetch", "command", (("running", 1.0),)),
        Usual("feed:summarize", "command", (("running", 0.8),), start_s=2.0),
    ]
    ledger = Ledger(f"sqlite:///{state_dir / 'ledger.sqlite3'}", "morning")
    try:
        seed(ledger, usual, date.fromisoformat(night), 30)
    finally:
        ledger.close()


@pytest.mark.timeout(900)  # a server, a deploy and a worker on a loaded machine
def test_the_deployed_nights_report_page_renders_its_table_and_its_plot(tmp_path: Path) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    checkout = tmp_path / "checkout"
    shutil.copytree(REPO, checkout, ignore=SKIP)
    (checkout / "nightshift.yaml").write_text(CATALOGUE % {"py": PY})
    state = tmp_path / "state"
    state.mkdir()
    night = datetime.now(UTC).date().isoformat()
    _seed(state, night)
    nights = {"NIGHTSHIFT_STATE_DIR": str(state), "PYTHONPATH": str(checkout)}
    with prefect_site(
        tmp_path / "prefect", pool="nightshift", worker_cwd=checkout, extra_env=nights
    ) as site:
        deployed = site.prefect("deploy", "--all", cwd=checkout)
        assert deployed.returncode == 0, deployed.stdout + deployed.stderr
        with temporary_settings({PREFECT_API_URL: site.api}):
            run = run_deployment("nightly/nightly-batch-daily", timeout=0)

            def final() -> Any:
                with get_client(sync_client=True) as client:
                    return client.read_flow_run(run.id).state

            wait_until(lambda: (s := final()) is not None and s.is_final(), 300, "the night")
            # the night's name is put on the run by its on-failure hook, a moment after Prefect
            # ended it "Failed" (read between the two on a loaded machine, 2026-12-02)
            named = eventually(lambda: final().name == "Partial", 60)
            assert named, (final().name, site.log_tail())
            only = ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run.id]))
            with get_client(sync_client=True) as client:
                artifacts = {a.key: a for a in client.read_artifacts(artifact_filter=only)}
        report = artifacts["nightly-report"]
        ui = site.api.removesuffix("/api")
        page = f"{ui}/artifacts/artifact/{report.id}"

        shots = Path(SCREENSHOT_DIR) if SCREENSHOT_DIR else tmp_path
        shots.mkdir(parents=True, exist_ok=True)
        html = ""
        for budget_ms in (30_000, 60_000, 120_000):  # a loaded machine draws the page late
            dom = _chromium("--dump-dom", page, budget_ms=budget_ms)
            assert dom.returncode == 0, dom.stderr[-2000:]
            html = dom.stdout
            (shots / "nightly-report.html").write_text(html)
            if "markdown-renderer" in html and "<table" in html:
                break
        # the table: its header and the worst job first
        assert "<table" in html, f"no table in the page: see {shots / 'nightly-report.html'}"
        assert "Jobs, worst first" in html
        assert html.index("feed:fetch") < html.index("gen:articles")
        assert "feed down: 503 upstream" in html  # the excerpt of its log
        # the plot: an image drawn from the inline PNG
        assert '<img src="data:image/png;base64,' in html or "data:image/png;base64," in html

        picture = shots / "nightly-report.png"
        shot = _chromium(f"--screenshot={picture}", page, budget_ms=budget_ms)
        assert shot.returncode == 0, shot.stderr[-2000:]
        assert picture.stat().st_size > 50_000  # a page with a table and a plot, not a blank one
