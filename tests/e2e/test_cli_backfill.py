"""``nightshift backfill`` and ``nightshift plan --nights`` from outside: bad input in one line,
each night's cost and the total first, the cap asking for --yes, and a backfill killed with
-9 in the middle that the same command finishes, each job submitted once a night."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from nightshift.cli.main import main
from nightshift.config.settings import load_settings
from nightshift.store.db import db_now
from nightshift.store.lease import Lease
from nightshift.store.ledger import Ledger
from tests.support import wait_until

REPO = Path(__file__).resolve().parents[2]
NIGHTS = ["2026-11-20", "2026-11-21", "2026-11-22", "2026-11-23", "2026-11-24"]
PY = json.dumps(sys.executable)


def _catalogue(sandbox: Path, *, sleep: float = 0.0, cap: str = "") -> Path:
    marks = sandbox / "marks"
    marks.mkdir(exist_ok=True)
    job = "import sys, time; open(sys.argv[1], 'a').write('x'); time.sleep(float(sys.argv[2]))"
    lines = [
        "name: backfill",
        f"defaults: {{poll: {{initial: 0.2s, max: 0.5s}}, stagger: 0s, retries: 0{cap}}}",
        "jobs:",
    ]
    for label, usd in (("report", 1.25), ("index", 0.5)):
        argv = f"[{PY}, -c, {json.dumps(job)}, {json.dumps(str(marks / label))}, '{sleep}']"
        lines.append(f"  - {{label: {label}, backend: command, argv: {argv}, cost: {usd}}}")
    path = sandbox / "nightshift.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _free(lease: Lease) -> bool:
    """Whether nobody holds ``lease`` now, on the database's clock."""
    holder = lease.holder()
    return holder is None or holder[1] < db_now(lease.engine)


def _submissions(sandbox: Path, label: str) -> int:
    path = sandbox / "marks" / label
    return len(path.read_text()) if path.exists() else 0


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--from", "2026-11-24", "--to", "2026-11-20"], "--from 2026-11-24 is after --to"),
        (["--from", "yesterday", "--to", "2026-11-20"], "--from must be a date"),
        (["--from", "2026-11-20", "--to", "2026-13-01"], "--to must be a date"),
        (["--nights", "2026-11-20,friday"], "--nights wants dates like 2026-11-29, not 'friday'"),
        (["--nights", "2026-11-20", "--from", "2026-11-20"], "not both"),
        ([], "which nights? --from D1 --to D2, or --nights D1,D2,..."),
    ],
)
def test_a_bad_range_is_one_line_and_the_usage_exit(sandbox: Path, capsys, args, said) -> None:
    path = _catalogue(sandbox)
    assert main(["backfill", "--catalogue", str(path), *args]) == 64
    err = capsys.readouterr().err.strip()
    assert said in err and len(err.splitlines()) == 1, err
    assert main(["plan", "--catalogue", str(path), "--nights", "2026-11-24..2026-11-20"]) == 64


