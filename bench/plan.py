"""``nightshift plan`` on a big catalogue with a month of history: is it under 2 s?

Builds in a temporary folder a catalogue of ``--jobs`` jobs (1,000: two thirds ``cli``, the rest
``command``, ``limits: {cli: 8}``, one job in four a step of a ``depends_on`` chain of 2 or 3
steps) and a SQLite ledger holding ``--nights`` (30) past nights of every job, made by
``nightshift.sandbox.history`` (each job's usual state lengths drawn once from a fixed seed, each
night log-normal around them, as the night writes its transitions and job rows). The budget
snapshot is built once beforehand, as the weekly budgets flow or ``nightshift budgets
--rebuild`` does (``build_snapshot``), so the timed runs measure the plan, not the learning.
Prints:

- ``nightshift plan --catalogue F --json`` as a subprocess (start-up and imports included,
  ``NIGHTSHIFT_STATE_DIR`` / ``NIGHTSHIFT_DATABASE_URL`` naming the temporary ledger), the
  median, min and max of ``--runs`` runs, and whether the median is under the 2 s asked;
- the same plan in this process, split: the catalogue load, the ledger's recent durations and
  the plan's order, the budgets read (the latest snapshot), the simulation (``durations_of`` and
  ``forecast``), and the rendering (``--json``'s object, and the rich table);
- ``python -c "import nightshift.cli.main"``: the start-up every command pays.

Both subprocess timings are made twice: as this environment runs Python (with
``PYTHONDONTWRITEBYTECODE`` set, as in the sandbox, every process compiles its few hundred
modules from source again), and with bytecode cached (``PYTHONPYCACHEPREFIX`` in the temporary
folder, one run first to fill it), as an installed Nightshift starts after its first run.

    python bench/plan.py [--jobs N] [--nights N] [--runs N] [--seed N]

``--accuracy`` measures the forecast instead (issue 45): per seed, 30 nights of history seeded
in a ledger (each job's durations log-normal around its own mean, a chain's step submitted a
hand-off after the step before it ended), then a night with two chains and ``limits: {cli: 2}``
run through the engine on fake backends with durations drawn from the same distributions, on a
fake clock (``tests/forecast_night.py``). Prints, per night, the forecast p50 finish's error
against the actual finish as the night forecasts itself now (its learned hand-offs counted) and
as it did before (the spans alone), and whether its p95 stayed above the finish.

    python bench/plan.py --accuracy [--seeds N]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from nightshift.backoff import Backoff  # noqa: E402
from nightshift.budgets.current import build_snapshot, current_budgets  # noqa: E402
from nightshift.cli import plan as plan_cli  # noqa: E402
from nightshift.cli.plan_money import plan_money  # noqa: E402
from nightshift.config.loader import load_catalogue  # noqa: E402
from nightshift.engine.forecast import durations_of, forecast  # noqa: E402
from nightshift.engine.plan import expected_durations, plan_night  # noqa: E402
from nightshift.sandbox.history import Habits, Usual, generate, write  # noqa: E402
from nightshift.store.ledger import Ledger  # noqa: E402

NAME = "bench-plan"
AIM_S = 2.0
CLI_SHARE = 2 / 3
CHAINED_SHARE = 1 / 4
# the past nights' polling: up to a minute apart, so a long state is tens of polls, not hundreds
HABITS = Habits(poll=Backoff(initial=5.0, factor=2.0, max=60.0))


def jobs_of(n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` jobs: label, backend, depends_on; the last quarter or so in chains of 2-3 steps."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    free = n - int(n * CHAINED_SHARE)
    for i in range(free):
        backend = "cli" if rng.random() < CLI_SHARE else "command"
        out.append({"label": f"job-{i:04d}", "backend": backend, "depends_on": []})
    while len(out) < n:
        steps = min(rng.choice((2, 3)), n - len(out))
        before: list[str] = []
        for _ in range(steps):
            label = f"job-{len(out):04d}"
            backend = "cli" if rng.random() < CLI_SHARE else "command"
            out.append({"label": label, "backend": backend, "depends_on": before})
            before = [label]
    return out


def catalogue_text(jobs: list[dict[str, Any]]) -> str:
    lines = [f"name: {NAME}", "defaults: {deadline: 8h}", "limits: {cli: 8}", "jobs:"]
    for job in jobs:
        own = f"task: {job['label']}" if job["backend"] == "cli" else "argv: [echo, hi]"
        after = f", depends_on: [{job['depends_on'][0]}]" if job["depends_on"] else ""
        lines.append(f"  - {{label: {job['label']}, backend: {job['backend']}, {own}{after}}}")
    return "\n".join(lines) + "\n"


def usual_of(jobs: list[dict[str, Any]], seed: int) -> list[Usual]:
    """Each job's usual night, drawn once: a cli job queues then runs, a command only runs."""
    rng = random.Random(seed + 1)
    out = []
    for job in jobs:
        running = 60 * 10 ** rng.uniform(0, 1.3)  # 1 to 20 minutes, log-uniform
        states: tuple[tuple[str, float], ...] = (("running", running),)
        if job["backend"] == "cli":
            states = (("queued", rng.uniform(5, 120)), *states)
        out.append(Usual(job["label"], job["backend"], states))
    return out


