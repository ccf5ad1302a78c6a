"""The demo's month of history: seeded into a real ledger, tonight's budgets are learned from it.

The rough night's stuck job must pass 2 x its learned queued p95 well before its
``queued_timeout`` ends it, so the night names it an alert before the fixed timer would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, date, datetime
from itertools import accumulate
from pathlib import Path
from typing import Any

import pytest

from nightshift.budgets.current import current_budgets
from nightshift.budgets.lookup import Budgets, dwell_floor
from nightshift.cli.demo import demo_catalogue, usual_nights
from nightshift.cli.demo_slack import ALERTS, DIGEST, SLACK_TOKEN
from nightshift.config.catalogue import Catalogue, CliJob
from nightshift.config.loader import load_catalogue
from nightshift.engine.plan import tonight
from nightshift.sandbox.agy import parse_plan
from nightshift.sandbox.history import Usual, generate, seed
from nightshift.store.alert_log import AlertLog, AlertRecord
from nightshift.store.ledger import Ledger
from tests.prefect_processes import migrated_home

REPO = Path(__file__).resolve().parents[2]
STALLED = "generate:article-c"


@pytest.fixture
def rough(tmp_path: Path) -> Catalogue:
    path = tmp_path / "nightshift.yaml"
    path.write_text(demo_catalogue("rough"), encoding="utf-8")
    return load_catalogue(path)


def _seeded(db_url: str, catalogue: Catalogue) -> tuple[Ledger, Budgets]:
    ledger = Ledger(db_url, catalogue.key)
    night = date.fromisoformat(tonight())
    assert seed(ledger, usual_nights(catalogue), night) == [job.label for job in catalogue.jobs]
    return ledger, current_budgets(ledger, datetime.now(UTC))


def test_every_demo_job_has_budgets_of_its_own_after_seeding(db_url: str, rough: Catalogue):
    ledger, budgets = _seeded(db_url, rough)
    key = rough.key
    for job in usual_nights(rough):
        whole = budgets.job(key, job.label)
        assert whole is not None and whole.source == "job", job.label
        # the states every night passes through, and the one it ends from, are its own
        for state in ("submitting", "submitted", job.states[-1][0]):
            budget = budgets.budget(key, job.label, state, job.backend)
            assert budget is not None and budget.source == "job", (job.label, state)
            assert budget.n >= 7
        # a state often too short to be seen falls back to its backend's; none is learning
        for state, _ in job.states:
            assert budgets.budget(key, job.label, state, job.backend) is not None
    ledger.close()


def test_the_rough_nights_stall_passes_twice_its_learned_p95_before_its_timer(
    db_url: str, rough: Catalogue
) -> None:
    job = rough.job(STALLED)
    assert isinstance(job, CliJob) and parse_plan(job.task).stuck  # tonight it never starts
    ledger, budgets = _seeded(db_url, rough)
    budget = budgets.budget(rough.key, STALLED, "queued", "cli")
    assert budget is not None and budget.source == "job"
    # learned from its usual [queue=2 run=1], not from tonight's stall
    assert 1.0 < budget.p95 < 3 * parse_plan(job.task).queue_s  # not an instant state
    poll = rough.defaults.poll
    polls = list(accumulate(min(poll.initial * poll.factor**n, poll.max) for n in range(20)))
    entered = polls[0]  # the first poll sees it queued
    limits = budget.limits(dwell_floor(poll.max))
    assert limits is not None
    alert_at = entered + limits[1]
    assert job.queued_timeout is not None
    # even a night that looks only when it polls sees the alert before the timer ends the job
    assert any(alert_at < at < job.queued_timeout for at in polls)
    ledger.close()


def test_seeding_again_leaves_the_history_alone_and_adds_what_is_missing(
    db_url: str, rough: Catalogue
) -> None:
    ledger = Ledger(db_url, rough.key)
    night = date.fromisoformat(tonight())
    usual = usual_nights(rough)
    calm = [job for job in usual if job.label != STALLED]
    assert seed(ledger, calm, night) == [job.label for job in calm]
    before = len(ledger.history(datetime(2000, 1, 1, tzinfo=UTC)))
    assert seed(ledger, calm, night) == []
    assert len(ledger.history(datetime(2000, 1, 1, tzinfo=UTC))) == before
    assert seed(ledger, usual, night) == [STALLED]  # a job new to the catalogue gets its month
    ledger.close()


def test_a_month_of_ten_jobs_is_written_in_a_few_statements(tmp_path: Path) -> None:
    import sqlalchemy as sa

    usual = [Usual(f"job:{i}", "cli", (("queued", 1.0), ("running", 2.0 + i))) for i in range(10)]
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite3'}", "bench")
    inserts: list[str] = []

    def count(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        if statement.lstrip().upper().startswith("INSERT"):
            inserts.append(statement)

    sa.event.listen(ledger.engine, "before_cursor_execute", count)
    seeded = seed(ledger, usual, date(2026, 11, 29))
    sa.event.remove(ledger.engine, "before_cursor_execute", count)
    assert len(seeded) == 10
    assert len(inserts) <= 4  # bulk: transitions and job rows, not a statement per row
    history = generate(usual, date(2026, 11, 29))
    dwells = [row for row in history.transitions if row["dwell_s"] is not None]
    assert len(ledger.history(datetime(2026, 10, 1, tzinfo=UTC))) == len(dwells)
    ledger.close()


def _demo(scenario: str, workdir: Path, migrated: bool = False) -> subprocess.CompletedProcess[str]:
    """`nightshift demo --scenario ...` as a user runs it: its own Prefect server and ledger.

    The demo keeps its Prefect home in the temp folder; TMPDIR gives each test its own, so two
    demos (on two xdist workers, or two checkouts) never share the temporary server's database.
    A fresh machine's first demo makes that database (the calm demo's test); ``migrated``: it
    is already there, at Prefect's last migration (``migrated_home``), as on a second demo.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NIGHTSHIFT_", "PREFECT_"))}
    (tmp := workdir.parent / "tmp").mkdir(parents=True, exist_ok=True)
    if migrated:
        migrated_home(tmp / "nightshift-demo-prefect")
    env["TMPDIR"] = str(tmp)
    argv = [sys.executable, "-m", "nightshift", "demo", "--scenario", scenario]
    return subprocess.run(
        [*argv, "--workdir", str(workdir)],
        capture_output=True,
        text=True,
        env=env | {"PYTHONPATH": str(REPO)},
        cwd=REPO,
        timeout=300,
    )


