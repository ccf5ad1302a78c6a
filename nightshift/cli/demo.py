"""``nightshift demo``: a sandboxed night on local emulators of the external services."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nightshift.cli.args import add_command
from nightshift.cli.demo_slack import SLACK_TOKEN, SLACK_TOKEN_ENV, notify_section, slack_report
from nightshift.config.catalogue import Catalogue, CliJob, CommandJob, HttpJob
from nightshift.config.loader import load_catalogue

if TYPE_CHECKING:
    from nightshift.cli.own_server import OwnServer
    from nightshift.sandbox.history import Usual

__all__ = ["demo_catalogue", "register", "run_demo", "usual_nights"]

ROWS = 12
HISTORY_NIGHTS = 30

CALM = """\
# A sandboxed night: the job CLI is sandbox/agy.py; Gemini and Slack are emulators (sandbox/).
defaults:
  poll: {initial: 0.5s, factor: 2, max: 1s}
  stagger: 0.2s
  deadline: %(deadline)s
  queued_timeout: 10s
limits: {cli: 3}
%(notify)sjobs:
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
  - label: export:orders
    backend: http               # sandbox/jobs_api.py on its in-process queue (no Redis)
    base_url: %(jobs_url)s
    submit: {url: /jobs, body: {task: "export orders for {label}", seconds: %(export_s)s}}
    auth: {env: %(jobs_token)s}
    id_path: job_id
    status_url: "/jobs/{id}"
    state_path: status
    states: {queued: [queued], running: [started], succeeded: [finished], failed: [failed],
             cancelled: [canceled]}
    result_path: result
    error_path: error
    started_at_path: started_at
    finished_at_path: ended_at
    cancel: {url: "/jobs/{id}/cancel"}
    lookup: {url: "/jobs?key={key}", items_path: jobs}
    logs_url: "/jobs/{id}/logs"
    stream_url: "/jobs/{id}/stream"   # its end is heard, not polled
    timeout: learned                  # cancelled past its usual p95 + 30s
    over_expected: 30s
%(extra)s"""

# the demo's job API: its token in a variable set for the demo's process only
JOBS_TOKEN_ENV = "SANDBOX_JOBS_TOKEN"
JOBS_TOKEN = "sandbox-jobs-token"
EXPORT_S = 1.5

# its usual night is [queue=2 run=1] (its month of history says so); tonight it never leaves
# the queue: a watch past the floor under its learned p95 (5 s, FLOOR_S: more than 3 of the
# demo's 1 s polls), an alert past twice that, 10 s after it was seen queued, 4 s before
# queued_timeout ends it (counted from its submit: a loaded machine sees it queued a poll or
# two late, and a margin of 3 s lost the alert there)
ROUGH_EXTRA = """\
  - label: generate:article-c
    backend: cli
    task: "generate article: a topic queued briefly [queue=2 run=1], but not tonight [stuck]"
    queued_timeout: 14s
"""

# the Gemini emulator's batch: 1 emulated minute passes in 0.1 s, so it queues 1 s and runs 2 s
TIME_SCALE = 600
BATCH_QUEUED_S, BATCH_RUNNING_S = 600, 1200


def demo_catalogue(
    scenario: str,
    python: str = sys.executable,
    slack_url: str | None = None,
    jobs_url: str = "http://127.0.0.1:8766",
) -> str:
    """The demo catalogue's text; ``rough`` adds a failing audit, a stuck job, dropped rows.

    ``slack_url``: the Slack emulator's, for a ``notify:`` section (none without it);
    ``jobs_url``: the sandbox job API's.
    """
    rough = scenario == "rough"
    return CALM % {
        "notify": notify_section(slack_url) if slack_url else "",
        "python": json.dumps(python),
        "broken": ", --broken" if rough else "",
        "extra": ROUGH_EXTRA if rough else "",
        # as an uploaded file the results come back keyed, so dropped rows can be named
        "batch_extra": "\n    inline_threshold_rows: 0" if rough else "",
        "deadline": "5m",
        "jobs_url": json.dumps(jobs_url),
        "jobs_token": JOBS_TOKEN_ENV,
        "export_s": EXPORT_S,
    }


# seconds a demo command job usually runs, by script (work.py takes them as its last argument)
_SCRIPT_SECONDS = {"audit_links.py": 0.8}
_STARTUP_S = 0.3  # the job's supervisor and its python process starting


def usual_nights(catalogue: Catalogue) -> list[Usual]:
    """Each demo job's usual night, read from its catalogue entry: its task's times, its argv."""
    from nightshift.sandbox.agy import parse_plan
    from nightshift.sandbox.history import Usual

    states: dict[str, tuple[tuple[str, float], ...]] = {}
    for job in catalogue.jobs:
        if isinstance(job, CliJob):
            plan = parse_plan(job.task)  # its usual times, even on a night it is [stuck]
            states[job.label] = (("queued", plan.queue_s), ("running", plan.run_s))
        elif isinstance(job, CommandJob):
            script = str(job.argv[1]) if len(job.argv) > 1 else ""
            seconds = float(job.argv[-1]) if script == "work.py" else _SCRIPT_SECONDS.get(script, 1)
            states[job.label] = (("running", seconds + _STARTUP_S),)
        elif isinstance(job, HttpJob):
            seconds = float((job.submit.body or {}).get("seconds", EXPORT_S))
            # its in-process queue starts it at once: too short a wait for past polls to see
            states[job.label] = (("running", seconds),)
        else:
            queued, running = BATCH_QUEUED_S / TIME_SCALE, BATCH_RUNNING_S / TIME_SCALE
            states[job.label] = (("queued", queued), ("running", running))
    starts: dict[str, float] = {}

    def start(label: str) -> float:  # after what it needs, plus a poll; else by its stagger
        if label not in starts:
            job = catalogue.job(label)
            after = [start(dep) + sum(s for _, s in states[dep]) + 1.0 for dep in job.depends_on]
            stagger = catalogue.defaults.stagger * catalogue.jobs.index(job)
            starts[label] = max(after, default=stagger)
        return starts[label]

    return [Usual(j.label, j.backend, states[j.label], start(j.label)) for j in catalogue.jobs]


def _seed_history(catalogue: Catalogue, url: str, night: str) -> str:
    """A month of past nights in the sandbox ledger, so tonight's budgets are learned."""
    from datetime import date

    from nightshift.sandbox.history import seed
    from nightshift.store.ledger import Ledger

    ledger = Ledger(url, catalogue.key)
    try:
        seeded = seed(ledger, usual_nights(catalogue), date.fromisoformat(night), HISTORY_NIGHTS)
    finally:
        ledger.close()
    if not seeded:
        return "history: the sandbox ledger already holds the past month; tonight learns from it"
    return (
        f"history: {HISTORY_NIGHTS} past nights of {len(seeded)} jobs seeded into the sandbox "
        "ledger: tonight's budgets are learned"
    )


