"""Shared fixtures: one Prefect test server per session, sandboxed state per test.

The suite runs on several pytest-xdist workers (``-n`` in pyproject's addopts): each worker is a
session of its own, with its own Prefect home and test server; a test that needs a fixed
resource makes it its own (free ports, tmp_path, a PostgreSQL schema or database per test).
"""

from __future__ import annotations

import atexit
import gc
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.prefect_processes import QUIET_SERVICES
from tests.support import FakeClock

REPO = Path(__file__).resolve().parents[1]
GEMINI_KEY = "test-key-9f8e7d6c5b4a"  # distinctive, so a leak in any message is easy to spot

# loopback traffic must never go through a proxy (slack-sdk copies HTTPS_PROXY into its client)
os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
# the session's test server, and the temporary ones of the nights it starts, run no service
# that no test waits for (``tests/prefect_processes.QUIET_SERVICES``)
os.environ.update(QUIET_SERVICES)
# a Prefect home per session (per xdist worker): profiles, local result storage and logs are
# never shared with the user's, or with another worker's; removed when the session ends
os.environ["PREFECT_HOME"] = tempfile.mkdtemp(prefix="nightshift-tests-prefect-")
atexit.register(shutil.rmtree, os.environ["PREFECT_HOME"], True)

# a machine that sets PYTHONDONTWRITEBYTECODE makes every run compile the package again and
# rewrite every test module's asserts (2.5 s of the unit layer's 16 s of CPU, measured): the
# tests keep their bytecode, outside the checkout as that setting wants, in one folder per machine
if sys.dont_write_bytecode:
    sys.pycache_prefix = str(Path(tempfile.gettempdir()) / "nightshift-tests-pycache")
    sys.dont_write_bytecode = False

# the night report's picture is a second Python with matplotlib at each night's end (about 1 s
# of CPU): off for the nights of the suite, on for the tests marked `picture` that look at it
os.environ["NIGHTSHIFT_REPORT_PLOT"] = "false"
# the night loop's owner check: night state touched from another thread raises (loop.py)
os.environ["NIGHTSHIFT_OWNER_CHECK"] = "1"

LOCAL_POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def _local_postgres() -> str | None:
    """The machine's PostgreSQL when one answers on 127.0.0.1:5432, as .ci/run's pg_isready."""
    import psycopg

    try:
        psycopg.connect(LOCAL_POSTGRES.replace("+psycopg", ""), connect_timeout=3).close()
    except psycopg.Error:
        return None
    return LOCAL_POSTGRES


@pytest.fixture(scope="session")
def prefect_server() -> Iterator[None]:
    """A real (temporary) Prefect server for the whole session.

    Its database, and that of the temporary server a ``nightshift`` subprocess starts in this
    session's Prefect home, start at Prefect's last migration (``migrated_home``): a server's
    first start on a new database costs ~9 s more CPU (16 s against 7 s, measured)."""
    import prefect.testing.utilities as harness
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    from tests.prefect_processes import migrated_database, migrated_home

    migrated_home(Path(os.environ["PREFECT_HOME"]))

    def migrated_folder() -> str:  # where the harness puts its database, as it names it
        folder = tempfile.mkdtemp(prefix="nightshift-tests-server-")
        shutil.copyfile(migrated_database(), f"{folder}/prefect-test.db")
        return folder

    with pytest.MonkeyPatch.context() as patch:
        # a Prefect that no longer makes its folder this way only loses the head start
        patch.setattr(harness, "mkdtemp", migrated_folder, raising=False)
        with (
            harness.prefect_test_harness(server_startup_timeout=120),
            temporary_settings({PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}),
        ):
            yield


