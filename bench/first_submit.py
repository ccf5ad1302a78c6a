"""From a night's flow run start to its first submit: how long does the night take to begin?

A night of ``command`` jobs, each writing the time its process started (``date +%s.%N``), run
through the nightly flow in a Python process of its own (as a worker runs each flow run: what the
night imports after its start counts), on a Prefect server: Prefect's temporary one and a real
``prefect server start`` (SQLite). The first submit is the earliest such time; the flow run's
start is its ``start_time`` in Prefect's database. Three nights each, per case:

- ``1 job, new ledger``: the night's first, with no budget snapshot yet (it learns one first);
- ``1 job``: a snapshot already there (an earlier night built it);
- ``12 jobs``: the same, twelve jobs (no cap);
- ``1 job-CLI job``: one job of the fake ``agy`` (its ``agy run`` noted by a wrapper as it
  begins: the CLI's own start-up is the service's, not the night's).

Prints the median (min, max) seconds of each, and whether the median is within the 0.5 s asked.

    python bench/first_submit.py [--runs N] [--server temporary|real|both]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

AIM_S = 0.5


def catalogue(jobs: int, marks: Path, cli: bool = False) -> str:
    lines = [
        "name: first-submit",
        "defaults: {poll: {initial: 0.2s, max: 0.5s}, stagger: 0s, deadline: 60s, retries: 0}",
    ]
    if cli:  # the fake job CLI, through a wrapper noting when `agy run` began
        lines.append(f"cli: {{executable: '{agy_wrapper(marks)}'}}")
    lines.append("jobs:")
    for i in range(jobs):
        if cli:
            lines.append(f"  - {{label: job-{i}, backend: cli, task: '[queue=0 run=0.1]'}}")
            continue
        argv = f"[sh, -c, 'date +%s.%N > {marks / f'job-{i}'}']"
        lines.append(f"  - {{label: job-{i}, backend: command, argv: {argv}}}")
    return "\n".join(lines) + "\n"


def agy_wrapper(marks: Path) -> Path:
    """A job CLI that notes when each ``agy run`` began, then is the fake ``agy``."""
    path = marks / "agy"
    path.write_text(
        "#!/bin/sh\n"
        f'[ "$1" = run ] && date +%s.%N > "{marks}/run-$$"\n'
        f'exec "{sys.executable}" -m nightshift.sandbox.agy "$@"\n'
    )
    path.chmod(0o755)
    return path


def one_night(folder: Path, jobs: int, night: str, cli: bool = False) -> float:
    """Seconds from the flow run's start to its first submit."""
    from prefect.client.orchestration import get_client

    marks = folder / f"marks-{night}"
    marks.mkdir(parents=True)
    os.environ["AGY_STATE_DIR"] = str(folder / "agy")
    os.environ["PYTHONPATH"] = str(REPO)
    path = folder / "nightshift.yaml"
    path.write_text(catalogue(jobs, marks, cli))
    # a process of its own, as a worker runs each flow run: what the night imports counts
    code = (
        "import sys; from nightshift.flows.nightly import nightly; "
        "s = nightly(catalog=sys.argv[1], night=sys.argv[2], run_dir=sys.argv[3], "
        "return_state=True); print(s.state_details.flow_run_id)"
    )
    env = {**os.environ, "PREFECT_API_URL": api_url()}
    argv = [sys.executable, "-c", code, str(path), night, str(folder / night)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    flow_run_id = done.stdout.strip().splitlines()[-1]
    with get_client(sync_client=True) as client:
        run = client.read_flow_run(flow_run_id)
    assert run.start_time is not None, "the flow run has no start time"
    first = min(float(p.read_text()) for p in marks.iterdir() if p.name != "agy")
    return first - run.start_time.timestamp()


def api_url() -> str:
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    assert url, "no Prefect server"
    return str(url)


def with_history(path: Path, jobs: int) -> str:
    """A new SQLite ledger holding 30 past nights of ``jobs`` command jobs, no snapshot."""
    from datetime import date

    from nightshift.sandbox.history import Usual, generate, write
    from nightshift.store.ledger import Ledger

    url = f"sqlite:///{path}"
    usual = [Usual(f"job-{i}", "command", (("running", 5.0 + i),)) for i in range(jobs)]
    ledger = Ledger(url, "first-submit")
    try:
        write(ledger, generate(usual, date.today(), 30))
    finally:
        ledger.close()
    return url


def cases(folder: Path, runs: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {
        "1 job, new ledger": [],
        "1 job": [],
        "12 jobs": [],
        "1 job-CLI job": [],
        "12 jobs, 30 nights, no snapshot": [],
    }
    for n in range(runs):
        os.environ["NIGHTSHIFT_DATABASE_URL"] = f"sqlite:///{folder / f'ledger-{n}.db'}"
        out["1 job, new ledger"].append(one_night(folder, 1, f"2000-01-{n + 1:02d}"))
        out["1 job"].append(one_night(folder, 1, f"2000-02-{n + 1:02d}"))
        out["12 jobs"].append(one_night(folder, 12, f"2000-03-{n + 1:02d}"))
        out["1 job-CLI job"].append(one_night(folder, 1, f"2000-04-{n + 1:02d}", cli=True))
        # a month of history and no budget snapshot yet (a new ledger, or a week gone by)
        os.environ["NIGHTSHIFT_DATABASE_URL"] = with_history(folder / f"history-{n}.db", 12)
        case = "12 jobs, 30 nights, no snapshot"
        out[case].append(one_night(folder, 12, f"2000-05-{n + 1:02d}"))
    return out


def measure(folder: Path, runs: int, kind: str) -> None:
    """The nights on the server this process is pointed at; their figures printed."""
    os.environ["NIGHTSHIFT_STATE_DIR"] = str(folder / "state")
    one_night(folder, 1, "1999-12-31")  # the server's and this process's first night
    figures = cases(folder, runs)
    print(f"{kind} server: flow run start -> first submit, {runs} nights each")
    for name, seconds in figures.items():
        median = statistics.median(seconds)
        verdict = "within" if median <= AIM_S else "OVER"
        print(
            f"  {name:<32} median {median:5.2f} s (min {min(seconds):.2f}, "
            f"max {max(seconds):.2f}): {verdict} the {AIM_S} s asked",
            flush=True,
        )


def on_temporary(runs: int) -> None:
    from prefect.testing.utilities import prefect_test_harness

    folder = Path(tempfile.mkdtemp(prefix="nightshift-first-submit-temporary-"))
    with prefect_test_harness(server_startup_timeout=180):
        measure(folder, runs, "temporary")


def on_real(runs: int) -> None:
    """A real server; the nights in a process whose environment names it, as a worker's does."""
    from tests.prefect_processes import prefect_site

    folder = Path(tempfile.mkdtemp(prefix="nightshift-first-submit-real-"))
    with prefect_site(folder / "site") as site:
        env = {**os.environ, **site.env, "PYTHONPATH": str(REPO)}
        argv = [sys.executable, __file__, "--inner", str(folder), "--runs", str(runs)]
        subprocess.run(argv, env=env, check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--server", choices=["temporary", "real", "both"], default="both")
    parser.add_argument("--inner", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"
    if args.inner is not None:
        measure(args.inner, args.runs, "real")
        return 0
    if args.server in ("temporary", "both"):
        on_temporary(args.runs)
    if args.server in ("real", "both"):
        on_real(args.runs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