def seed_ledger(url: str, usual: list[Usual], nights: int, now: datetime) -> tuple[int, int]:
    """Write the past nights and build the budget snapshot once; (transitions, dwells)."""
    ledger = Ledger(url, NAME)
    try:
        history = generate(usual, now.date(), nights, HABITS)
        write(ledger, history)
        snapshot = build_snapshot(ledger, now)
    finally:
        ledger.close()
    return len(history.transitions), snapshot.info.dwells


def cli_times(path: Path, env: dict[str, str], runs: int) -> tuple[list[float], dict[str, Any]]:
    """``nightshift plan --json`` as a subprocess, ``runs`` times; the times and the last answer."""
    script = Path(sys.executable).parent / "nightshift"
    head = [str(script)] if script.exists() else [sys.executable, "-m", "nightshift"]
    times, answer = [], {}
    for _ in range(runs):
        t0 = time.perf_counter()
        done = subprocess.run(
            [*head, "plan", "--catalogue", str(path), "--json"],
            env=env,
            capture_output=True,
            text=True,
        )
        times.append(time.perf_counter() - t0)
        assert done.returncode == 0, done.stderr[-2000:]
        answer = json.loads(done.stdout)
    return times, answer


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def split(path: Path, url: str) -> dict[str, float]:
    """One plan in this process, as ``nightshift plan`` makes it, each step timed."""
    gc.collect()
    now = datetime.now(UTC)
    steps: dict[str, float] = {}
    catalogue, steps["catalogue load"] = timed(lambda: load_catalogue(path))
    ledger, steps["ledger open"] = timed(lambda: Ledger(url, catalogue.key))
    try:
        labels = [j.label for j in catalogue.jobs]
        plan, steps["recent durations + plan order"] = timed(
            lambda: plan_night(catalogue, labels, expected_durations(catalogue, ledger, now))
        )
        budgets, steps["budgets read (snapshot)"] = timed(
            lambda: current_budgets(ledger, now, catalogue.defaults.min_samples)
        )
        learned, steps["costs read (job_costs)"] = timed(
            lambda: ledger.job_costs(labels, now - timedelta(days=30))
        )
    finally:
        ledger.close()
    start, _ = plan_cli.scheduled_start(path, None, now)

    def simulate() -> Any:
        return forecast(
            plan,
            {x: catalogue.job(x).backend for x in plan.labels},
            durations_of(budgets, catalogue, plan.labels),
            start=start,
            deadline_s=catalogue.defaults.deadline,
            caps=catalogue.caps,
            stagger=catalogue.defaults.stagger,
            rates=catalogue.rates,
        )

    result, steps["simulation (durations_of + forecast)"] = timed(simulate)
    money, steps["cost, cap and finish_by"] = timed(
        lambda: plan_money(catalogue, result, learned, UTC)
    )
    _, steps["render --json"] = timed(
        lambda: json.dumps(plan_cli._as_json(result, "now", [], [], money))
    )
    with contextlib.redirect_stdout(io.StringIO()):
        _, steps["render table (rich)"] = timed(
            lambda: plan_cli._print(result, "now", [], [], money)
        )
    return steps