@pytest.fixture(autouse=True)
def _report_picture(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test marked ``picture`` has its nights draw report.png, as a user's night does."""
    if request.node.get_closest_marker("picture") is not None:
        monkeypatch.setenv("NIGHTSHIFT_REPORT_PLOT", "true")


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """State dir, ledger and fake agy state under tmp_path; the fake agy as NIGHTSHIFT_AGY."""
    monkeypatch.setenv("NIGHTSHIFT_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("NIGHTSHIFT_DATABASE_URL", raising=False)
    monkeypatch.setenv("NIGHTSHIFT_AGY", f"{sys.executable} -m nightshift.sandbox.agy")
    monkeypatch.setenv("AGY_STATE_DIR", str(tmp_path / "agy"))
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    return tmp_path


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh database URL: a SQLite file, or NIGHTSHIFT_TEST_POSTGRES_URL if set."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'ledger.sqlite3'}"
        return
    pg_url = os.environ.get("NIGHTSHIFT_TEST_POSTGRES_URL")
    if not pg_url:
        pytest.skip("no PostgreSQL on 127.0.0.1:5432 and NIGHTSHIFT_TEST_POSTGRES_URL is not set")
    from sqlalchemy import create_engine, text

    # a throwaway schema per test keeps runs independent
    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(pg_url)
    with admin.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    sep = "&" if "?" in pg_url else "?"
    yield f"{pg_url}{sep}options=-csearch_path%3D{schema}"
    with admin.begin() as conn:
        conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
    admin.dispose()


@pytest.fixture(scope="module")
def shared_emu() -> Iterator[object]:
    """One Gemini emulator per test module; 20 emulated minutes pass in 0.3 s."""
    from nightshift.sandbox.gemini_emulator import GeminiEmulator

    with GeminiEmulator(time_scale=4000, api_key=GEMINI_KEY) as emulator:
        yield emulator


@pytest.fixture
def emu(shared_emu: Any) -> Any:
    """The module's emulator, forgetting everything earlier tests did to it."""
    shared_emu.reset()
    return shared_emu


@pytest.fixture
def emulator(sandbox: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A Gemini emulator of the test's own, the night's settings (env) pointed at it."""
    from nightshift.sandbox.gemini_emulator import GeminiEmulator

    with GeminiEmulator(api_key="test-key") as emu:
        monkeypatch.setenv("NIGHTSHIFT_GEMINI_BASE_URL", emu.base_url)
        monkeypatch.setenv("GEMINI_API_KEY", "test-key")
        yield emu


@pytest.fixture
def night_loop() -> Iterator[Any]:
    """A night's loop for a component under test (a watcher, a lease, slot leases), closed after
    the test: no component makes a loop of its own."""
    from nightshift.loop import NightLoop

    with NightLoop("test-night") as loop:
        yield loop


@pytest.fixture
def clocked_emu() -> Iterator[tuple[Any, FakeClock]]:
    """A Gemini emulator on a fake clock: batch states change only when the test says so."""
    from nightshift.sandbox.gemini_emulator import GeminiEmulator

    clock = FakeClock()
    with GeminiEmulator(time_scale=4000, api_key=GEMINI_KEY, clock=clock) as emulator:
        yield emulator, clock


# a test that needs real seconds, a Python subprocess, Prefect, matplotlib or google-genai is not
# a unit test (tests/e2e/test_imports.py keeps the package light): `-m unit` stays within seconds
LAYERS = {
    "unit": "pure logic and the engine on scripted backends and a fake clock: seconds, no server",
    "backends": "each backend against real subprocesses and the emulators",
    "store": "the ledger, its migrations and the lease on SQLite and PostgreSQL",
    "nights": "whole nights under a real Prefect server or real clocks; Prefect's states, plots",
    "e2e": "the CLI, deployments and process handling from outside; what a fresh import loads",
}


_UNIT_TEST_RUNNING = [False]  # whether the test now running is of the unit layer


def _no_process_in_a_unit_test(event: str, _args: tuple[object, ...]) -> None:
    """An audit hook: a unit test that starts a process fails, saying so (a Python subprocess
    is not a unit test: `-m unit` stays within seconds)."""
    if _UNIT_TEST_RUNNING[0] and event in ("subprocess.Popen", "os.system", "os.posix_spawn"):
        raise RuntimeError(f"a unit test started a process ({event}): it belongs in another layer")


sys.addaudithook(_no_process_in_a_unit_test)


@pytest.fixture(autouse=True)
def _unit_tests_start_no_process(request: pytest.FixtureRequest) -> Iterator[None]:
    _UNIT_TEST_RUNNING[0] = request.node.get_closest_marker("unit") is not None
    try:
        yield
    finally:
        _UNIT_TEST_RUNNING[0] = False


def pytest_configure(config: pytest.Config) -> None:
    for name, what in LAYERS.items():
        config.addinivalue_line("markers", f"{name}: {what}")
    config.addinivalue_line("markers", "picture: the nights of this test draw the report's picture")
    config.addinivalue_line(
        "markers", "fuzz: generated and property-based inputs: the full run, not `-m unit`"
    )
    # the PostgreSQL variants run whenever a server answers; NIGHTSHIFT_TEST_POSTGRES_URL= (empty)
    # skips them, another URL points them elsewhere. Set before collection (modules read it) and
    # before xdist starts its workers (they inherit it); not looked for when only unit tests run
    if (
        "NIGHTSHIFT_TEST_POSTGRES_URL" not in os.environ
        and not _only_unit(config.getoption("markexpr", ""))
        and (found := _local_postgres())
    ):
        os.environ["NIGHTSHIFT_TEST_POSTGRES_URL"] = found


# more workers than the 2 cores: the suite waits on servers and subprocesses; with 4, the tests
# that time a stop or count jobs in flight were starved on a slower machine (CI, 2026-12-02)
WORKERS = 3


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """How many workers ``-n auto`` starts: none for the unit layer or a file or two (starting
    workers costs more than it saves there), else NIGHTSHIFT_TEST_WORKERS or 3."""
    if _only_unit(config.getoption("markexpr", "")):
        return 0
    unit = Path(__file__).resolve().parent / "unit"
    start = config.invocation_params.dir
    named = [(start / arg.split("::")[0]).resolve() for arg in config.args]
    if all(p.is_relative_to(unit) for p in named) or (
        len(named) <= 2 and all(p.is_file() for p in named)
    ):
        return 0
    return int(os.environ.get("NIGHTSHIFT_TEST_WORKERS", WORKERS))


def _only_unit(expression: str) -> bool:
    """Whether the mark expression can select no layer but ``unit``."""
    return bool(expression) and not any(
        _could_select(expression, layer) for layer in LAYERS if layer != "unit"
    )


def _could_select(expression: str, layer: str) -> bool:
    """Whether a test of ``layer``'s folder may match the expression (other markers unknown)."""
    from _pytest.mark.expression import Expression

    def could(others: bool) -> bool:
        def matches(name: str, **_: object) -> bool:
            return name == layer if name in LAYERS else others

        return Expression.compile(expression).evaluate(matches)

    try:
        return could(True) or could(False)
    except Exception:  # an expression we cannot judge by folder: assume it may
        return True


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """``-m unit`` (or any expression of layers) collects only the folders it can select.

    The layer markers come from the folders, so a folder whose marker the expression rejects
    holds nothing to run: not importing its modules keeps ``pytest -m unit`` to seconds.
    """
    expression = config.getoption("markexpr", "")
    here = Path(__file__).resolve().parent
    try:
        parts = collection_path.resolve().relative_to(here).parts
    except ValueError:
        return None
    if not expression or not parts or parts[0] not in LAYERS:
        return None
    return None if _could_select(expression, parts[0]) else True


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each test carries its layer's marker (its folder): `pytest -m unit` runs the fast layer.

    The slow layers come first (e2e, nights, ...: the reverse of ``LAYERS``), each file's tests
    in their order: the xdist workers take files in this order (``--no-loadscope-reorder``), so
    the minute-long nights start at once and the unit files fill the gaps at the end, rather
    than a long file starting last while the other workers have nothing left to run."""
    here = Path(__file__).resolve().parent
    slowest_first = {layer: n for n, layer in enumerate(reversed(LAYERS))}
    rank: dict[str, int] = {}
    for item in items:
        parts = Path(str(item.fspath)).resolve().relative_to(here).parts
        layer = parts[0] if parts else ""
        if layer in LAYERS and item.get_closest_marker("fuzz") is None:
            item.add_marker(layer)  # a fuzz test of the unit folder is its own: the full run
        rank[item.nodeid] = slowest_first.get(layer, len(LAYERS))
    items.sort(key=lambda item: rank[item.nodeid])  # stable: in a layer, as pytest collected


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """The run is over: the interpreter's last collection would walk every object the tests made
    (1 s of the unit layer's 16, measured); frozen, they are left to the process's end."""
    gc.freeze()


# CI's one switch (.ci/run sets it): a test that would skip (a service missing: Redis,
# PostgreSQL, Chromium, faketime) fails instead, saying what is missing; off on a laptop
NO_SKIPS = "NIGHTSHIFT_TEST_NO_SKIPS"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Under ``NIGHTSHIFT_TEST_NO_SKIPS=1`` a skipped test is a failed one: a suite cannot pass
    by skipping what it could not reach."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if os.environ.get(NO_SKIPS) != "1" or not report.skipped or hasattr(report, "wasxfail"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = f"skipped, and {NO_SKIPS}=1 (CI) makes a skip a failure: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """With ``NIGHTSHIFT_TEST_CPU=FILE``: each test's CPU seconds (this worker and the processes
    it waited for: servers, subprocesses) appended to FILE as ``seconds<TAB>nodeid``, to find
    where the suite's CPU goes. A session-scoped server's CPU counts when it stops."""
    out = os.environ.get("NIGHTSHIFT_TEST_CPU")
    if not out:
        yield
        return
    import resource

    def cpu() -> float:
        own = resource.getrusage(resource.RUSAGE_SELF)
        waited = resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + waited.ru_utime + waited.ru_stime

    before = cpu()
    yield
    with open(out, "a", encoding="utf-8") as log:
        log.write(f"{cpu() - before:.2f}\t{item.nodeid}\n")
