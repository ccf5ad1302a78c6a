"""A real ``prefect server start``, a process work pool and ``prefect worker start`` for tests.

Each runs in its own process group, its output in a log file under the given folder, and is
stopped (SIGTERM, then SIGKILL) when its ``with`` block ends, whatever happened inside.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support import wait_until

__all__ = [
    "QUIET_SERVICES",
    "PrefectSite",
    "children",
    "free_port",
    "healthy",
    "migrated_database",
    "migrated_home",
    "prefect_site",
    "stop",
]

PY = sys.executable

# the Prefect server's loop services that no test waits for, off on every server the tests
# start: each wakes every few seconds for the server's whole life (an idle server's CPU falls
# from 1.4 s a minute to 0.85, measured), and the scheduler would fill a deployed test site
# with runs of its schedules (the watchdog's every 10 minutes) that a worker could pick up.
# Left on: what the tests see happen (task runs and events recorded, a cancelled run's
# children cleaned up, a dead night's concurrency leases expired)
QUIET_SERVICES = {
    f"PREFECT_SERVER_SERVICES_{service}_ENABLED": "false"
    for service in ("SCHEDULER", "LATE_RUNS", "PAUSE_EXPIRATIONS", "FOREMAN", "TRIGGERS")
}


def migrated_home(home: Path) -> Path:
    """A Prefect home whose SQLite database is already at Prefect's last migration.

    A server's first start on a new database runs every migration (16 s of CPU against 7 s
    at the last one, measured: most of some tests' own work on a 2-core machine): the database
    is copied from one migrated once per machine and Prefect version. The first start on a new
    database stays tested where it matters (the calm demo, ``tests/e2e/test_demo_history.py``;
    PostgreSQL, ``test_production.py``).
    """
    home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(migrated_database(), home / "prefect.db")
    return home


def migrated_database() -> Path:
    """The template, made on first use by one process while the others wait for it (every xdist
    worker wants it at its start: each making its own cost 15 s of CPU, three times over), in a
    folder of its own, then renamed into place: a maker killed halfway leaves no half database."""
    import fcntl

    import prefect

    folder = Path(tempfile.gettempdir()) / f"nightshift-tests-prefect-db-{prefect.__version__}"
    done = folder / "prefect.db"
    if done.exists():
        return done
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "making.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or its process dies
        if not done.exists():
            _migrate_into(folder, done)
    return done


def _migrate_into(folder: Path, done: Path) -> None:
    making = Path(tempfile.mkdtemp(dir=folder))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env |= {"PREFECT_HOME": str(making), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    upgrade = [PY, "-m", "prefect", "server", "database", "upgrade", "-y"]
    ran = subprocess.run(upgrade, env=env, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    os.replace(making / "prefect.db", done)
    shutil.rmtree(making, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop(process: subprocess.Popen[bytes]) -> None:
    """The process and everything it started (its own process group)."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(20)


def healthy(api: str) -> bool:
    import httpx

    try:
        return httpx.get(f"{api}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@dataclass
class PrefectSite:
    """A running server (``api``), the environment that points at it, and its log folder."""

    root: Path
    api: str
    env: dict[str, str]

    def prefect(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        """The prefect CLI as a user runs it, against this server."""
        return subprocess.run(
            [PY, "-m", "prefect", "--no-prompt", *args],
            cwd=cwd or self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    def log_tail(self, name: str = "worker", lines: int = 60) -> str:
        """The last lines of ``<name>.log`` (the worker's holds its flow runs' output)."""
        path = self.root / f"{name}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


def _spawn(stack: ExitStack, argv: list[str], log: Path, **popen: object) -> None:
    out = stack.enter_context(log.open("wb"))
    process = subprocess.Popen(
        argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, **popen
    )
    stack.callback(stop, process)


@contextmanager
def prefect_site(
    root: Path,
    *,
    pool: str | None = None,
    database_url: str | None = None,
    worker_cwd: Path | None = None,
    extra_env: dict[str, str] | None = None,
) -> Iterator[PrefectSite]:
    """A server on a free port (SQLite under ``root`` unless ``database_url``, an async
    SQLAlchemy URL); with ``pool``, a process work pool of that name and a worker polling it
    every second. The environment drops the caller's NIGHTSHIFT_ and PREFECT_ variables."""
    root.mkdir(parents=True, exist_ok=True)
    if database_url is None:
        migrated_home(root / "prefect-home")
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("NIGHTSHIFT_", "PREFECT_"))}
    env = base | {
        "PREFECT_HOME": str(root / "prefect-home"),
        "PREFECT_API_URL": api,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_WORKER_QUERY_SECONDS": "1",
        **(extra_env or {}),
    }
    server_env = env | QUIET_SERVICES | {"PREFECT_UI_API_URL": api}
    if database_url:
        server_env["PREFECT_API_DATABASE_CONNECTION_URL"] = database_url
    site = PrefectSite(root, api, env)
    with ExitStack() as stack:
        server = [PY, "-m", "prefect", "server", "start", "--host", "127.0.0.1"]
        _spawn(stack, [*server, "--port", str(port)], root / "server.log", env=server_env)
        wait_until(lambda: healthy(api), 180, "the Prefect server to answer", interval=0.5)
        if pool is not None:
            created = site.prefect("work-pool", "create", pool, "--type", "process")
            assert created.returncode == 0, created.stdout + created.stderr
            worker = [PY, "-m", "prefect", "worker", "start", "--pool", pool]
            _spawn(stack, worker, root / "worker.log", env=env, cwd=worker_cwd or root)
        yield site


def children(pid: int) -> dict[int, str]:
    """Processes whose parent is ``pid``: pid -> command line."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if int(stat[stat.rindex(")") + 2 :].split()[1]) == pid:
            out[int(entry.name)] = cmdline
    return out
