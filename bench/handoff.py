"""Slot handoff on a capped backend: one 12 s job and six 2 s jobs, ``limits: {cli: 2}``.

The ideal makespan is the 12 s job alone on one slot while the six 2 s jobs follow each other
on the other (12 s, plus a submit). A first night teaches the ledger the jobs' durations (so the
second starts the longest first); then the same night runs twice on one temporary Prefect
server: "before" with the parts as they were (the Prefect slot taken by ``concurrency()`` on
Prefect's retry timer, each job polled on its backoff only, a slot freed once its job is
recorded), and "after" with tonight's (the night's gate hands a freed slot on as soon as the
watcher sees the end, its Prefect lease handed on by the night itself, a job polled at its
expected end).

Measured on 2 shared, busy cores (temporary SQLite Prefect server, default poll 2 s x2 up to
30 s, stagger 0.5 s): before 18.8-19.7 s (ratio 1.54-1.62, a handoff 1.6 s on average, up to
2.6 s), after 12.6-12.7 s (ratio 1.03-1.04, a handoff 0.06-0.07 s; 13.2-13.9 s until
2026-12-06: the night's first two slot requests met at the server, one was answered 503 and
taken again on the Prefect client's retry 2 s later, and the long job then started late half
the time; they go one at a time now). What is left: the stagger before the second submission
(0.5 s), each fake-CLI call being a new Python process (about 0.1 s a submit and a look).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path
from typing import Any

LONG, SHORT, SHORTS = 12.0, 2.0, 6


def catalogue_yaml(poll: str | None) -> str:
    lines = ["defaults:", "  retries: 0", "  deadline: 120s", "  queued_timeout: 60s"]
    if poll:
        lines.append(f"  poll: {poll}")
    lines += ["limits: {cli: 2}", "jobs:"]
    lines.append(f"  - {{label: long, backend: cli, task: 'long [queue=0 run={LONG:g}]'}}")
    for i in range(SHORTS):
        task = f"short [queue=0 run={SHORT:g}]"
        lines.append(f"  - {{label: short-{i}, backend: cli, task: '{task}'}}")
    return "\n".join(lines) + "\n"


def run_night(catalog: Path, night: str, run_dir: Path) -> dict[str, Any]:
    """One night of the flow; its makespan from the ledger (first submit to last end)."""
    from nightshift.config.settings import load_settings
    from nightshift.flows.nightly import nightly
    from nightshift.store.ledger import Ledger

    t0 = time.monotonic()
    nightly(catalog=str(catalog), run_dir=str(run_dir), night=night, return_state=True)
    wall = time.monotonic() - t0
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    bad = [j["label"] for j in summary["jobs"] if j["state"] != "succeeded"]
    ledger = Ledger(load_settings().ledger_url(), str(catalog.resolve()))
    try:
        records = [ledger.get_job(night, j["label"]) for j in summary["jobs"]]
        rows = [row for j in summary["jobs"] for row in ledger.dwells(night, j["label"])]
    finally:
        ledger.close()
    # each handoff: from a job's end (as its backend dates it) to the next submit it let in
    ends = sorted(r.at for r in rows if r.to_state == "succeeded")
    starts = sorted(r.at for r in rows if r.to_state == "submitting")[2:]  # after the cap's two
    gaps = [(s - max(e for e in ends if e <= s)).total_seconds() for s in starts]
    long_start = next(r.at for r in rows if r.label == "long" and r.to_state == "submitting")
    first = min(r.submitted_at for r in records if r and r.submitted_at)
    last = max(r.finished_at for r in records if r and r.finished_at)
    order = sorted(
        (r for r in records if r and r.submitted_at), key=lambda r: r.submitted_at or first
    )
    return {
        "makespan": (last - first).total_seconds(),
        "wall": wall,
        "bad": bad,
        "order": [r.label for r in order],
        "handoffs": gaps,
        "long_late": (long_start - min(r.at for r in rows)).total_seconds(),
    }


def legacy_parts() -> ExitStack:
    """Swap in the parts as they were before the handoff work (the "before" run).

    The Prefect slot by ``concurrency()`` on Prefect's retry timer, no poll hints (each job on
    its backoff only), and no early hand-on (a slot freed once its job is recorded).
    """
    from dataclasses import replace

    from nightshift.engine.admission import Admission
    from nightshift.orchestration import limits
    from nightshift.orchestration import night_run as nightly_module

    def old_slots(caps: Any, scope: str | None = None, *_: Any) -> Any:
        from contextlib import nullcontext

        from prefect.concurrency.sync import concurrency

        limits.upsert_limits(caps, scope=scope)  # the limits made the same way

        def hold(backend: str, timeout_s: float) -> AbstractContextManager[object]:
            if backend not in caps:
                return nullcontext()
            name = limits.limit_name(backend, scope)
            return concurrency(name, occupy=1, strict=False, timeout_seconds=max(timeout_s, 0.1))

        return hold

    build_parts = nightly_module.build_parts

    def old_parts(*args: Any, **kwargs: Any) -> Any:
        return replace(build_parts(*args, **kwargs), poll_hints=None)

    saved = (nightly_module.night_slots, build_parts, Admission.free)
    nightly_module.night_slots = old_slots  # type: ignore[assignment]
    nightly_module.build_parts = old_parts
    Admission.free = lambda self, backend, priority: False  # type: ignore[method-assign]

    def restore() -> None:
        nightly_module.night_slots, nightly_module.build_parts, Admission.free = saved  # type: ignore[method-assign]

    stack = ExitStack()
    stack.callback(restore)
    return stack


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--poll", default=None, help="the catalogue's poll, e.g. '{initial: 0.5s}'")
    parser.add_argument("--only", choices=["before", "after"], default=None)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="nightshift-handoff-"))
    os.environ["NIGHTSHIFT_STATE_DIR"] = str(tmp / "state")
    os.environ.pop("NIGHTSHIFT_DATABASE_URL", None)
    os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"
    os.environ["NIGHTSHIFT_AGY"] = f"{sys.executable} -m nightshift.sandbox.agy"
    os.environ["AGY_STATE_DIR"] = str(tmp / "agy")
    os.environ["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    catalog = tmp / "nightshift.yaml"
    catalog.write_text(catalogue_yaml(args.poll), encoding="utf-8")

    from prefect.testing.utilities import prefect_test_harness

    ideal = LONG + 0.2  # the long job alone, plus a submit
    print(f"starting a temporary Prefect server; state in {tmp}", flush=True)
    results: dict[str, dict[str, Any]] = {}
    with prefect_test_harness(server_startup_timeout=120):
        first = run_night(catalog, "2000-01-01", tmp / "run-learn")
        print(f"learning night: makespan {first['makespan']:.2f} s", flush=True)
        for n, mode in enumerate(("before", "after")):
            if args.only and mode != args.only:
                continue
            with legacy_parts() if mode == "before" else ExitStack():
                results[mode] = run_night(catalog, f"2000-01-0{n + 2}", tmp / f"run-{mode}")
            print(f"{mode}: makespan {results[mode]['makespan']:.2f} s", flush=True)
    jobs = f"one {LONG:g} s job, {SHORTS} jobs of {SHORT:g} s"
    print(f"\nlimits {{cli: 2}}; {jobs}; poll {args.poll or 'the default (2s x2 up to 30s)'}")
    print(f"ideal (the long job alone, plus a submit)  {ideal:6.2f} s")
    for mode, r in results.items():
        note = f"  NOT ALL SUCCEEDED: {r['bad']}" if r["bad"] else ""
        gaps = r["handoffs"]
        print(
            f"{mode:<7} makespan {r['makespan']:6.2f} s  ratio to ideal {r['makespan'] / ideal:.2f}"
            f"  handoff (a job's end -> the next submit) mean {sum(gaps) / len(gaps):.2f} s,"
            f" max {max(gaps):.2f} s{note}"
        )
        print(
            f"        flow call {r['wall']:.1f} s; the long job began {r['long_late']:.2f} s"
            f" after the first; submit order {' '.join(r['order'])}"
        )
    return 1 if any(r["bad"] for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
