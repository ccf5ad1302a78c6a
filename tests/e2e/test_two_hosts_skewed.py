"""Two hosts on one PostgreSQL ledger, the second's wall clock 5 minutes off (ahead, then
behind; its monotonic clock and sleeps untouched, by libfaketime): while the first host's night
is live, the second is refused (exit 3), its watchdog raises no false "stopped" or dwell alert,
and the ledger keeps the first night's true outcomes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.support import wait_until

REPO = Path(__file__).resolve().parents[2]
NIGHT = "2026-11-29"
PY = json.dumps(sys.executable)

pytestmark = [
    pytest.mark.usefixtures("prefect_server"),
    pytest.mark.skipif(
        shutil.which("faketime") is None,
        reason="no faketime on this machine: apt-get install -y faketime (.ci/run installs it)",
    ),
]


def _catalogue(folder: Path) -> Path:
    # each job runs until the test says it may end (the file `done`), at most a minute
    job = (
        "import pathlib, sys, time; open(sys.argv[1], 'a').write('x'); end = time.time() + 60\n"
        "while not pathlib.Path(sys.argv[2]).exists() and time.time() < end: time.sleep(0.2)"
    )
    lines = ["name: two-hosts", "defaults: {poll: {initial: 0.2s, max: 1s}, stagger: 0s}", "jobs:"]
    done = json.dumps(str(folder / "done"))
    for label in ("etl", "report"):
        argv = f"[{PY}, -c, {json.dumps(job)}, {json.dumps(str(folder / label))}, {done}]"
        lines.append(f"  - {{label: {label}, backend: command, argv: {argv}}}")
    path = folder / "nightshift.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_a_host_whose_clock_is_off_is_refused_while_the_night_is_live(
    db_url: str, tmp_path: Path
) -> None:
    from prefect.settings import PREFECT_API_URL

    from nightshift.store.ledger import Ledger

    catalogue = _catalogue(tmp_path)
    Ledger(db_url, "two-hosts").close()  # the schema, before either host reads it
    env = {
        **os.environ,
        "PREFECT_API_URL": str(PREFECT_API_URL.value()),
        "NIGHTSHIFT_DATABASE_URL": db_url,
        "PYTHONPATH": str(REPO),
    }
    night = ["-m", "nightshift.cli.main", "run", "--catalogue", str(catalogue), "--night", NIGHT]
    host_a = {**env, "NIGHTSHIFT_STATE_DIR": str(tmp_path / "host-a")}
    out = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True}
    first = subprocess.Popen([sys.executable, *night], cwd=REPO, env=host_a, **out)
    ledger = sa.create_engine(db_url)

    def states() -> list[str]:
        query = sa.text("SELECT state FROM jobs WHERE catalogue = 'two-hosts' ORDER BY label")
        with ledger.connect() as conn:
            return [r[0] for r in conn.execute(query)]

    try:
        live = {"submitted", "queued", "running"}

        def in_flight() -> bool:
            now = states()
            return len(now) == 2 and set(now) <= live

        wait_until(lambda: in_flight() or first.poll() is not None, 120, "host A's jobs to run")
        assert first.poll() is None, first.communicate()[0]
        for offset in ("+5m", "-5m"):
            host_b = {**env, "NIGHTSHIFT_STATE_DIR": str(tmp_path / f"host-b{offset}")}
            host_b["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"
            skewed = ["faketime", "-f", offset, sys.executable]
            second = subprocess.run([*skewed, *night], cwd=REPO, env=host_b, capture_output=True,
                                    text=True, timeout=120)  # fmt: skip
            assert second.returncode == 3, (offset, second.stdout, second.stderr)
            assert "refused: another night of 'two-hosts' is running" in second.stderr
            watch = ["-m", "nightshift.cli.main", "watchdog", "--catalogue", str(catalogue)]
            watched = subprocess.run([*skewed, *watch, "--json"], cwd=REPO, env=host_b,
                                     capture_output=True, text=True, timeout=120)  # fmt: skip
            assert watched.returncode == 0, watched.stderr
            report = json.loads(watched.stdout)
            assert report["found"] == 0, (offset, report)
            assert in_flight()  # host A's night, untouched
        (tmp_path / "done").write_text("")  # host A's jobs may end now
        said, _ = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(timeout=30)
    assert first.returncode == 0, said
    assert states() == ["succeeded", "succeeded"]
    assert [len((tmp_path / label).read_text()) for label in ("etl", "report")] == [1, 1]
    ledger.dispose()
