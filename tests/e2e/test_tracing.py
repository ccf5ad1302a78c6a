"""A night's trace, end to end: the real ``nightshift run`` exporting OTLP/HTTP to a receiver on
127.0.0.1 that decodes every request with ``opentelemetry-proto`` (``tests/otlp_receiver.py``).

The span tree (a night, a chain, a failed job, a rerun's try linked to the first run), the
trace reaching a command job (``TRACEPARENT``) and an ``http`` job's service (its submit's
``traceparent`` header), kill -9 and Ctrl-C with a rerun (every try exactly once, no orphan
parent), a collector that is down or hangs (the night as without tracing), and tracing off
(nightshift imports nothing of the SDK).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from nightshift.sandbox.jobs_api import JobApi
from nightshift.store.lease import Lease
from nightshift.store.ledger import Ledger
from tests.http_night import TOKEN, http_job
from tests.otlp_receiver import Received, Receiver, otlp_receiver
from tests.prefect_processes import PrefectSite, prefect_site
from tests.stopping_night import START_S, STOP_S, Night, kill_jobs, signalled, stop
from tests.support import wait_until

pytestmark = [
    pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc"),
    pytest.mark.timeout(900),
]

NIGHTSHIFT = Path(sys.executable).parent / "nightshift"
NIGHT = "2026-12-01"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrefectSite]:
    """One Prefect server for the module's eleven runs, as a team's (each ``nightshift run``
    would start a temporary one of its own: 5-8 s each; that path has tests of its own)."""
    with prefect_site(tmp_path_factory.mktemp("tracing-server")) as site:
        yield site


@pytest.fixture(autouse=True)
def _on_the_server(server: PrefectSite, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFECT_API_URL", server.api)  # what ``_env`` hands each run


def _env(tmp: Path, **more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TRACEPARENT"))}
    env.pop("NIGHTSHIFT_DATABASE_URL", None)
    return {**env, "NIGHTSHIFT_STATE_DIR": str(tmp / "state"), **more}


def _run(tmp: Path, catalogue: Path, env: dict[str, str]) -> tuple[int, dict[str, Any], float, str]:
    """(exit code, the --json summary, seconds, stderr) of one ``nightshift run``."""
    argv = [str(NIGHTSHIFT), "run", "--catalogue", str(catalogue), "--night", NIGHT, "--json"]
    began = time.monotonic()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    took = time.monotonic() - began
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout), took, done.stderr


def _run_together(
    runs: list[tuple[Path, Path, dict[str, str]]],
) -> list[tuple[int, dict[str, Any], str, tuple[float, float]]]:
    """``nightshift run`` of each (folder, catalogue, environment), all at once: each one's (exit
    code, --json summary, stderr, (the night's seconds from its start to its verdict, the
    seconds from its verdict to its process's exit))."""
    argv = [str(NIGHTSHIFT), "run", "--night", NIGHT, "--json", "--catalogue"]
    procs = []
    for tmp, catalogue, env in runs:
        tmp.mkdir(exist_ok=True)
        with (tmp / "out.json").open("w") as out, (tmp / "err.txt").open("w") as err:
            procs.append(subprocess.Popen([*argv, str(catalogue)], env=env, stdout=out, stderr=err))
    exited: dict[int, float] = {}

    def ended() -> bool:
        exited.update(
            {
                n: time.time()
                for n, p in enumerate(procs)
                if n not in exited and p.poll() is not None
            }
        )
        return len(exited) == len(procs)

    try:
        wait_until(ended, 600, "the nights to end", interval=0.05)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    done = []
    for n, (tmp, _catalogue, _env) in enumerate(runs):
        stdout, stderr = ((tmp / name).read_text() for name in ("out.json", "err.txt"))
        assert stdout, stderr
        summary = json.loads(stdout)
        started, finished = (
            datetime.fromisoformat(summary[k]) for k in ("started_at", "finished_at")
        )
        times = ((finished - started).total_seconds(), exited[n] - finished.timestamp())
        done.append((procs[n].returncode, summary, stderr, times))
    return done


def _one(receiver: Receiver, name: str) -> Received:
    found = receiver.named(name)
    assert len(found) == 1, (name, [s.name for s in receiver.spans])
    return found[0]


def test_a_nights_spans_reach_the_collector_parented_and_the_jobs_join_its_trace(
    tmp_path: Path,
) -> None:
    with otlp_receiver() as receiver, JobApi(tokens={TOKEN: "night"}) as api:
        catalogue = tmp_path / "n.yaml"
        catalogue.write_text(
            "name: traced\n"
            "defaults: {poll: {initial: 0.2s, max: 0.5s}, stagger: 0s, retries: 0}\n"
            "jobs:\n"
            "  - {label: ok, backend: command, argv: [sh, -c, 'echo $TRACEPARENT; sleep 1']}\n"
            "  - {label: bad, backend: command, argv: [sh, -c, 'sleep 1; exit 3']}\n"
            "  - {label: 'etl:extract', backend: command, argv: [sleep, '1']}\n"
            "  - {label: 'etl:load', backend: command, argv: [sleep, '1'],"
            " depends_on: ['etl:extract']}\n"
            + http_job("api", api.base_url, "{task: api, seconds: 0.5}")
        )
        env = _env(
            tmp_path,
            OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url,
            OTEL_SERVICE_NAME="nightly-batch",
            SANDBOX_JOBS_TOKEN=TOKEN,
        )
        code, summary, _took, _err = _run(tmp_path, catalogue, env)
        assert code == 2, summary  # partial: bad failed
        wait_until(lambda: len(receiver.spans) >= 7, 30, "the night's seven spans")
        night = _one(receiver, f"night traced {NIGHT}")
        trace = night.trace_id
        assert summary["trace"] == trace  # --json (and summary.json) say the trace id
        assert night.parent_id == "" and night.error == "night partial"
        assert night.attributes["cicd.pipeline.result"] == "failure"
        assert night.service == "nightly-batch"  # OTEL_SERVICE_NAME, as every SDK reads it
        chain = _one(receiver, "chain etl:extract -> etl:load")
        assert (chain.trace_id, chain.parent_id) == (trace, night.span_id)
        tries = {
            s.attributes["nightshift.job.label"]: s for s in receiver.spans if "(try" in s.name
        }
        assert set(tries) == {"ok", "bad", "etl:extract", "etl:load", "api"}
        for label, span in tries.items():
            parent = chain.span_id if label.startswith("etl:") else night.span_id
            assert (span.trace_id, span.parent_id) == (trace, parent), label
            assert span.start_ns < span.end_ns <= night.end_ns
            assert [e[0] for e in span.events][:2] == ["submitting", "submitted"], label
        bad = tries["bad"]
        assert bad.error == "exit code 3"
        assert bad.attributes["cicd.pipeline.task.run.result"] == "failure"
        assert bad.attributes["nightshift.job.reason"] == "exit code 3"
        ok = tries["ok"]
        assert ok.error is None and ok.attributes["cicd.pipeline.task.run.result"] == "success"
        assert ok.attributes["nightshift.job.backend"] == "command"
        assert ok.attributes["nightshift.job.external_id"].startswith("ok-")
        # the command job printed the TRACEPARENT it got: its try's span is its parent
        log = next((tmp_path / "state" / "jobs").glob("ok-*/output.log")).read_text()
        assert log.strip() == f"00-{trace}-{ok.span_id}-01"
        # the http job's service recorded its submit's traceparent header
        job_id = tries["api"].attributes["nightshift.job.external_id"].split("/")[-1]
        got = httpx.get(f"{api.base_url}/jobs/{job_id}", headers={"authorization": TOKEN})
        assert got.json()["traceparent"] == f"00-{trace}-{tries['api'].span_id}-01"

        # the retry: a rerun of the night redoes the failed job in a trace of its own, linked
        catalogue.write_text(catalogue.read_text().replace("exit 3", "exit 0"))
        before = len(receiver.spans)
        code, again, _took, _err = _run(tmp_path, catalogue, env)
        assert code == 0, again
        wait_until(lambda: len(receiver.spans) >= before + 2, 30, "the rerun's spans")
        rerun = [s for s in receiver.spans[before:] if s.name.startswith("night ")]
        assert len(rerun) == 1 and rerun[0].trace_id != trace
        assert rerun[0].links == [(trace, night.span_id)]
        retried = [s for s in receiver.spans[before:] if "(try" in s.name]
        assert [s.name for s in retried] == ["bad (try 2)"]  # only the failed work, redone
        assert (retried[0].trace_id, retried[0].parent_id) == (rerun[0].trace_id, rerun[0].span_id)
        # `nightshift status` says the night's trace
        status = subprocess.run(
            [str(NIGHTSHIFT), "status", "--catalogue", str(catalogue), "--night", NIGHT],
            env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert f"trace {rerun[0].trace_id}" in status.stdout, status.stdout + status.stderr


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["kill-9", "Ctrl-C"])
def test_a_night_stopped_and_rerun_has_each_try_once_and_no_orphan_parent(
    tmp_path: Path, sig: int
) -> None:
    with otlp_receiver() as receiver:
        night = Night(
            tmp_path,
            [
                "  - {label: a, backend: command, argv: [sleep, '6']}",
                "  - {label: b, backend: command, argv: [sleep, '6']}",
                "  - {label: 'c:one', backend: command, argv: [sleep, '6']}",
                "  - {label: 'c:two', backend: command, argv: [sleep, '1'], depends_on: ['c:one']}",
            ],
            name="stopped",
        )
        # a rerun may start 2 s after the kill (the dead night's lease runs out)
        night.env.update(
            OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url,
            NIGHTSHIFT_LEASE_TTL="2",
            PREFECT_API_URL=os.environ["PREFECT_API_URL"],
        )
        first = night.start(1)
        try:
            wait_until(lambda: night.in_flight(3), START_S, "three jobs in flight", interval=0.2)
            began = _try_starts(night)
            if sig == signal.SIGKILL:
                os.killpg(first.pid, signal.SIGKILL)
                first.wait(timeout=30)
                _lease_ended(night)  # the dead night's lease (2 s) ends before the rerun
            else:
                assert signalled(first, sig) <= STOP_S
            second = night.start(2)
            try:
                second.wait(timeout=START_S)
            finally:
                stop(second)
            assert second.returncode == 0, night.err(2)
        finally:
            stop(first)
            kill_jobs(night)
        wait_until(lambda: len(receiver.named("c:two (try 1)")) == 1, 30, "the last try's span")
        time.sleep(1)  # anything sent twice would have come by now
        tries = [s for s in receiver.spans if "(try" in s.name]
        names = sorted(s.name for s in tries)
        assert names == ["a (try 1)", "b (try 1)", "c:one (try 1)", "c:two (try 1)"], names
        ids = {s.span_id for s in receiver.spans}
        assert len(ids) == len(receiver.spans)  # no span twice
        for span in receiver.spans:  # every parent arrived: no orphan
            assert span.parent_id == "" or span.parent_id in ids, span.name
        nights = [s for s in receiver.spans if s.name.startswith("night ")]
        assert len(nights) == 2
        killed = next(s for s in nights if s.attributes.get("nightshift.night.ended"))
        assert killed.attributes["nightshift.night.ended"] == (
            "killed" if sig == signal.SIGKILL else "interrupted"
        )
        # the three tries begun before the stop: in the first run's trace, from their real start
        for label in ("a", "b", "c:one"):
            span = _one(receiver, f"{label} (try 1)")
            assert span.trace_id == killed.trace_id, label
            assert abs(span.start_ns / 1e9 - began[label]) < 0.01, label


def _lease_ended(night: Night) -> None:
    """Wait for a killed night's lease to run out (its TTL, on the database's clock)."""
    ledger = Ledger(night.url, night.name)
    try:
        held = Lease(ledger.engine, night.name).holder()
    finally:
        ledger.close()
    if held is not None:
        ends = held[1] + timedelta(seconds=0.5)  # the database's clock, rounded
        wait_until(lambda: datetime.now(UTC) > ends, 30, "the killed night's lease to end", 0.1)


def _try_starts(night: Night) -> dict[str, float]:
    """Each job's first row (its submitting) in the ledger, as seconds since the epoch."""
    ledger = Ledger(night.url, night.name)
    try:
        return {
            label: min(t.at.timestamp() for t in ledger.dwells(NIGHT_OF_STOPPING, label))
            for label in ("a", "b", "c:one")
        }
    finally:
        ledger.close()


NIGHT_OF_STOPPING = "2026-11-30"  # tests/stopping_night.NIGHT


@pytest.mark.parametrize("collector", ["down", "hangs"])
def test_a_collector_down_or_hanging_costs_the_night_nothing(
    tmp_path: Path, collector: str
) -> None:
    catalogue = tmp_path / "n.yaml"
    catalogue.write_text(
        "name: blind\n"
        "defaults: {poll: {initial: 0.2s, max: 0.5s}, stagger: 0s, retries: 0}\n"
        "jobs:\n"
        + "".join(f"  - {{label: j{i}, backend: command, argv: [sleep, '1']}}\n" for i in range(4))
        + "  - {label: bad, backend: command, argv: [sh, -c, 'exit 3']}\n"
    )
    with otlp_receiver() as receiver:
        if collector == "hangs":
            receiver.hang.set()
            url = receiver.url
        else:
            url = "http://127.0.0.1:9"  # nothing listens: refused at once
        env = _env(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=url, OTEL_EXPORTER_OTLP_TIMEOUT="30")
        plain = tmp_path / "plain"
        # the two nights side by side, so that both see the same machine (one after the other,
        # a loaded CI machine made the untraced night's tail 2.9 s and the traced one's 11.6 s)
        (code, summary, err, traced), (code_off, summary_off, _, untraced) = _run_together(
            [(tmp_path, catalogue, env), (plain, catalogue, _env(plain))]
        )
    assert (code, code_off) == (2, 2)
    assert [j["state"] for j in summary["jobs"]] == [j["state"] for j in summary_off["jobs"]]
    # the night as long as without tracing; after it, its spans wait 2 s at most, then are
    # dropped with one line (each compared apart: the night, and its tail after the verdict)
    assert traced[0] < untraced[0] + 5, (traced, untraced)
    assert traced[1] < untraced[1] + 2 + 5, (traced, untraced)
    said = [line for line in err.splitlines() if "spans not sent" in line]
    assert len(said) == 1 and said[0].startswith("nightshift: tracing: 6 of 6 spans"), err
    assert "opentelemetry" not in err  # the exporter's own line for each failed try: not said


def test_tracing_off_imports_nothing_of_the_sdk(tmp_path: Path) -> None:
    """With no OTEL_* variable, no module of nightshift imports the SDK (Prefect's server and
    redis may: they are not ours)."""
    catalogue = tmp_path / "n.yaml"
    catalogue.write_text(
        "name: dark\ndefaults: {stagger: 0s}\n"
        "jobs:\n  - {label: one, backend: command, argv: ['true']}\n"
    )
    probe = (
        "import sys, builtins\n"
        "real = builtins.__import__\n"
        "ours = []\n"
        "def spy(name, globals=None, *a, **k):\n"
        "    who = (globals or {}).get('__name__', '')\n"
        "    if name.startswith('opentelemetry') and who.startswith('nightshift'):\n"
        "        ours.append((who, name))\n"
        "    return real(name, globals, *a, **k)\n"
        "builtins.__import__ = spy\n"
        "from nightshift.cli.main import main\n"
        f"code = main(['run', '--catalogue', {str(catalogue)!r}, '--night', {NIGHT!r}])\n"
        "print('OURS', ours)\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], env=_env(tmp_path), capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "OURS []" in done.stdout, done.stdout