def _alert_rows(workdir: Path) -> list[AlertRecord]:
    key = str((workdir / "nightshift.yaml").resolve())
    ledger = Ledger(f"sqlite:///{workdir / 'state' / 'ledger.sqlite3'}", key)
    try:
        return AlertLog(ledger.engine).alerts(catalogue=key, night=tonight())
    finally:
        ledger.close()


def _slack(workdir: Path) -> list[dict[str, Any]]:
    """What the demo's Slack emulator received, as the demo keeps it."""
    return list(json.loads((workdir / "slack.json").read_text(encoding="utf-8")))


@pytest.fixture(scope="module")
def rough_demo(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """The rough demo, run once for the tests that read what it left."""
    workdir = tmp_path_factory.mktemp("rough") / "demo"
    return _demo("rough", workdir, migrated=True), workdir


def test_the_rough_demo_seeds_its_history_and_ends_with_tonights_alerts(
    rough_demo: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    done, workdir = rough_demo

    assert done.returncode == 2, done.stderr
    assert "history: 30 past nights of 9 jobs seeded into the sandbox ledger" in done.stderr
    assert "Error logging to API" not in done.stderr, done.stderr[-2000:]
    assert "alerts tonight:" in done.stderr
    raised = [(row.label, row.state, row.level) for row in _alert_rows(workdir)]
    # exactly its stuck job: no other job's normal night is named
    assert raised == [(STALLED, "queued", "watch"), (STALLED, "queued", "alert")]
    assert f"alert  {STALLED}  queued past 2 x the floor" in done.stderr
    # every message names the catalogue by its name (the file's stem), never its local path
    texts = [m["text"] + json.dumps(m["blocks"]) for m in _slack(workdir)]
    assert texts and not [t for t in texts if str(workdir) in t or sys.executable in t]
    assert any("(nightshift, sandbox, night" in t for t in texts)


def test_the_rough_demo_shows_a_digest_and_the_nights_alerts_in_one_thread(
    rough_demo: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    done, workdir = rough_demo

    assert done.returncode == 2, done.stderr
    messages = _slack(workdir)
    # the partial night's digest, alone in the digest channel, naming what was not ok
    (digest,) = [m for m in messages if m["channel"] == DIGEST]
    assert digest["thread_ts"] is None and digest["text"].startswith("partial: 6/9 succeeded")
    for line in ("`audit:internal-links` (", "`report:admob-mediation` (", f"`{STALLED}` ("):
        assert line in digest["text"]
    # a command job's line carries its first line of stderr, not only its exit code
    assert "failed): exit code 1: ERROR: /guides/antigravity-cli -&gt; 404" in digest["text"]
    # in-night alerts: the first starts the night's thread, every other one replies to it
    alerts = [m for m in messages if m["channel"] == ALERTS]
    (root,) = [m for m in alerts if m["thread_ts"] is None]
    assert [m["thread_ts"] for m in alerts if m is not root] == [root["ts"]] * (len(alerts) - 1)
    texts = [m["text"] for m in alerts]
    dwell = next(
        (i for i, t in enumerate(texts) if t.startswith(f"dwell alert: {STALLED} queued")), None
    )
    stuck = next(
        (i for i, t in enumerate(texts) if t.startswith(f"stuck in queue: {STALLED}")), None
    )
    assert dwell is not None and stuck is not None, texts
    assert dwell < stuck  # alerted as it overstayed, told it was stuck when its timer ended it
    # and the demo says so, channel by channel, the replies under their thread
    assert f"slack: {len(messages)} message(s) received" in done.stderr
    shown = done.stderr[done.stderr.index("slack: ") :]
    assert shown.index(f"  {ALERTS}\n") < shown.index(f"      > stuck in queue: {STALLED}")
    assert f"  {DIGEST}\n    partial: 6/9 succeeded" in shown
    assert SLACK_TOKEN not in done.stdout + done.stderr


def test_the_calm_demo_sends_nothing_to_slack(tmp_path: Path) -> None:
    workdir = tmp_path / "demo"
    done = _demo("calm", workdir)

    assert done.returncode == 0, done.stderr
    # a calm night is quiet: no watch, no alert, nothing in Slack
    assert _alert_rows(workdir) == []
    assert "alerts tonight: none" in done.stderr
    assert _slack(workdir) == []
    assert "slack: nothing sent (an ok night is silent" in done.stderr
    # its server stopped only once Prefect sent its last logs: stopped first, Prefect's exit
    # retried them for 75 s ("Error logging to API")
    assert "Error logging to API" not in done.stderr, done.stderr[-2000:]


def test_the_demos_server_that_cannot_start_says_why_in_one_line_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The demo starts its Prefect server first, beside its own start-up: one that exits (its
    port taken) is named with its log, and no process of it is left."""
    import socket

    from nightshift.cli import own_server

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        monkeypatch.setattr(own_server, "_free_port", lambda: taken.getsockname()[1])
        monkeypatch.setenv("PREFECT_HOME", str(migrated_home(tmp_path / "home")))
        with own_server.OwnServer(tmp_path / "home" / "server.log") as server:
            said = server.ready(timeout_s=120)
            proc = server._proc
        assert said is not None and said.startswith("the temporary Prefect server exited with code")
        assert str(tmp_path / "home" / "server.log") in said and "\n" not in said
        assert proc is not None and proc.poll() is not None


def test_a_server_whose_port_was_taken_meanwhile_starts_again_on_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The port found free is taken before uvicorn binds it (uvicorn exits 3): the server starts
    once more on another port, as Prefect's own temporary server does, and the environment
    names that one."""
    import socket

    from nightshift.cli import own_server

    free = own_server._free_port
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ports = iter([taken.getsockname()[1]])
        monkeypatch.setattr(own_server, "_free_port", lambda: next(ports, None) or free())
        monkeypatch.setenv("PREFECT_HOME", str(migrated_home(tmp_path / "home")))
        with own_server.OwnServer(tmp_path / "home" / "server.log") as server:
            first = server.api_url
            said = server.ready(timeout_s=120)
            assert said is None, said
            assert server.api_url != first and os.environ["PREFECT_API_URL"] == server.api_url
            proc = server._proc
        assert proc is not None and proc.poll() is not None  # stopped at the end
