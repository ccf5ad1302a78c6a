"""Measure how one night scales to many jobs on one worker, on the fake job CLI (sandbox/agy.py).

For N = 100 and 1,000 jobs (``--big`` adds 5,000; ``--jobs N`` runs one size), each size in a
process of its own, it prints:

- makespan (ledger: first submit -> last end) against the submit window (first -> last submit)
  plus the slowest job's planned time plus one poll cap: 1.00 is no waves at all;
- peak threads and peak RSS of the flow process (sampled from /proc/self/status);
- status calls per job the job CLI saw (``AGY_CALL_LOG``), and ``jobs list`` calls per tick;
- Prefect overhead per job: the flow's wall time beyond the makespan, over N.

``--tracing`` runs each size twice, side by side in one run: untraced, then traced (the
OpenTelemetry extra, exporting OTLP/HTTP to a receiver in this process that decodes every span,
``tests/otlp_receiver.py``): makespan, status calls and peak RSS of both, and the spans received.

``--trace`` runs one size under tracemalloc and prints where the memory of the highest RSS
moment goes: the biggest allocation sites, and the traced bytes per job in flight.
``--spikes`` samples every 10 ms instead and prints what every thread was doing each time the
high-water mark jumped by 4 MB or more: a spike shorter than the one-second samples (the metrics
textfile's 70 MB at a 5,000-job night's end was found this way).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import tracemalloc
from collections.abc import Iterable
from pathlib import Path
from typing import Any

POLL_INITIAL, POLL_MAX = 0.5, 2.0
# seconds each job runs, spread evenly over the jobs: long enough that 1,000 jobs submitted
# back to back are mostly in flight at once (the submit window is ~0.1 s a job here)
RUN_MIN, RUN_MAX = 60.0, 90.0
QUEUE_S = 0.5


def _by_name(names: Iterable[str]) -> dict[str, int]:
    """Thread names counted, a pool's threads (``name_3``) and Prefect's numbered ones as one."""
    counted: dict[str, int] = {}
    for name in names:
        base = re.sub(r"(_\d+|-\d+| \(.*\))$", "", name)
        counted[base] = counted.get(base, 0) + 1
    return counted


def runs(n: int, low: float = RUN_MIN, high: float = RUN_MAX) -> list[float]:
    """n run lengths spread evenly from low to high."""
    return [round(low + (high - low) * i / max(1, n - 1), 2) for i in range(n)]


def catalogue_yaml(secs: list[float], stagger: float) -> str:
    lines = [
        "defaults:",
        f"  poll: {{initial: {POLL_INITIAL}s, factor: 2, max: {POLL_MAX}s}}",
        f"  stagger: {stagger}s",
        "  retries: 1",
        "  deadline: 3600s",
        "jobs:",
    ]
    for i, s in enumerate(secs):
        lines.append(
            f"  - {{label: job-{i:04d}, backend: cli, task: 'work [queue={QUEUE_S} run={s}]'}}"
        )
    return "\n".join(lines) + "\n"


class Sampler:
    """Samples this process's thread count and RSS until stopped; keeps the peaks."""

    def __init__(self, every: float = 0.1, trace: bool = False, spikes: bool = False) -> None:
        self.threads = 0
        self.spikes = spikes
        self.hwm_kb = 0
        self.jumps: list[tuple[float, int, int, list[str]]] = []  # (time, from kB, to kB, stacks)
        self.rss_kb = 0
        self.thread_names: dict[str, int] = {}
        self.anon_kb = self.file_kb = 0
        self.trace = trace
        self.series: list[tuple[float, int]] = []  # (monotonic time, RSS kB)
        self.traced_peak = 0  # bytes traced at the snapshot of the highest RSS
        self.rss_at_snapshot = 0
        self.snapshot: tracemalloc.Snapshot | None = None
        self._every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="bench-sampler")

    def __enter__(self) -> Sampler:
        status = Path("/proc/self/status").read_text(encoding="utf-8")
        self.start_kb = int(status.split("VmRSS:")[1].split()[0])  # before the night
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def _sample(self) -> None:
        status = Path("/proc/self/status").read_text(encoding="utf-8")
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        threads = int(fields["Threads"])
        if threads > self.threads:  # which threads make the peak, by name (a pool's as one)
            self.threads = threads
            self.thread_names = _by_name(t.name for t in threading.enumerate())
        self.rss_kb = max(self.rss_kb, int(fields["VmHWM"].split()[0]))
        # what the RSS is made of at its highest: the heap (anon) or mapped files
        if int(fields["VmRSS"].split()[0]) >= max((kb for _, kb in self.series), default=0):
            self.anon_kb = int(fields["RssAnon"].split()[0])
            self.file_kb = int(fields["RssFile"].split()[0])
        self.series.append((time.monotonic(), int(fields["VmRSS"].split()[0])))
        if self.spikes:
            self._jump(int(fields["VmHWM"].split()[0]))
        rss = int(fields["VmRSS"].split()[0])
        if self.trace and rss > self.rss_at_snapshot + 5 * 1024:  # RSS at a new high
            self.rss_at_snapshot = rss
            self.traced_peak = tracemalloc.get_traced_memory()[0]
            self.snapshot = tracemalloc.take_snapshot()

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            self._sample()
            if len(self.series) > 4000:  # at 10 ms: thinned, not grown without end
                self.series = self.series[::2]

    def _jump(self, hwm_kb: int) -> None:
        """At a jump of the high-water mark, what every other thread is doing (innermost first)."""
        if hwm_kb >= self.hwm_kb + 4096 and self.hwm_kb:
            stacks = [
                " <- ".join(
                    f"{Path(f.filename).name}:{f.lineno}:{f.name}"
                    for f in reversed(traceback.extract_stack(frame)[-12:])
                )
                for ident, frame in sys._current_frames().items()
                if ident != threading.get_ident()
            ]
            self.jumps.append((time.monotonic(), self.hwm_kb, hwm_kb, stacks))
        self.hwm_kb = max(self.hwm_kb, hwm_kb)

    def show_jumps(self) -> None:
        for t, old, new, stacks in self.jumps:
            print(f"\nhigh-water mark {old // 1024} -> {new // 1024} MB at {t:.2f} s:")
            for stack in stacks:
                print(f"  {stack}")
        sys.stdout.flush()