def _alert_lines(url: str, key: str, night: str, floor_s: float) -> list[str]:
    """Tonight's watches and alerts, as the ledger's alert log keeps them."""
    from nightshift.store.alert_log import DWELL, AlertLog
    from nightshift.store.ledger import Ledger

    ledger = Ledger(url, key)  # brings the schema up to date, the alert log's too
    try:
        rows = AlertLog(ledger.engine).alerts(catalogue=key, night=night)
    finally:
        ledger.close()
    if not rows:
        return ["alerts tonight: none"]
    lines = [f"alerts tonight: {len(rows)}"]
    for row in rows:
        what = row.detail or row.kind  # the watchdog's kinds (stopped, stale, streak) say why
        if row.kind == DWELL and row.p95_s is not None:
            # raised the moment it passed: the dwell then is the limit, so the limit is what to say
            watch = max(row.p95_s, floor_s)
            name = "p95" if row.p95_s >= floor_s else f"the floor (p95 {row.p95_s:.2f}s)"
            times, limit = (1, name) if row.level == "watch" else (2, f"2 x {name}")
            what = f"{row.state} past {limit} = {times * watch:.2f}s"
        at = row.at.strftime("%H:%M:%S UTC")
        lines.append(f"  {row.level:<5}  {row.label}  {what}  at {at}")
    return lines


def _write_input(path: Path) -> None:
    topics = ["waterfall", "bidding", "floors", "adapters", "eCPM", "fill rate"]
    with path.open("w", encoding="utf-8") as fh:
        for i in range(ROWS):
            prompt = f"Summarise AdMob mediation {topics[i % len(topics)]} for app {i}."
            request = {"contents": [{"role": "user", "parts": [{"text": prompt}]}]}
            fh.write(json.dumps({"key": f"app-{i:02d}", "request": request}) + "\n")


def register(sub: Any) -> None:
    """Add ``demo`` to the subcommands."""
    demo = add_command(
        sub, "demo", "a sandboxed night on local emulators, no keys needed", _command
    )
    demo.add_argument(
        "--scenario",
        choices=["calm", "rough"],
        default="calm",
        help="calm: a month of history, then a night where every job succeeds (Slack gets "
        "nothing); rough: a failing audit, a stuck job and a batch's dropped rows (Slack gets "
        "an alert and a digest)",
    )
    demo.add_argument("--workdir", help="where the sandbox lives (default: a temp dir)")
    demo.add_argument("--json", action="store_true", help="print one summary object at the end")


def _command(args: argparse.Namespace) -> int:
    return run_demo(args.scenario, as_json=args.json, workdir=args.workdir)


