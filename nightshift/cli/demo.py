"""``nightshift demo``: a sandboxed night on local emulators of the external services."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

__all__ = ["demo_catalogue", "run_demo"]

ROWS = 12

CALM = """\
# A sandboxed night: the job CLI is sandbox/agy.py, Gemini is sandbox/gemini_emulator.py.
defaults:
  poll: {initial: 0.5s, factor: 2, max: 2s}
  stagger: 0.2s
  deadline: %(deadline)s
  queued_timeout: 10s
limits: {cli: 3}
jobs:
  - label: generate:article-a
    backend: cli
    task: "generate article: antigravity cli async jobs [queue=0.5 run=3]"
  - label: generate:article-b
    backend: cli
    task: "generate article: prefect fan-out patterns [queue=0.3 run=2]"
  - label: link:article-a
    backend: command
    argv: [%(python)s, work.py, link-article-a, "0.5"]
    depends_on: [generate:article-a]
  - label: audit:internal-links
    backend: command
    argv: [%(python)s, audit_links.py%(broken)s]
  - label: reindex:search
    backend: command
    argv: [%(python)s, work.py, reindex, "2"]
  - label: rollup:costs
    backend: command
    argv: [%(python)s, work.py, cost-rollup, "1"]
  - label: report:admob-mediation
    backend: gemini_batch
    model: gemini-2.5-flash
    input: admob.jsonl
    output: out/admob.jsonl
    sla: 24h
    fallback: on_demand%(batch_extra)s
%(extra)s"""

ROUGH_EXTRA = """\
  - label: generate:article-c
    backend: cli
    task: "generate article: a topic the queue never gets to [stuck]"
    queued_timeout: 4s
"""


def demo_catalogue(scenario: str, python: str = sys.executable) -> str:
    """The demo catalogue's text; ``rough`` adds a failing audit, a stuck job, dropped rows."""
    rough = scenario == "rough"
    return CALM % {
        "python": json.dumps(python),
        "broken": ", --broken" if rough else "",
        "extra": ROUGH_EXTRA if rough else "",
        # as an uploaded file the results come back keyed, so dropped rows can be named
        "batch_extra": "\n    inline_threshold_rows: 0" if rough else "",
        "deadline": "5m",
    }


def _write_input(path: Path) -> None:
    topics = ["waterfall", "bidding", "floors", "adapters", "eCPM", "fill rate"]
    with path.open("w", encoding="utf-8") as fh:
        for i in range(ROWS):
            prompt = f"Summarise AdMob mediation {topics[i % len(topics)]} for app {i}."
            request = {"contents": [{"role": "user", "parts": [{"text": prompt}]}]}
            fh.write(json.dumps({"key": f"app-{i:02d}", "request": request}) + "\n")


def run_demo(scenario: str = "calm", *, as_json: bool = False, workdir: str | None = None) -> int:
    """Set up the sandbox, start the emulators, run one night, return its exit code."""
    # the demo never touches the user's Prefect server or profile: a Prefect home of its own
    # (kept between demos, so the temporary server's database is not rebuilt every time)
    os.environ["PREFECT_HOME"] = str(Path(tempfile.gettempdir()) / "nightshift-demo-prefect")
    os.environ.pop("PREFECT_API_URL", None)
    os.environ.pop("PREFECT_PROFILE", None)
    from nightshift.cli.main import run_catalogue
    from sandbox.gemini_emulator import BatchScript, GeminiEmulator

    root = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="nightshift-demo-"))
    root.mkdir(parents=True, exist_ok=True)
    import sandbox  # shipped beside nightshift: the demo works wherever it is installed

    for asset in (Path(sandbox.__file__).resolve().parent / "demo").glob("*.py"):
        shutil.copy(asset, root / asset.name)
    _write_input(root / "admob.jsonl")
    catalogue = root / "nightshift.yaml"
    catalogue.write_text(demo_catalogue(scenario), encoding="utf-8")

    # 1 emulated minute passes in 0.1 s: a batch that queues 10 min and runs 20 min takes 3 s
    emulator = GeminiEmulator(time_scale=600, api_key="sandbox-key")
    script = BatchScript(queued_s=600, running_s=1200, drop_rows=3 if scenario == "rough" else 0)
    emulator.script_batch("report:admob-mediation", script)
    env = {
        "NIGHTSHIFT_STATE_DIR": str(root / "state"),
        "NIGHTSHIFT_AGY": f"{sys.executable} -m sandbox.agy",
        "AGY_STATE_DIR": str(root / "agy"),
        "GEMINI_API_KEY": "sandbox-key",
        "NO_PROXY": "127.0.0.1,localhost",
    }
    with emulator:
        env["NIGHTSHIFT_GEMINI_BASE_URL"] = emulator.base_url
        os.environ.update(env)
        if not as_json:
            print(f"sandbox: {root}  (gemini emulator at {emulator.base_url})", file=sys.stderr)
        code = run_catalogue(str(catalogue), as_json=as_json)
    if not as_json:
        print(f"batch output: {root / 'out' / 'admob.jsonl'}", file=sys.stderr)
    return code
