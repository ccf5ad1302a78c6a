"""Measure one night's fan-out: makespan vs. the slowest job and vs. the serial sum of jobs.

``--backend cli`` runs the jobs through the fake job CLI (sandbox/agy.py) with a queue timer
shorter than every job, and prints the status calls the CLI saw per job against what each
job's backoff allows.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from nightshift.backoff import Backoff

POLL = Backoff(initial=0.2, factor=2, max=1.0)
STAGGER = 0.05


def sleeps(n: int, scale: float) -> list[float]:
    """n sleep lengths spread evenly from 1 s to 6 s, times scale."""
    return [round(scale * (1 + 5 * i / max(1, n - 1)), 3) for i in range(n)]


def catalogue_yaml(secs: list[float], backend: str = "command") -> str:
    deadline = 60 + 10 * max(secs)
    # hostile for the cli run: every job runs far longer than the queue timer
    queued_timeout = 1 if backend == "cli" else deadline
    lines = [
        "defaults:",
        f"  poll: {{initial: {POLL.initial}s, factor: {POLL.factor}, max: {POLL.max}s}}",
        f"  stagger: {STAGGER}s",
        "  retries: 0",
        f"  deadline: {deadline}s",
        f"  queued_timeout: {queued_timeout}s",
        "jobs:",
    ]
    for i, s in enumerate(secs):
        if backend == "cli":
            lines.append(
                f"  - {{label: job-{i:02d}, backend: cli, task: 'work [queue=0 run={s}]'}}"
            )
            continue
        argv = f"[{json.dumps(sys.executable)}, -c, 'import time; time.sleep({s})']"
        lines.append(f"  - {{label: job-{i:02d}, backend: command, argv: {argv}}}")
    return "\n".join(lines) + "\n"


def backoff_checks(seconds: float) -> int:
    """Status checks a job of ``seconds`` gets on its own backoff (POLL), the last one seeing
    it finished."""
    t, n = 0.0, 0
    while t < seconds:
        t += POLL.delay(n)
        n += 1
    return n


def print_status_calls(call_log: Path, records: list[object], secs: list[float]) -> None:
    """What the job CLI saw: listing calls, single gets per job, against the backoff."""
    calls = [json.loads(line) for line in call_log.read_text(encoding="utf-8").splitlines()]
    lists = sum(1 for c in calls if c[:2] == ["jobs", "list"])
    gets: dict[str, int] = {}
    for c in calls:
        if c[:2] == ["jobs", "get"]:
            gets[c[2]] = gets.get(c[2], 0) + 1
    per_job = [gets.get(getattr(r, "external_id", None) or "", 0) for r in records]
    allowed = sum(backoff_checks(s) for s in secs)
    print(f"\nstatus calls the job CLI saw: {lists} `jobs list`, {sum(per_job)} `jobs get`")
    print(f"`jobs get` per job: max {max(per_job)}, mean {sum(per_job) / len(per_job):.1f}")
    print(f"checks all jobs' backoffs allow (sum)  {allowed}")
    print(f"status calls / jobs' backoff checks    {(lists + sum(per_job)) / allowed:.2f}")
    print(f"status calls per job                   {(lists + sum(per_job)) / len(secs):.1f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=12, help="independent jobs (default 12)")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every sleep (1-6 s)")
    parser.add_argument("--backend", choices=["command", "cli"], default="command")
    args = parser.parse_args()
    secs = sleeps(args.jobs, args.scale)
    tmp = Path(tempfile.mkdtemp(prefix="nightshift-bench-"))
    os.environ["NIGHTSHIFT_STATE_DIR"] = str(tmp / "state")
    os.environ.pop("NIGHTSHIFT_DATABASE_URL", None)
    os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"
    catalog = tmp / "nightshift.yaml"
    catalog.write_text(catalogue_yaml(secs, args.backend), encoding="utf-8")
    call_log = tmp / "agy-calls.jsonl"
    os.environ["NIGHTSHIFT_AGY"] = f"{sys.executable} -m sandbox.agy"
    os.environ["AGY_STATE_DIR"] = str(tmp / "agy")
    os.environ["AGY_CALL_LOG"] = str(call_log)
    os.environ["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])

    from prefect.testing.utilities import prefect_test_harness

    from flows.nightly import nightly
    from nightshift.config.settings import load_settings
    from nightshift.store.ledger import Ledger

    night, run_dir = "2000-01-01", tmp / "run"
    print(f"starting a temporary Prefect server; catalogue and state in {tmp}", flush=True)
    with prefect_test_harness(server_startup_timeout=120):
        t0 = time.monotonic()
        state = nightly(catalog=str(catalog), run_dir=str(run_dir), night=night, return_state=True)
        flow_wall = time.monotonic() - t0
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    jobs = summary["jobs"]
    bad = [j["label"] + ": " + j["state"] for j in jobs if j["state"] != "succeeded"]
    if bad:
        print(f"flow state {state.type.value}; not all jobs succeeded: {bad}", file=sys.stderr)
        return 1
    ledger = Ledger(load_settings().ledger_url(), str(catalog.resolve()))
    records = [ledger.get_job(night, j["label"]) for j in jobs]
    ledger.close()
    first_submit = min(r.submitted_at for r in records if r and r.submitted_at)
    last_end = max(r.finished_at for r in records if r and r.finished_at)
    makespan = (last_end - first_submit).total_seconds()
    spans = [(r.finished_at - r.submitted_at).total_seconds() for r in records if r]
    durations = [j["duration_s"] for j in jobs]
    slowest = max(jobs, key=lambda j: j["duration_s"])
    serial = sum(durations)

    kind = "job-CLI jobs (sandbox/agy.py)" if args.backend == "cli" else "command jobs (sleep S)"
    print(f"\n{len(jobs)} independent {kind}, one night")
    print(f"chosen sleeps (s): {secs}")
    print(f"measured duration_s: {[round(d, 2) for d in durations]}")
    print(
        f"poll policy: initial {POLL.initial}s x{POLL.factor} up to {POLL.max}s, "
        f"stagger {STAGGER}s; polling adds up to one poll interval of latency per job"
    )
    print("duration_s = from the job's turn to submit (before the spawn) to its recorded end")
    print("makespan   = ledger: first job's submitted_at -> last job's finished_at")
    print("(duration_s includes the spawn, which the ledger's submitted_at does not)")
    print(f"\nmakespan                       {makespan:8.2f} s")
    print(f"slowest job (measured)         {slowest['duration_s']:8.2f} s  ({slowest['label']})")
    print(f"slowest job (ledger span)      {max(spans):8.2f} s  (submitted_at -> finished_at)")
    print(f"slowest job (chosen sleep)     {max(secs):8.2f} s")
    print(f"serial sum (measured)          {serial:8.2f} s")
    print(f"serial sum (chosen sleeps)     {sum(secs):8.2f} s")
    print(f"flow call wall time            {flow_wall:8.2f} s  (includes Prefect/flow overhead)")
    print(f"summary.json started->finished {summary['started_at']} -> {summary['finished_at']}")
    print(f"\nmakespan / slowest job (measured)  {makespan / slowest['duration_s']:.2f}")
    print(f"makespan / slowest ledger span     {makespan / max(spans):.2f}")
    print(f"makespan / slowest sleep           {makespan / max(secs):.2f}")
    print(f"serial sum (measured) / makespan   {serial / makespan:.2f}")
    print(f"serial sum (sleeps) / makespan     {sum(secs) / makespan:.2f}")
    if args.backend == "cli":
        print_status_calls(call_log, records, secs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