def run_demo(scenario: str = "calm", *, as_json: bool = False, workdir: str | None = None) -> int:
    """Set up the sandbox, start the emulators, run one night, return its exit code."""
    # the demo never touches the user's Prefect server or profile: a Prefect home of its own
    # (kept between demos, so the temporary server's database is not rebuilt every time)
    home = Path(tempfile.gettempdir()) / "nightshift-demo-prefect"
    os.environ["PREFECT_HOME"] = str(home)
    os.environ.pop("PREFECT_PROFILE", None)
    # the sandbox's own ledger: its made-up history must never reach a real one
    os.environ.pop("NIGHTSHIFT_DATABASE_URL", None)
    from nightshift.cli.own_server import OwnServer
    from nightshift.sandbox.slack_emulator import SlackEmulator

    # the demo's temporary server (most of its start) starts first, up beside the sandbox's
    # making; Prefect is imported after this, its API there
    with OwnServer(home / "server.log") as server, SlackEmulator(SLACK_TOKEN) as slack:
        code, root = _run_sandboxed(scenario, as_json, workdir, slack.base_url, server)
        report = slack_report(slack.messages, root / "slack.json")
    if not as_json:
        print("\n".join(report), file=sys.stderr)
    return code


def _run_sandboxed(
    scenario: str, as_json: bool, workdir: str | None, slack_url: str, server: OwnServer
) -> tuple[int, Path]:
    """The sandbox folder, the job API, its history, the emulators and the night: its exit code."""
    from nightshift.sandbox.jobs_api import JobApi

    root = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="nightshift-demo-"))
    root.mkdir(parents=True, exist_ok=True)
    import nightshift.sandbox as sandbox  # in the wheel: the demo works wherever installed

    for asset in (Path(sandbox.__file__).resolve().parent / "demo").glob("*.py"):
        shutil.copy(asset, root / asset.name)
    _write_input(root / "admob.jsonl")
    jobs_api = JobApi(redis_url=None, tokens={JOBS_TOKEN: "demo"}).start()  # in-process queue
    try:
        code, root = _run_with_jobs_api(
            scenario, as_json, root, slack_url, jobs_api.base_url, server
        )
        stats = jobs_api.stats
    finally:
        jobs_api.stop()
    if not as_json:
        print(
            f"job API: {stats.get('created', 0)} job(s) created, {stats.get('stream', 0)} "
            f"listened to (SSE), {stats.get('status', 0)} status call(s)",
            file=sys.stderr,
        )
    return code, root


def _run_with_jobs_api(
    scenario: str,
    as_json: bool,
    root: Path,
    slack_url: str,
    jobs_url: str,
    server: OwnServer,
) -> tuple[int, Path]:
    """The rest of the sandboxed night, the job API running at ``jobs_url``, the demo's
    Prefect server starting up (``server``)."""
    from nightshift.budgets.lookup import dwell_floor
    from nightshift.cli import exits
    from nightshift.cli.run import run_catalogue
    from nightshift.engine.plan import tonight
    from nightshift.sandbox.gemini_emulator import BatchScript, GeminiEmulator

    catalogue = root / "nightshift.yaml"
    text = demo_catalogue(scenario, slack_url=slack_url, jobs_url=jobs_url)
    catalogue.write_text(text, encoding="utf-8")
    night, url = tonight(), f"sqlite:///{(root / 'state' / 'ledger.sqlite3').resolve()}"
    (root / "state").mkdir(exist_ok=True)
    loaded = load_catalogue(catalogue)
    history = _seed_history(loaded, url, night)

    emulator = GeminiEmulator(time_scale=TIME_SCALE, api_key="sandbox-key")
    drop = 3 if scenario == "rough" else 0
    script = BatchScript(queued_s=BATCH_QUEUED_S, running_s=BATCH_RUNNING_S, drop_rows=drop)
    emulator.script_batch("report:admob-mediation", script)
    env = {
        "NIGHTSHIFT_STATE_DIR": str(root / "state"),
        "NIGHTSHIFT_AGY": f"{sys.executable} -m nightshift.sandbox.agy",
        "AGY_STATE_DIR": str(root / "agy"),
        "GEMINI_API_KEY": "sandbox-key",
        SLACK_TOKEN_ENV: SLACK_TOKEN,  # jobs never see it: a TOKEN is dropped from their env
        JOBS_TOKEN_ENV: JOBS_TOKEN,
        "NO_PROXY": "127.0.0.1,localhost",
    }
    with emulator:
        env["NIGHTSHIFT_GEMINI_BASE_URL"] = emulator.base_url
        os.environ.update(env)
        if not as_json:
            print(
                f"sandbox: {root}  (gemini emulator at {emulator.base_url}, "
                f"slack emulator at {slack_url}, job API at {jobs_url})",
                file=sys.stderr,
            )
            print(history, file=sys.stderr)
        import nightshift.flows.nightly  # noqa: F401  (Prefect's imports, while the server starts)

        if (problem := server.ready()) is not None:
            exits.say(f"cannot reach the Prefect API: {problem}")
            return exits.NO_PREFECT, root
        code = run_catalogue(str(catalogue), as_json=as_json, night=night)
    if not as_json:
        print(f"batch output: {root / 'out' / 'admob.jsonl'}", file=sys.stderr)
        floor_s = dwell_floor(loaded.defaults.poll.max)
        print("\n".join(_alert_lines(url, loaded.key, night, floor_s)), file=sys.stderr)
    return code, root