def test_plan_nights_gives_each_nights_cost_and_the_total(sandbox: Path, capsys) -> None:
    path = _catalogue(sandbox)
    code = main(["plan", "--catalogue", str(path), "--nights", "2026-11-20..2026-11-22", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert [(n["night"], n["usd"]) for n in out["nights"]] == [
        ("2026-11-20", 1.75),
        ("2026-11-21", 1.75),
        ("2026-11-22", 1.75),
    ]
    assert out["total_usd"] == 5.25 and out["over_cap"] == []
    # no history yet: no finish is forecast, and none is shown as if it were
    assert {(n["finish_p50_s"], n["finish_p95_s"]) for n in out["nights"]} == {(None, None)}
    assert main(["plan", "--catalogue", str(path), "--nights", "2026-11-20..2026-11-20"]) == 0
    assert "no history" in capsys.readouterr().out


def test_nights_by_list_skip_what_ended_ok_and_say_what_would_run(sandbox: Path, capsys) -> None:
    path = _catalogue(sandbox)
    ledger = Ledger(load_settings().ledger_url(), "backfill")
    for label in ("report", "index"):
        ledger.record_submit(NIGHTS[0], label, "command", f"{label}-x", 1)
        ledger.record_state(NIGHTS[0], label, "succeeded")
    ledger.close()
    argv = ["backfill", "--catalogue", str(path), "--nights", f"{NIGHTS[3]},{NIGHTS[0]}"]
    assert main([*argv, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"skipped, already ended ok: {NIGHTS[0]}" in out and NIGHTS[3] in out
    assert "total: $1.75" in out and _submissions(sandbox, "report") == 0


def test_a_night_expected_past_the_cap_needs_yes(sandbox: Path, capsys) -> None:
    path = _catalogue(sandbox, cap=", spend: {usd: 1.5}")
    argv = ["backfill", "--catalogue", str(path), "--from", NIGHTS[0], "--to", NIGHTS[1]]
    assert main(argv) == 4
    captured = capsys.readouterr()
    assert "total: $3.50" in captured.out
    assert "expected past the night's cap ($1.50)" in captured.err and "--yes" in captured.err
    assert _submissions(sandbox, "report") == 0
    assert main([*argv, "--yes", "--dry-run"]) == 0


@pytest.mark.usefixtures("prefect_server")
def test_a_backfill_killed_mid_way_is_finished_by_the_same_command(sandbox: Path) -> None:
    from prefect.settings import PREFECT_API_URL

    path = _catalogue(sandbox, sleep=2.0)
    ledger = Ledger(load_settings().ledger_url(), "backfill")
    for night in (NIGHTS[0], NIGHTS[2]):  # two nights already ended ok
        for label in ("report", "index"):
            ledger.record_submit(night, label, "command", f"{label}-{night}", 1)
            ledger.record_state(night, label, "succeeded")
    engine = ledger.engine
    argv = [sys.executable, "-m", "nightshift.cli.main", "backfill", "--catalogue", str(path)]
    argv += ["--from", NIGHTS[0], "--to", NIGHTS[-1]]
    # a killed night's lease runs out in 2 s, not a minute
    env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value())}
    env["NIGHTSHIFT_LEASE_TTL"] = "2"

    def states(night: str) -> list[str]:
        query = sa.text("SELECT state FROM jobs WHERE catalogue = 'backfill' AND night = :n")
        with engine.connect() as conn:
            return sorted(r[0] for r in conn.execute(query, {"n": night}))

    first = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    try:
        # killed while the second night it runs (the fourth) has its jobs out there
        wait_until(lambda: states(NIGHTS[3]) != [], 120, "the fourth night to submit")
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
    assert states(NIGHTS[1]) == ["succeeded", "succeeded"]
    assert states(NIGHTS[4]) == []
    lease = Lease(engine, "backfill")
    wait_until(lambda: _free(lease), 30, "the killed night's lease to run out")

    again = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)

    assert again.returncode == 0, again.stdout + again.stderr
    assert f"skipped, already ended ok: {NIGHTS[0]}, {NIGHTS[1]}, {NIGHTS[2]}" in again.stdout
    assert "night 1 of 2: 2026-11-23" in again.stdout
    for night in NIGHTS:
        assert states(night) == ["succeeded", "succeeded"], night
    # three nights ran, each job once a night: the killed night's jobs were re-attached
    assert (_submissions(sandbox, "report"), _submissions(sandbox, "index")) == (3, 3)
    query = sa.text(
        "SELECT night FROM jobs WHERE catalogue = 'backfill' AND submitted_at IS NOT NULL "
        "AND night IN ('2026-11-21', '2026-11-23', '2026-11-24') "
        "GROUP BY night ORDER BY MIN(submitted_at)"
    )
    with engine.connect() as conn:
        assert [r[0] for r in conn.execute(query)] == [NIGHTS[1], NIGHTS[3], NIGHTS[4]]
    ledger.close()
