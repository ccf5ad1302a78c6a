"""Threads and their primitives are made in few places: a night's time is its loop's.

Every thread, executor, condition, event, timer, semaphore or barrier that the package makes
(called, or handed over to be made: ``default_factory=threading.Event``) outside the sandbox and
the CLI is listed here with its reason; a new one fails this test until it is argued for. The
night's own concurrency goes through ``nightshift/loop.py`` (its tasks, its bounded pools).
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MADE = {"Thread", "Condition", "Event", "Timer", "Semaphore", "BoundedSemaphore", "Barrier"}
EXECUTORS = {"ThreadPoolExecutor", "ProcessPoolExecutor"}

# path -> how many, and why they are not the night's loop
ALLOWED: dict[str, tuple[int, str]] = {
    "nightshift/loop.py": (2, "the loop's own thread, and its executors, made in `blocking`"),
    "nightshift/engine/ledger_sink.py": (1, "an abandon ends a retry's wait on the writer thread"),
    "nightshift/backends/gemini/capped.py": (1, "on-demand rows side by side, sync client"),
    "nightshift/backends/gemini/client.py": (1, "a flag: the client was closed"),
}


def _annotations(tree: ast.AST) -> set[int]:
    """ids of the nodes inside type annotations (``threading.Timer | None`` makes nothing)."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        notes: list[ast.AST | None] = []
        if isinstance(node, ast.AnnAssign):
            notes.append(node.annotation)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            notes.append(node.returns)
            args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
            args += [a for a in (node.args.vararg, node.args.kwarg) if a is not None]
            notes += [a.annotation for a in args]
        for note in notes:
            if note is not None:
                inside.update(id(n) for n in ast.walk(note))
    return inside


def made_in(path: Path) -> int:
    """How many places in ``path`` make a thread or one of its primitives."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _annotations(tree)
    count = 0
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "threading"
            and node.attr in MADE
        ) or (
            (isinstance(node, ast.Name) and node.id in EXECUTORS)
            or (isinstance(node, ast.Attribute) and node.attr in EXECUTORS)
        ):
            count += 1
    return count


def test_threads_are_made_only_where_argued_for() -> None:
    found: Counter[str] = Counter()
    for path in sorted((REPO / "nightshift").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if rel.startswith(("nightshift/sandbox/", "nightshift/cli/")):
            continue
        if (n := made_in(path)) > 0:
            found[rel] = n
    allowed = {path: n for path, (n, _why) in ALLOWED.items()}
    assert dict(found) == allowed, (
        "threads or their primitives made where nobody argued for them (or no longer where "
        f"ALLOWED says): {dict(found)} != {allowed}; the night's concurrency goes through "
        "nightshift/loop.py"
    )


def test_the_count_sees_what_it_counts(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import threading\n"
        "from concurrent.futures import ThreadPoolExecutor\n"
        "from dataclasses import field\n"
        "timer: threading.Timer | None = None\n"
        "def f(e: threading.Event) -> threading.Thread: ...\n"
        "a = threading.Thread(target=print)\n"
        "b = field(default_factory=threading.Event)\n"
        "c = ThreadPoolExecutor(2)\n"
        "import concurrent.futures\n"
        "d: dict[str, concurrent.futures.ThreadPoolExecutor] = {}\n"
        "e = concurrent.futures.ThreadPoolExecutor(1)\n",
        encoding="utf-8",
    )
    # the imports and the annotations make nothing; the thread, the factory and the pools do
    assert made_in(sample) == 4


# locks made outside the sandbox and the CLI, per file: at most these (issue 43 takes them down;
# a new one fails here until it is argued for). Each guards state shared with threads: a client
# or a store used from pool threads, or night state not yet owned by the loop alone.
LOCKS_AT_MOST: dict[str, int] = {
    "nightshift/backends/deployment.py": 1,  # its Prefect client, shared by status threads
    "nightshift/backends/gemini/batch.py": 1,  # its listing cache, shared by status threads
    "nightshift/backends/http/backend.py": 1,  # its listing cache and quota clock
    "nightshift/budgets/snapshots.py": 1,  # the snapshot cache of one process
    "nightshift/engine/stopping.py": 1,  # night state: the stop and its listeners
    "nightshift/loop.py": 1,  # the loop's own pools
    "nightshift/notify/notifier.py": 1,  # its maps and journal (never held across a post)
    "nightshift/orchestration/leases.py": 3,  # the Prefect slot leases (their wait on the loop)
    "nightshift/store/alert_log.py": 1,  # one writer of the alert log
    "nightshift/store/lease.py": 1,  # the lease's renewals
    "nightshift/store/ledger.py": 1,  # the ledger's last-row cache
    "nightshift/store/migrations/__init__.py": 1,  # Alembic's module globals: one at a time
}
# event loops made outside nightshift/loop.py (a NightLoop, or asyncio.run): at most these
LOOPS_AT_MOST: dict[str, int] = {
    "nightshift/flows/nightly.py": 1,  # the night's one loop, made where the night begins
}


def _counts() -> tuple[Counter[str], Counter[str]]:
    locks: Counter[str] = Counter()
    loops: Counter[str] = Counter()
    for path in sorted((REPO / "nightshift").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if rel.startswith(("nightshift/sandbox/", "nightshift/cli/")):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "threading"
                and node.attr in ("Lock", "RLock")
            ):
                locks[rel] += 1
            if isinstance(node, ast.Call) and rel != "nightshift/loop.py":
                f = node.func
                made = isinstance(f, ast.Name) and f.id == "NightLoop"
                made |= isinstance(f, ast.Attribute) and f.attr == "NightLoop"
                made |= (
                    isinstance(f, ast.Attribute)
                    and isinstance(f.value, ast.Name)
                    and f.value.id == "asyncio"
                    and f.attr == "run"
                )
                loops[rel] += made
    return locks, +loops


def test_locks_and_event_loops_are_made_no_more_than_argued_for() -> None:
    locks, loops = _counts()
    more = {p: n for p, n in locks.items() if n > LOCKS_AT_MOST.get(p, 0)}
    assert more == {}, f"locks made where nobody argued for them: {more}"
    more = {p: n for p, n in loops.items() if n > LOOPS_AT_MOST.get(p, 0)}
    assert more == {}, f"event loops made outside nightshift/loop.py: {more}"
    # one that went away is taken off the list, so it cannot come back unseen
    assert set(locks) == set(LOCKS_AT_MOST) and set(loops) == set(LOOPS_AT_MOST)
    assert sum(locks.values()) == 14 and sum(loops.values()) == 1