def one(
    n: int,
    stagger: float,
    low: float,
    high: float,
    trace: bool = False,
    trim: bool = True,
    spikes: bool = False,
) -> dict[str, float]:
    """Run one night of n jobs in this process; return its figures. ``trim=False``: the night
    keeps the freed memory its C heap holds (``nightshift/heap.py`` off), to compare."""
    secs = runs(n, low, high)
    tmp = Path(tempfile.mkdtemp(prefix="nightshift-scale-"))
    os.environ["NIGHTSHIFT_STATE_DIR"] = str(tmp / "state")
    os.environ.pop("NIGHTSHIFT_DATABASE_URL", None)
    os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"
    catalog = tmp / "nightshift.yaml"
    catalog.write_text(catalogue_yaml(secs, stagger), encoding="utf-8")
    call_log = tmp / "agy-calls.jsonl"
    os.environ["NIGHTSHIFT_AGY"] = f"{sys.executable} -m nightshift.sandbox.agy"
    os.environ["AGY_STATE_DIR"] = str(tmp / "agy")
    os.environ["AGY_CALL_LOG"] = str(call_log)
    os.environ["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])

    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    import nightshift.orchestration.night_loop as night_loop
    from nightshift.config.settings import load_settings
    from nightshift.flows.nightly import nightly
    from nightshift.store.ledger import Ledger

    if not trim:
        night_loop.trimmer = lambda: None  # type: ignore[assignment]
    writes = _time_transitions(Ledger)
    # the budgets snapshot a night reads, built beforehand as the weekly budgets flow does (a
    # night that finds none learns one itself, with pandas: a first night, not a usual one)
    # (in a process of its own, so this one's memory is the night's alone)
    seed = (
        "from datetime import UTC, datetime\n"
        "from nightshift.budgets.current import build_snapshot\n"
        "from nightshift.config.settings import load_settings\n"
        "from nightshift.store.ledger import Ledger\n"
        f"ledger = Ledger(load_settings().ledger_url(), {str(catalog.resolve())!r})\n"
        "build_snapshot(ledger, datetime.now(UTC))\n"
        "ledger.close()"
    )
    subprocess.run([sys.executable, "-c", seed], check=True)
    night, run_dir = "2000-01-01", tmp / "run"
    print(f"[{n}] temporary Prefect server; catalogue and state in {tmp}", flush=True)
    quiet = temporary_settings({PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None})
    if trace:
        tracemalloc.start(1)
    sampler = Sampler(0.01 if spikes else 1.0, trace, spikes)
    with prefect_test_harness(server_startup_timeout=120), quiet, sampler as peak:
        t0 = time.monotonic()
        nightly(catalog=str(catalog), run_dir=str(run_dir), night=night, return_state=True)
        flow_wall = time.monotonic() - t0
    # when the peak came: RSS at each tenth of the flow's wall time
    tenths = [
        max((kb for t, kb in peak.series if t <= t0 + flow_wall * i / 10), default=0) // 1024
        for i in range(1, 11)
    ]
    print(f"RSS (MB, the most so far) at each tenth of the flow: {tenths}", flush=True)
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    jobs = summary["jobs"]
    bad = sum(1 for j in jobs if j["state"] != "succeeded")
    ledger = Ledger(load_settings().ledger_url(), str(catalog.resolve()))
    records = [r for j in jobs if (r := ledger.get_job(night, j["label"])) is not None]
    ledger.close()
    spans = [(r.submitted_at, r.finished_at) for r in records if r.submitted_at and r.finished_at]
    submits = sorted(r.submitted_at for r in records if r.submitted_at)
    ends = [r.finished_at for r in records if r.finished_at]
    makespan = (max(ends) - submits[0]).total_seconds()
    window = (submits[-1] - submits[0]).total_seconds()
    slowest = QUEUE_S + max(secs)
    peak.show_jumps()
    if peak.snapshot is not None:
        show_trace(peak.snapshot, peak.traced_peak, most_at_once(spans))
    calls = [json.loads(x) for x in call_log.read_text(encoding="utf-8").splitlines()]
    lists = sum(1 for c in calls if c[:2] == ["jobs", "list"])
    gets = sum(1 for c in calls if c[:2] == ["jobs", "get"])
    return {
        "jobs": n,
        "run_min_s": min(secs),
        "run_max_s": max(secs),
        "not_ok": bad,
        "makespan_s": makespan,
        "submit_window_s": window,
        "slowest_s": slowest,
        "ratio": makespan / (window + slowest),
        "ratio_with_poll_cap": makespan / (window + slowest + POLL_MAX),
        "in_flight_max": most_at_once(spans),
        "peak_threads": peak.threads,
        "peak_thread_names": peak.thread_names,
        "peak_rss_mb": peak.rss_kb / 1024,
        "start_rss_mb": peak.start_kb / 1024,
        "anon_mb": peak.anon_kb / 1024,
        "file_mb": peak.file_kb / 1024,
        "status_calls_per_job": (lists + gets) / n,
        "list_calls": lists,
        "get_calls": gets,
        "flow_wall_s": flow_wall,
        "overhead_ms_per_job": 1000 * (flow_wall - makespan) / n,
        "transitions": sum(rows for rows, _ in writes),
        "transactions": len(writes),
        "transition_s": sum(s for _, s in writes),
        "transition_max_ms": 1000 * max((s for _, s in writes), default=0.0),
    }


def show_trace(snapshot: tracemalloc.Snapshot, traced: int, in_flight: int) -> None:
    """The biggest allocation sites at the highest RSS, by line and by file."""
    print(f"\ntraced at the highest RSS: {traced / 2**20:.0f} MB", flush=True)
    each = traced / max(1, in_flight) / 1024
    print(f"most jobs in flight at once: {in_flight} ({each:.0f} KB each)")
    for key in ("lineno", "filename"):
        print(f"top allocation sites by {key}:")
        for stat in snapshot.statistics(key)[:15]:
            frame = stat.traceback[0]
            where = frame.filename.split("site-packages/")[-1].split("wt-poll/")[-1]
            print(f"  {stat.size / 2**20:7.1f} MB {stat.count:8d} blocks  {where}:{frame.lineno}")
    sys.stdout.flush()


def most_at_once(spans: list[tuple[Any, Any]]) -> int:
    """The most jobs in flight (submitted, not finished) at one instant: waves cap it."""
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def _time_transitions(ledger: Any) -> list[tuple[int, float]]:
    """Rows and seconds of every transaction of transitions the night writes to the ledger."""
    writes: list[tuple[int, float]] = []
    write = ledger.transitions

    def timed(self: Any, rows: Any) -> None:
        rows = list(rows)
        t0 = time.perf_counter()
        try:
            write(self, rows)
        finally:
            writes.append((len(rows), time.perf_counter() - t0))

    ledger.transitions = timed
    return writes


def show(r: dict[str, float]) -> None:
    n = int(r["jobs"])
    runs_s = f"{r['run_min_s']:.0f}-{r['run_max_s']:.0f}s"
    print(f"\n{n} jobs of {QUEUE_S}s queued + {runs_s} running (sandbox job CLI)")
    print(f"  not succeeded                        {int(r['not_ok'])}")
    print(f"  makespan (first submit -> last end)  {r['makespan_s']:8.1f} s")
    print(f"  submit window (first -> last submit) {r['submit_window_s']:8.1f} s")
    print(f"  slowest job (planned)                {r['slowest_s']:8.1f} s")
    print(f"  makespan / (submit + slowest)        {r['ratio']:8.3f}")
    print(f"  makespan / (submit + slowest + cap)  {r['ratio_with_poll_cap']:8.3f}")
    print(f"  jobs in flight at once (most)        {int(r['in_flight_max']):8d}")
    print(f"  peak threads (flow process)          {int(r['peak_threads']):8d}")
    names = ", ".join(f"{name} {n}" for name, n in sorted(r["peak_thread_names"].items()))
    print(f"    of them Python's, by name: {names}")
    print(f"  peak RSS (flow process)              {r['peak_rss_mb']:8.0f} MB")
    if "start_rss_mb" in r:
        grown = (r["peak_rss_mb"] - r["start_rss_mb"]) * 1024 / max(1, r["in_flight_max"])
        print(f"  RSS before the night / grown per job {r['start_rss_mb']:8.0f} MB  {grown:.0f} KB")
    if "anon_mb" in r:
        print(
            f"  at the highest RSS: heap / files      {r['anon_mb']:8.0f} MB  {r['file_mb']:.0f} MB"
        )
    each = r["peak_rss_mb"] * 1024 / max(1, r["in_flight_max"])
    print(f"  peak RSS per job in flight (all of it) {each:6.0f} KB")
    print(
        f"  status calls per job                 {r['status_calls_per_job']:8.2f}"
        f"  ({int(r['list_calls'])} `jobs list`, {int(r['get_calls'])} `jobs get`)"
    )
    print(
        f"  ledger transitions written           {int(r['transitions']):8d}"
        f"  in {int(r.get('transactions', r['transitions']))} transactions"
        f" ({r['transition_s']:.1f} s in all, slowest {r['transition_max_ms']:.0f} ms)"
    )
    print(f"  flow wall time                       {r['flow_wall_s']:8.1f} s")
    print(f"  Prefect overhead per job             {r['overhead_ms_per_job']:8.1f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, help="run one night of this many jobs")
    parser.add_argument("--big", action="store_true", help="also 5,000 jobs")
    parser.add_argument("--stagger", type=float, default=0.0, help="seconds between submits")
    parser.add_argument("--run-min", type=float, default=RUN_MIN, help="shortest job (s)")
    parser.add_argument("--run-max", type=float, default=RUN_MAX, help="longest job (s)")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--trace", action="store_true", help="with --jobs: where memory goes")
    parser.add_argument(
        "--spikes", action="store_true", help="with --jobs: what ran at each jump of the peak"
    )
    parser.add_argument(
        "--no-trim", action="store_true", help="the night keeps its freed heap (to compare)"
    )
    parser.add_argument(
        "--tracing", action="store_true", help="each size untraced, then traced: side by side"
    )
    args = parser.parse_args()
    if args.tracing:
        return traced_side_by_side([args.jobs] if args.jobs else [100, 1000], args)
    if args.jobs:
        trim = not args.no_trim
        result = one(
            args.jobs, args.stagger, args.run_min, args.run_max, args.trace, trim, args.spikes
        )
        print(json.dumps(result) if args.json else "", flush=True)
        if not args.json:
            show(result)
        return 0 if not result["not_ok"] else 1
    sizes = [100, 1000] + ([5000] if args.big else [])
    code = 0
    for n in sizes:  # each size in a fresh process: peaks are that night's only
        argv = [sys.executable, __file__, "--jobs", str(n), "--stagger", str(args.stagger)]
        argv += ["--run-min", str(args.run_min), "--run-max", str(args.run_max)]
        argv += ["--no-trim"] if args.no_trim else []
        done = subprocess.run([*argv, "--json"], capture_output=True, text=True, check=False)
        lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
        if not lines:
            print(done.stdout[-2000:], done.stderr[-4000:], file=sys.stderr)
            return 1
        result = json.loads(lines[-1])
        show(result)
        code = code or (1 if result["not_ok"] else 0)
    return code


def _child(argv: list[str], env: dict[str, str]) -> dict[str, Any] | None:
    """One size in a fresh process (its peaks are that night's only); its figures."""
    done = subprocess.run(
        [*argv, "--json"], capture_output=True, text=True, check=False, env={**os.environ, **env}
    )
    lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
    if not lines:
        print(done.stdout[-2000:], done.stderr[-4000:], file=sys.stderr)
        return None
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def traced_side_by_side(sizes: list[int], args: Any) -> int:
    """Each size untraced, then traced to a receiver here: the figures side by side."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.otlp_receiver import otlp_receiver

    for n in sizes:
        argv = [sys.executable, __file__, "--jobs", str(n), "--stagger", str(args.stagger)]
        argv += ["--run-min", str(args.run_min), "--run-max", str(args.run_max)]
        plain = _child(argv, {})
        with otlp_receiver() as receiver:
            traced = _child(argv, {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url})
            time.sleep(1)
            spans = len(receiver.spans)
        if plain is None or traced is None:
            return 1
        print(f"\n{n} jobs, untraced and traced (OTLP/HTTP to a receiver on 127.0.0.1)")
        for key, name in [
            ("makespan_s", "makespan (s)"),
            ("status_calls_per_job", "status calls per job"),
            ("peak_threads", "peak threads"),
            ("peak_rss_mb", "peak RSS (MB)"),
            ("flow_wall_s", "flow wall time (s)"),
        ]:
            a, b = float(plain[key]), float(traced[key])
            print(f"  {name:24s} {a:10.1f} {b:10.1f}   traced / untraced {b / max(a, 1e-9):6.3f}")
        print(f"  not succeeded            {int(plain['not_ok']):10d} {int(traced['not_ok']):10d}")
        print(f"  spans received                      {spans:10d}   ({n} tries + the night)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
