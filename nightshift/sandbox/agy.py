"""A fake ``agy`` job CLI: the JSON contract of the real one, jobs driven by the clock.

Run as ``python -m sandbox.agy`` or ``sandbox/bin/agy``. No daemon: a job's state is computed
from the time since it was created, following a plan read from directives in its task text:
``[queue=0.5 run=2 exit=3]`` (seconds, seconds, exit code) or ``[stuck]`` (queued forever).

Environment: ``AGY_STATE_DIR`` (default ``~/.agy-fake``), ``AGY_TIME_SCALE`` (divides all
durations), ``AGY_FAIL_CALLS=N`` (the first N invocations against a state dir exit 75),
``AGY_IGNORE_JSON=1`` (print human output even with ``--json``, like an old CLI would),
``AGY_CALL_LOG`` (append each invocation's argv as a JSON line to this file),
``AGY_LOSE_RUNS=N`` (the first N ``run`` invocations create their job, then lose the answer:
exit 75, or with ``AGY_LOSE_AS=hang`` hang for ``AGY_HANG_S`` seconds, default 600).

``run --name KEY`` names a job; job objects carry ``name`` (null if unnamed) and ``created_at``.
Per-job faults, as directives too: ``[unlisted]`` (``jobs list`` never shows the job) and
``[hang_get]`` (``jobs get`` of it hangs until the file ``<state>/release-hang`` exists; so
does a ``jobs list`` that lists it, as a listing that reads each job's status would).
``AGY_BUSY_RUNS=N``: the first N ``run`` invocations are refused before any job is made (exit
75, "429 Too Many Requests", the way a rate-limited service answers).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import math
import os
import re
import sys
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

__all__ = ["Plan", "main", "parse_plan"]

EX_TEMPFAIL = 75
_DIRECTIVES = re.compile(r"\[([^\[\]]*)\]")


class AgyError(Exception):
    """A user-facing error: message on stderr, exit code 1."""


@dataclass(frozen=True)
class Plan:
    """How a fake job behaves: seconds queued, seconds running, final exit code."""

    queue_s: float = 0.2
    run_s: float = 1.0
    exit_code: int = 0
    stuck: bool = False
    unlisted: bool = False
    hang_get: bool = False


def parse_plan(task: str) -> Plan:
    """The plan given by ``[key=value ...]`` directives in ``task``; unknown tokens are ignored."""
    values: dict[str, Any] = {}
    for group in _DIRECTIVES.findall(task):
        for token in re.split(r"[\s,]+", group.strip()):
            key, _, value = token.partition("=")
            try:
                if key in ("stuck", "unlisted", "hang_get") and not value:
                    values[key] = True
                elif key in ("queue", "run") and value:
                    values[f"{key}_s"] = max(0.0, float(value))
                elif key == "exit" and value:
                    values["exit_code"] = int(value)
            except ValueError:
                continue
    return Plan(**values)


def _state_dir() -> Path:
    return Path(os.environ.get("AGY_STATE_DIR") or Path.home() / ".agy-fake")


def _write_atomic(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2), encoding="utf-8")
    os.replace(tmp, path)


def _inject_fault(state: Path, budget_var: str = "AGY_FAIL_CALLS") -> bool:
    """Whether this invocation should fail, counting injected failures in a locked file."""
    budget = int(os.environ.get(budget_var) or 0)
    if budget <= 0:
        return False
    state.mkdir(parents=True, exist_ok=True)
    with open(state / f"{budget_var.lower()}.count", "a+", encoding="utf-8") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        failed = int(f.read().strip() or 0)
        if failed >= budget:
            return False
        f.seek(0)
        f.truncate()
        f.write(str(failed + 1))
        return True


def _iso(ts: float | None) -> str | None:
    # timezone.utc, not datetime.UTC: sandbox/bin/agy may run under an older python3
    return None if ts is None else datetime.fromtimestamp(ts, tz=timezone.utc).isoformat()  # noqa: UP017


def _view(rec: dict[str, Any], now: float) -> dict[str, Any]:
    """The contract object for a job record at time ``now``."""
    start = rec["created_at"] + rec["queue_s"]
    end = start + rec["run_s"]
    started: float | None = start
    finished: float | None = None
    exit_code = None
    if rec.get("cancelled_at") is not None:
        state, finished = "cancelled", rec["cancelled_at"]
        if rec["stuck"] or finished < start:
            started = None
    elif rec["stuck"] or now < start:
        state, started = "queued", None
    elif now < end:
        state = "running"
    else:
        exit_code, finished = rec["exit_code"], end
        state = "succeeded" if exit_code == 0 else "failed"
    return {
        "job_id": rec["job_id"],
        "state": rec.get("state", state),  # a record may pin its state (fault injection)
        "exit_code": exit_code,
        "started_at": _iso(started),
        "finished_at": _iso(finished),
        "task": rec["task"],
        "model": rec["model"],
        "name": rec.get("name"),
        "created_at": _iso(rec["created_at"]),
    }


def _log_lines(rec: dict[str, Any], now: float) -> list[str]:
    view = _view(rec, now)
    lines = [f"[agy] job {rec['job_id']} accepted (model={rec['model']})"]
    if view["started_at"] is None:
        return [*lines, "[agy] cancelled while queued"] if view["state"] == "cancelled" else lines
    lines.append("[agy] worker picked up the job")
    start = rec["created_at"] + rec["queue_s"]
    until = min(now, rec.get("cancelled_at") or now, start + rec["run_s"])
    title = _DIRECTIVES.sub("", rec["task"]).strip()[:60]
    steps = rec["steps"]
    for i in range(1, steps + 1):
        if start + rec["run_s"] * i / steps <= until:
            lines.append(f"step {i}/{steps} working on {title!r}")
    if view["state"] == "succeeded":
        lines.append("[agy] done")
    elif view["state"] == "failed":
        lines.append(f"error: task failed with exit code {view['exit_code']}")
    elif view["state"] == "cancelled":
        lines.append("[agy] cancelled")
    return lines


class _Store:
    """One JSON file per job under ``<state>/jobs``."""

    def __init__(self, root: Path) -> None:
        self.jobs = root / "jobs"

    def create(self, task: str, model: str, name: str | None = None) -> dict[str, Any]:
        plan = parse_plan(task)
        scale = float(os.environ.get("AGY_TIME_SCALE") or 1.0)
        rec = {
            "job_id": f"agy-{uuid.uuid4().hex[:12]}",
            "task": task,
            "model": model,
            "name": name,
            "created_at": time.time(),
            "queue_s": plan.queue_s / scale,
            "run_s": plan.run_s / scale,
            "steps": max(1, math.ceil(plan.run_s)),
            "exit_code": plan.exit_code,
            "stuck": plan.stuck,
            "unlisted": plan.unlisted,
            "hang_get": plan.hang_get,
            "cancelled_at": None,
        }
        self.jobs.mkdir(parents=True, exist_ok=True)
        self.save(rec)
        return rec

    def save(self, rec: dict[str, Any]) -> None:
        _write_atomic(self.jobs / f"{rec['job_id']}.json", rec)

    def load(self, job_id: str) -> dict[str, Any]:
        path = self.jobs / f"{job_id}.json"
        if not re.fullmatch(r"[A-Za-z0-9_-]+", job_id) or not path.is_file():
            raise AgyError(f"job {job_id!r} not found")
        return json.loads(path.read_text(encoding="utf-8"))

    def all(self) -> list[dict[str, Any]]:
        if not self.jobs.is_dir():
            return []
        recs = [json.loads(p.read_text(encoding="utf-8")) for p in self.jobs.glob("agy-*.json")]
        return sorted(recs, key=lambda r: r["created_at"])


_ICONS = {"queued": "◌", "running": "◐", "succeeded": "✔", "failed": "✘", "cancelled": "⊘"}


def _human(view: dict[str, Any]) -> str:
    icon = _ICONS.get(view["state"], "?")
    return "\n".join(
        [
            f"╭─ {icon} Job {view['job_id']} ─────────────",
            f"│  State     {view['state'].upper()}",
            f"│  Task      {view['task']}",
            f"│  Model     {view['model']}",
            f"│  Exit      {view['exit_code'] if view['exit_code'] is not None else '—'}",
            "╰──────────────────────────────────",
        ]
    )


def _emit(obj: Any, as_json: bool) -> None:
    if as_json and not os.environ.get("AGY_IGNORE_JSON"):
        print(json.dumps(obj))
    elif isinstance(obj, list):
        print(f"✨ {len(obj)} job(s)")
        for view in obj:
            print(_human(view))
    else:
        print(_human(obj))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agy", description="fake agy job CLI")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="start a job")
    run.add_argument("--task", required=True)
    run.add_argument("--model", default="agy-default")
    run.add_argument("--name", default=None)
    run.add_argument("--detach", action="store_true")
    run.add_argument("--json", action="store_true")
    jobs = sub.add_parser("jobs", help="inspect jobs").add_subparsers(dest="action", required=True)
    for action in ("get", "cancel", "logs"):
        cmd = jobs.add_parser(action)
        cmd.add_argument("job_id")
        cmd.add_argument("--json", action="store_true")
        if action == "logs":
            cmd.add_argument("--tail", type=int, default=40)
    jobs.add_parser("list").add_argument("--json", action="store_true")
    return parser


def _lose_answer() -> int:
    """The job exists, the caller never learns its id: exit 75 or hang."""
    if os.environ.get("AGY_LOSE_AS") == "hang":
        time.sleep(float(os.environ.get("AGY_HANG_S") or 600))
    print("agy: service temporarily unavailable, try again later", file=sys.stderr)
    return EX_TEMPFAIL


def _hang_until(release: Path, limit_s: float = 600.0) -> None:
    """A hung call: no answer until ``release`` exists (or ``limit_s`` passed)."""
    end = time.monotonic() + limit_s
    while not release.exists() and time.monotonic() < end:
        time.sleep(0.1)


def _dispatch(args: argparse.Namespace, store: _Store) -> int:
    if args.command == "run":
        if _inject_fault(store.jobs.parent, "AGY_BUSY_RUNS"):
            print("agy: 429 Too Many Requests: slow down, try again later", file=sys.stderr)
            return EX_TEMPFAIL
        rec = store.create(args.task, args.model, args.name)
        if _inject_fault(store.jobs.parent, "AGY_LOSE_RUNS"):
            return _lose_answer()
        view = _view(rec, time.time())
        while not args.detach and view["state"] in ("queued", "running") and not rec["stuck"]:
            time.sleep(0.05)
            view = _view(rec, time.time())
        _emit(view, args.json)
    elif args.action == "list":
        listed = [rec for rec in store.all() if not rec.get("unlisted")]
        if any(rec.get("hang_get") for rec in listed):
            _hang_until(store.jobs.parent / "release-hang")
        _emit([_view(rec, time.time()) for rec in listed], args.json)
    else:
        rec = store.load(args.job_id)
        if args.action == "get" and rec.get("hang_get"):
            _hang_until(store.jobs.parent / "release-hang")
        now = time.time()
        if args.action == "cancel" and _view(rec, now)["state"] in ("queued", "running"):
            rec["cancelled_at"] = now
            store.save(rec)
        if args.action == "logs":
            lines = _log_lines(rec, now)
            if args.tail > 0:
                print("\n".join(lines[-args.tail :]))
        else:
            _emit(_view(rec, now), args.json)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the fake CLI; returns the process exit code."""
    args = _parser().parse_args(argv)
    state = _state_dir()
    if os.environ.get("AGY_CALL_LOG"):
        with open(os.environ["AGY_CALL_LOG"], "a", encoding="utf-8") as log:
            log.write(json.dumps(sys.argv[1:] if argv is None else argv) + "\n")
    if _inject_fault(state):
        print("agy: service temporarily unavailable, try again later", file=sys.stderr)
        return EX_TEMPFAIL
    try:
        return _dispatch(args, _Store(state))
    except AgyError as exc:
        print(f"agy: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
