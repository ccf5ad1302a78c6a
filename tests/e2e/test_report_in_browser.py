"""The deployed night's report, as the on-call engineer opens it: the ``nightly-report``
artifact page of the Prefect UI in headless Chromium renders its tables and its plot, and its
tables fit the card at a 1,400 px window (the UI does not wrap a table's cells: a cell that does
not fit is cut off, behind a scrollbar the reader does not see).

A real ``prefect server start`` (its UI), a process work pool and worker, ``prefect deploy
--all`` from a copy of the checkout, a month of seeded history, one night run by the worker,
then retried as the UI's Retry does it (the flow run's state set to ``AwaitingRetry``) after the
audit is fixed: the retry's report tells both runs and keeps the audit's first reason. Slack is
the local emulator. The page is read over Chromium's DevTools protocol (its layout measured).
Skipped where there is no Chromium (``apt-get install -y chromium``; ``.ci/run`` does it).
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
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
WIDTH = 1400  # the window the report must fit
TOKEN = "xoxb-report-in-browser-5e1f"

CATALOGUE = """\
name: morning
defaults: {poll: {initial: 0.2s, factor: 2, max: 1s}, deadline: 120s, retries: 0}
notify:
  env: e2e
  slack: {base_url: "%(slack)s", timeout: 5}
  routes: {partial: {channel: "#data-platform-batch-digest"}, failed: {channel: "#batch-failed"}}
jobs:
  - label: "audit:links"
    backend: command
    argv: [%(py)s, -c, "%(audit)s"]
  - {label: "gen:articles", backend: command, argv: [%(py)s, -c, "print('ok')"]}
  - label: "feed:fetch"
    backend: command
    argv: [%(py)s, -c, "import sys; print('feed down: 503 upstream', file=sys.stderr); exit(3)"]
  - {label: "feed:summarize", backend: command, argv: [%(py)s, -c, "print(1)"],
     depends_on: ["feed:fetch"]}
  - {label: "index:rebuild", backend: cli, task: "rebuild [run=0.5]"}
"""
# fails until the file `fixed` is in its folder (the checkout: a job runs in the catalogue's)
AUDIT = (
    "import os, sys, time; time.sleep(2); fixed = os.path.exists('fixed'); "
    "fixed or print('2 broken links found, failing the audit', file=sys.stderr); "
    "sys.exit(0 if fixed else 3)"
)

pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="no Chromium on this machine: apt-get install -y chromium (.ci/run installs it)",
)


class Page:
    """A page in headless Chromium at WIDTH, driven over the DevTools protocol."""

    def __init__(self, ws: Any) -> None:
        self._ws, self._ids = ws, itertools.count(1)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        ask = next(self._ids)
        self._ws.send(json.dumps({"id": ask, "method": method, "params": params}))
        while True:
            answer = json.loads(self._ws.recv(timeout=60))
            if answer.get("id") == ask:
                assert "error" not in answer, answer
                result: dict[str, Any] = answer["result"]
                return result

    def js(self, expression: str) -> Any:
        done = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return done["result"].get("value")

    def open(self, url: str, ready: str, timeout: float = 180) -> None:
        """Go to ``url`` and wait until ``ready`` (a JS expression) holds: the UI is a
        single-page app that fetches and draws after the page loads."""
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + timeout
        while not self.js(ready):
            assert time.monotonic() < deadline, self.js("document.body.innerText.slice(0, 2000)")
            time.sleep(0.5)
        time.sleep(1)  # its images and fonts settle

    def tab(self, name: str, shows: str, timeout: float = 60) -> str:
        """Click the page's tab called ``name`` and wait until its text ``shows``: its text."""
        click = (
            "[...document.querySelectorAll('button, a, [role=tab], li')]"
            f".find(e => e.innerText.trim() === {json.dumps(name)})?.click()"
        )
        self.js(click)
        deadline = time.monotonic() + timeout
        while shows not in (text := self.js("document.body.innerText")):
            assert time.monotonic() < deadline, text[:3000]
            time.sleep(0.5)
        return str(text)


def _browser(profile: Path) -> tuple[subprocess.Popen[str], str]:
    """Headless Chromium and its first page's DevTools socket."""
    assert CHROMIUM is not None
    argv = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        f"--window-size={WIDTH},2600",
        "--remote-debugging-port=0",
        f"--user-data-dir={profile}",
        "about:blank",
    ]
    browser = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    assert browser.stderr is not None
    for line in browser.stderr:
        if found := re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line):
            port = found.group(1)
            break
    else:
        raise AssertionError("Chromium did not open its DevTools port")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30) as answer:
        pages = json.load(answer)
    return browser, next(p["webSocketDebuggerUrl"] for p in pages if p["type"] == "page")