def import_times(env: dict[str, str], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-c", "import nightshift.cli.main"], check=True, cwd=REPO, env=env
        )
        out.append(time.perf_counter() - t0)
    return out


def row(what: str, times: list[float]) -> str:
    ms = [t * 1000 for t in times]
    return (
        f"  {what:<46} median {statistics.median(ms):7.0f} ms"
        f"  (min {min(ms):.0f}, max {max(ms):.0f}, n={len(ms)})"
    )


ACCURACY_AIM_PCT = 5.0


def accuracy(seeds: int) -> int:
    """The forecast against ``seeds`` nights run on fake backends (``--accuracy``)."""
    from nightshift.loop import NightLoop
    from tests.forecast_night import TWO_CHAINS, TWO_CHAINS_MEANS, measure_night

    print(
        "a night of 14 jobs: two chains of three, limits {cli: 2}; 30 nights of history each;\n"
        "error = actual finish - forecast p50 finish, in % of the night: the forecast as made\n"
        "(now: with the night's learned hand-offs; before: the spans alone), and replayed with\n"
        "tonight's own durations (the draws' luck taken out: the model's own error)"
    )
    print(
        f"  {'seed':>4} {'night':>7} {'now':>7} {'before':>7} {'replayed':>9} {'before':>7}"
        "  p95 above"
    )
    now_off: list[float] = []
    before_off: list[float] = []
    model: list[float] = []
    model_before: list[float] = []
    lengths: list[float] = []
    p95_held = 0
    for seed in range(1, seeds + 1):
        with (
            tempfile.TemporaryDirectory(prefix="nightshift-accuracy-") as tmp,
            NightLoop("bench-night") as loop,
        ):
            night = measure_night(Path(tmp), TWO_CHAINS, TWO_CHAINS_MEANS, loop, seed)
        assert night.exit_code == 0 and night.check.finished is not None
        lengths.append(night.length_s)
        pct = 100.0 / night.length_s
        now, before = night.off_s(night.made) * pct, night.off_s(night.unaided) * pct
        replayed = night.replayed_off_s(gaps=True) * pct
        replayed_before = night.replayed_off_s(gaps=False) * pct
        held = night.made.finish_p95 >= night.check.finished
        p95_held += held
        now_off.append(abs(now))
        before_off.append(abs(before))
        model.append(abs(replayed))
        model_before.append(abs(replayed_before))
        print(
            f"  {seed:>4} {night.length_s:>6.0f}s {now:>+6.1f}% {before:>+6.1f}%"
            f" {replayed:>+8.2f}% {replayed_before:>+6.2f}%  {'yes' if held else 'NO'}"
        )
    within = sum(1 for x in now_off if x <= ACCURACY_AIM_PCT)
    spread = 100.0 * statistics.stdev(lengths) / statistics.mean(lengths) if seeds > 1 else 0.0
    print(
        f"the nights' own spread: their finish varies by {spread:.1f} % (one standard deviation"
        " of their lengths): what no p50 can take out"
    )
    print(
        f"median |error| as made: now {statistics.median(now_off):.1f} %, before"
        f" {statistics.median(before_off):.1f} %; worst now {max(now_off):.1f} %, before"
        f" {max(before_off):.1f} %"
    )
    print(
        f"median |error| replayed: now {statistics.median(model):.2f} %, before"
        f" {statistics.median(model_before):.2f} %"
    )
    print(
        f"p50 within {ACCURACY_AIM_PCT:.0f} % of the finish: {within} of {seeds} nights; p95"
        f" above the finish: {p95_held} of {seeds}"
    )
    ok = within == seeds and p95_held == seeds
    print("every target met" if ok else "TARGET MISSED")
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--nights", type=int, default=30, help="nights of history (<= 30)")
    parser.add_argument("--runs", type=int, default=5, help="runs of each timing")
    parser.add_argument("--seed", type=int, default=32)
    parser.add_argument("--accuracy", action="store_true", help="measure the forecast instead")
    parser.add_argument("--seeds", type=int, default=10, help="--accuracy: nights measured")
    args = parser.parse_args()
    if args.accuracy:
        return accuracy(args.seeds)

    with tempfile.TemporaryDirectory(prefix="nightshift-bench-") as tmp:
        folder = Path(tmp)
        jobs = jobs_of(args.jobs, args.seed)
        path = folder / "nightshift.yaml"
        path.write_text(catalogue_text(jobs), encoding="utf-8")
        state = folder / "state"
        state.mkdir()
        url = f"sqlite:///{state / 'ledger.sqlite3'}"
        now = datetime.now(UTC)
        t0 = time.perf_counter()
        rows, dwells = seed_ledger(url, usual_of(jobs, args.seed), min(args.nights, 30), now)
        chained = sum(1 for j in jobs if j["depends_on"])
        backends = {b: sum(j["backend"] == b for j in jobs) for b in ("cli", "command")}
        print(
            f"catalogue: {len(jobs):,} jobs ({backends['cli']} cli, {backends['command']} command;"
            f" {chained} chain steps after a first), limits {{cli: 8}}"
        )
        print(
            f"ledger: {args.nights} nights, {rows:,} transitions; snapshot from {dwells:,} dwells"
            f" (seeded and built in {time.perf_counter() - t0:.1f} s, not timed below)"
        )

        env = {**os.environ, "NIGHTSHIFT_STATE_DIR": str(state), "NIGHTSHIFT_DATABASE_URL": url}
        cached = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
        cached["PYTHONPYCACHEPREFIX"] = str(folder / "pycache")
        cli, answer = cli_times(path, env, args.runs)
        cli_times(path, cached, 1)  # fills the bytecode cache
        cli_cached, _ = cli_times(path, cached, args.runs)
        bases: dict[str, int] = {}
        for job in answer["jobs"]:
            bases[job["basis"]] = bases.get(job["basis"], 0) + 1
        assert len(answer["jobs"]) == len(jobs), "the plan forgot jobs"
        print(
            f"forecast: finish p50 {answer['finish']['p50']}, p95 {answer['finish']['p95']}"
            f" (start {answer['start']}); basis {bases}; {len(answer['late'])} late (p50)"
        )

        steps: dict[str, list[float]] = {}
        for _ in range(args.runs):
            for name, seconds in split(path, url).items():
                steps.setdefault(name, []).append(seconds)

        starts = import_times(env, args.runs)
        starts_cached = import_times(cached, args.runs)

    as_is = "no bytecode cache" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "as is"
    print("nightshift plan --json, a subprocess (start-up included):")
    print(row(f"nightshift plan ({as_is})", cli))
    print(row("nightshift plan (bytecode cached)", cli_cached))
    print("in process, split:")
    for name, times in steps.items():
        print(row(name, times))
    total = sum(statistics.median(t) for t in steps.values())
    print(f"  {'sum of the medians':<46} {total * 1000:14.0f} ms")
    print("start-up for comparison:")
    print(row(f"import nightshift.cli.main ({as_is})", starts))
    print(row("import nightshift.cli.main (bytecode cached)", starts_cached))
    for what, times in ((as_is, cli), ("bytecode cached", cli_cached)):
        median = statistics.median(times)
        verdict = "under" if median < AIM_S else "OVER"
        print(f"nightshift plan median ({what}) {median:.2f} s: {verdict} the {AIM_S:.0f} s aim")
    load = os.getloadavg()
    print(f"load average: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