# each table of the report's card: whether it fits (its scrolling box shows all of it, no cell
# passes the card's right edge or is cut inside itself), and its cells that do not
FITS = """
[...document.querySelectorAll('.artifact-data-markdown table')].map(table => {
  const box = table.closest('.p-table') || table.parentElement;
  const card = table.closest('.artifact-data-markdown');
  const edge = card.getBoundingClientRect().right;
  const cells = [...table.querySelectorAll('th, td')];
  return {
    header: [...table.querySelectorAll('th')].map(th => th.innerText.trim()),
    box: [box.scrollWidth, box.clientWidth],
    card: Math.round(card.clientWidth),
    cut: cells
      .filter(c => c.getBoundingClientRect().right > edge + 0.5
                || c.scrollWidth > c.clientWidth + 1)
      .map(c => c.innerText.trim()),
  };
})
"""


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
@pytest.mark.picture
def test_the_retried_nights_report_page_tells_both_runs_and_its_tables_fit_at_1400px(
    tmp_path: Path,
) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        FlowRunFilter,
        FlowRunFilterId,
        FlowRunFilterParentFlowRunId,
    )
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect.states import AwaitingRetry
    from websockets.sync.client import connect

    from nightshift.sandbox.slack_emulator import SlackEmulator

    checkout = tmp_path / "checkout"
    shutil.copytree(REPO, checkout, ignore=SKIP)
    state = tmp_path / "state"
    state.mkdir()
    night = datetime.now(UTC).date().isoformat()
    _seed(state, night)
    nights = {
        "NIGHTSHIFT_STATE_DIR": str(state),
        "PYTHONPATH": str(checkout),
        "SLACK_BOT_TOKEN": TOKEN,
        # a job CLI with no history at all: the forecast must say it knows nothing of it
        "NIGHTSHIFT_AGY": f"{PY} -m nightshift.sandbox.agy",
        "AGY_STATE_DIR": str(tmp_path / "agy"),
    }
    with (
        SlackEmulator(TOKEN) as slack,
        prefect_site(
            tmp_path / "prefect", pool="nightshift", worker_cwd=checkout, extra_env=nights
        ) as site,
    ):
        values = {"py": PY, "audit": AUDIT, "slack": slack.base_url}
        (checkout / "nightshift.yaml").write_text(CATALOGUE % values)
        deployed = site.prefect("deploy", "--all", cwd=checkout)
        assert deployed.returncode == 0, deployed.stdout + deployed.stderr
        with temporary_settings({PREFECT_API_URL: site.api}):
            run = run_deployment("nightly/nightly-batch-daily", timeout=0)

            def final() -> Any:
                with get_client(sync_client=True) as client:
                    return client.read_flow_run(run.id)

            def ended(runs: int) -> bool:
                seen = final()
                return seen.run_count >= runs and seen.state is not None and seen.state.is_final()

            wait_until(lambda: ended(1), 300, "the night")
            # the night's name is put on the run by its on-failure hook, a moment after Prefect
            # ended it "Failed" (read between the two on a loaded machine, 2026-12-02)
            named = eventually(lambda: final().state.name == "Partial", 60)
            assert named, (final().state.name, site.log_tail())

            # the audit fixed, then the UI's Retry: the same flow run scheduled again
            (checkout / "fixed").touch()
            with get_client(sync_client=True) as client:
                client.set_flow_run_state(run.id, AwaitingRetry(), force=True)
            wait_until(lambda: ended(2), 300, "the retry")
            only = ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run.id]))

            def reports() -> list[Any]:
                with get_client(sync_client=True) as client:
                    found = client.read_artifacts(artifact_filter=only)
                return sorted((a for a in found if a.key == "nightly-report"), key=_created)

            pages = eventually(lambda: len(reports()) == 2, 60)
            assert pages, (reports(), site.log_tail())
            first_report, report = reports()  # the first try's, the retry's
            with get_client(sync_client=True) as client:
                cards = client.read_artifacts(artifact_filter=only)
                chains = client.read_flow_runs(
                    flow_run_filter=FlowRunFilter(
                        parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[run.id])
                    )
                )
                runs = [run.id, *(c.id for c in chains)]  # the night's and its chains' task runs
                task_runs = client.read_task_runs(
                    flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=runs))
                )
        text = report.data
        assert isinstance(text, str)
        # the report reads as one night: both runs, the audit's first reason, the counts
        assert re.search(
            r"\nRan \d\d:\d\d:\d\d-\d\d:\d\d:\d\d UTC \([0-9hms]+\); "
            r"retry \d\d:\d\d:\d\d-\d\d:\d\d:\d\d \([0-9hms]+\)\n",
            text,
        ), text
        assert "retry: 2 re-ran (1 now ok, 1 still failing), 1 still skipped, 2 kept" in text
        assert re.search(
            r"\*\*audit:links\*\* \(Completed\): "
            r"failed on attempt 1 at \d\d:\d\d, ok on attempt 2\n"
            r"- last failure \(failed on attempt 1 at \d\d:\d\d\): exit code 3[^\n]*\n",
            text,
        ), text
        assert "2 broken links found, failing the audit" in text  # the first run's tail
        # no forecast figure without a basis: the job CLI's job had nothing learned on the first
        # try (the retry kept it: its forecast has a basis for every job it runs)
        unknown = "1 of 5 jobs have nothing learned yet (index:rebuild): no finish time"
        assert f"No forecast to hold the night against: {unknown}." in first_report.data
        assert "Expected to finish at" not in first_report.data
        # each try's pages told apart: the current try's, the earlier one's superseded
        said = sorted((a.key or "", a.description or "") for a in cards)
        current = [d for _, d in said if d.startswith("try 2, current: ")]
        earlier = [d for _, d in said if d.startswith("try 1, superseded by try 2: ")]
        assert len(current) == len(earlier) == 4, said  # forecast, progress, summary, report
        assert f"try 1, superseded by try 2: {unknown}" in earlier
        # one duration per job: the report's, the summary artifact's and (Prefect's overhead
        # on top, docs/night-report.md) its task run's
        summary = next(a for a in cards if a.key == "nightly-summary" and a in _current(cards))
        data = json.loads(summary.data) if isinstance(summary.data, str) else summary.data
        rows = {row["job"]: row for row in data}
        took = rows["audit:links"]["duration"]
        assert re.search(rf"\n\| `audit:links` \| Completed \| {re.escape(took)} \|", text), text
        audit = max(
            (t for t in task_runs if t.name == "audit:links"), key=lambda t: t.expected_start_time
        )
        seconds = _seconds(took)
        # (the figure is rounded to the second: half a second either way)
        ran = audit.total_run_time.total_seconds()
        assert seconds - 0.5 <= ran <= seconds + 10, (took, audit)
        # a skipped step is not a success: grey (Cancelled), named Skipped
        skipped = [t for t in task_runs if t.name == "feed:summarize"]
        assert {(t.state.type.value, t.state.name) for t in skipped} == {("CANCELLED", "Skipped")}
        # the chain's subflows as written, each try's told apart
        names = sorted(c.name for c in chains)
        assert names == [
            f"night {night}: feed:fetch -> feed:summarize",
            f"night {night}: feed:fetch -> feed:summarize (try 2)",
        ], names

        ui = site.api.removesuffix("/api")
        browser, socket = _browser(tmp_path / "chromium")
        try:
            with connect(socket, max_size=None) as ws:
                page = Page(ws)
                ready = (
                    "document.querySelectorAll('.artifact-data-markdown table').length >= 2 && "
                    "[...document.images].some(i => i.src.startsWith('data:image/png') "
                    "&& i.complete && i.naturalWidth > 0)"
                )
                page.open(f"{ui}/artifacts/artifact/{report.id}", ready)
                shown = page.js("document.querySelector('.artifact-data-markdown').innerText")
                tables = page.js(FITS)
                shot = page.call("Page.captureScreenshot", format="png")["data"]
                # the run's page at 07:00: its Artifacts tab, its Subflow Runs tab
                page.open(
                    f"{ui}/runs/flow-run/{run.id}",
                    "document.body.innerText.includes('Subflow Runs')",
                )
                artifacts_tab = page.tab("Artifacts", "superseded by try 2")
                run_shot = page.call("Page.captureScreenshot", format="png")["data"]
                subflows_tab = page.tab("Subflow Runs", "feed:summarize (try 2)")
        finally:
            os.killpg(browser.pid, signal.SIGTERM)
            browser.wait(timeout=30)

    shots = Path(SCREENSHOT_DIR) if SCREENSHOT_DIR else tmp_path
    shots.mkdir(parents=True, exist_ok=True)
    picture = shots / "nightly-report.png"
    picture.write_bytes(base64.b64decode(shot))
    (shots / "nightly-report.txt").write_text(shown)
    (shots / "flow-run-artifacts.png").write_bytes(base64.b64decode(run_shot))
    (shots / "flow-run-artifacts.txt").write_text(artifacts_tab)
    (shots / "flow-run-subflows.txt").write_text(subflows_tab)
    # the Artifacts tab tells the current pages from the earlier try's at a glance
    assert "try 2, current" in artifacts_tab and "superseded by try 2" in artifacts_tab
    # the chain's subflows as written, each try's told apart
    assert f"night {night}: feed:fetch -> feed:summarize (try 2)" in subflows_tab
    # the page: its jobs worst first, the still failing job's log, the plot drawn
    assert "Jobs, worst first" in shown
    assert shown.index("feed:fetch") < shown.index("gen:articles")
    assert "feed down: 503 upstream" in shown
    assert picture.stat().st_size > 50_000  # a page with tables and a plot, not a blank one
    # every table fits the card at 1,400 px: the jobs' (ids shortened, in full below) and Slack's
    assert [t["header"][0] for t in tables] == ["job", "channel"], tables
    for table in tables:
        scroll, width = table["box"]
        assert scroll <= width and table["cut"] == [], (table, picture)
    assert "Full labels and external ids:" in shown
    assert re.search(r"\naudit:links: audit\+links-[0-9a-f]{8}\n", shown), shown


def _created(artifact: Any) -> Any:
    return artifact.created


def _current(cards: list[Any]) -> list[Any]:
    return [a for a in cards if (a.description or "").startswith("try 2, current: ")]


def _seconds(took: str) -> float:
    """``2s``, ``1m`` as seconds (the pages' short form; ``<1s`` has none)."""
    found = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m)", took)
    assert found, took
    return float(found.group(1)) * {"ms": 0.001, "s": 1.0, "m": 60.0}[found.group(2)]
