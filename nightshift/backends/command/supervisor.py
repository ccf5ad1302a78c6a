"""Supervisor of one command job: runs argv detached and records its exit code atomically.

Usage: ``python command_runner.py JOBDIR [--grace S] [--cwd DIR] -- ARGV...``

Stdlib only and started by file path, so it works whatever the job's cwd, env or venv. It
daemonizes (double fork) so the submitter never holds a zombie and the job outlives it. Files it
writes in JOBDIR: runner.pid, child.pid, started_at, finished_at, exit_code (last, atomically),
and stderr_first: the first non-empty line the job wrote to stderr (its failure's one line). The
job's stderr passes through the supervisor on its way to the log for that; a supervisor killed
with -9 leaves the job without a reader for its stderr (the job is lost then anyway).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

__all__ = [
    "CANCEL",
    "CHILD_PID",
    "EXIT_CODE",
    "FINISHED_AT",
    "FIRST_STDERR",
    "LOG",
    "RUNNER_PID",
    "STARTED_AT",
    "START_ERROR",
    "group_alive",
    "identity_alive",
    "keep_writing",
    "main",
    "process_identity",
    "write_atomic",
]

RUNNER_PID = "runner.pid"
CHILD_PID = "child.pid"
STARTED_AT = "started_at"
FINISHED_AT = "finished_at"
EXIT_CODE = "exit_code"
CANCEL = "cancel"
LOG = "output.log"
START_ERROR = "start_error"  # why argv could not be started, one line, for the job's detail
FIRST_STDERR = "stderr_first"  # the job's first non-empty stderr line, for the job's detail
_FIRST_CHARS = 500
_TEE_JOIN_S = 2.0  # a grandchild may keep stderr open after the job exits: don't wait for it
_HEAD_BYTES = 65536  # a first line longer than this is cut there

# a record the disk has no room for is tried again this often, for a day at most
WRITE_RETRY_S, WRITE_GIVE_UP_S = 5.0, 24 * 3600.0
# exit codes for "argv could not be started", as a shell would report them
_NOT_FOUND, _NOT_EXECUTABLE = 127, 126


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so readers see either nothing or all of it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


@functools.cache
def keep_writing(
    path: Path,
    text: str,
    *,
    wait_s: float = WRITE_RETRY_S,
    give_up_s: float = WRITE_GIVE_UP_S,
    sleep: Any = time.sleep,
) -> bool:
    """``write_atomic``, tried again every ``wait_s`` while the disk is full (or the quota
    reached), for ``give_up_s`` at most; False if it never could. Each failure once to stderr
    (the job's log, when there is room for it)."""
    waited = 0.0
    said = False
    while True:
        try:
            write_atomic(path, text)
            return True
        except OSError as exc:
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            with contextlib.suppress(OSError):
                tmp.unlink()
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT) or waited >= give_up_s:
                return False
            if not said:
                with contextlib.suppress(OSError):
                    os.write(2, f"[nightshift] cannot write {path.name}: {exc}; waiting\n".encode())
                said = True
            sleep(wait_s)
            waited += wait_s


def _boot_id() -> str | None:
    """This boot's id: read once, a process never outlives its boot (streams check often)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """(state letter, start time in ticks) from /proc, or None where /proc is unavailable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    return fields[0], fields[19]


def process_identity(pid: int) -> dict[str, Any]:
    """What identifies ``pid`` across pid reuse and reboots."""
    stat = _proc_stat(pid)
    return {"pid": pid, "start": stat[1] if stat else None, "boot": _boot_id()}


def identity_alive(ident: dict[str, Any]) -> bool:
    """Whether the process recorded by process_identity() still runs (zombies count as dead)."""
    pid = int(ident["pid"])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    boot = _boot_id()
    if ident.get("boot") and boot and ident["boot"] != boot:
        return False
    stat = _proc_stat(pid)
    if stat is None:
        return True
    state, start = stat
    return state not in ("Z", "X") and (ident.get("start") in (None, start))


def group_alive(pgid: int) -> bool:
    """Whether any process is left in process group ``pgid``."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _killpg(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _start_problem(exc: OSError, executable: str, cwd: str | None) -> str:
    """Why ``executable`` could not be started, in a few words."""
    if isinstance(exc, FileNotFoundError):
        if cwd is not None and exc.filename == cwd:
            return f"working directory {cwd!r} not found"
        return f"executable {executable!r} not found"
    if isinstance(exc, PermissionError):
        return f"cannot run {executable!r}: permission denied"
    return f"cannot start {executable!r}: {exc.strerror or exc}"


def _grace(jobdir: Path, default: float) -> float:
    try:
        return float(json.loads((jobdir / CANCEL).read_text())["grace_s"])
    except (OSError, ValueError, KeyError, TypeError):
        return default


class _FirstLine:
    """The first non-empty line of a stream read in chunks (its failure's one line)."""

    def __init__(self) -> None:
        self.head = b""
        self.line: str | None = None

    def feed(self, chunk: bytes, *, last: bool = False) -> str | None:
        """Take ``chunk``; the line, the first time it is complete (or at the stream's end)."""
        if self.line is not None:
            return None
        self.head += chunk
        lines = self.head.split(b"\n")
        done, self.head = lines[:-1], lines[-1]
        if last or len(self.head) > _HEAD_BYTES:
            done, self.head = [*done, self.head], b""
        for raw in done:
            if raw.strip():
                self.line = raw.decode("utf-8", "replace").strip()[:_FIRST_CHARS]
                return self.line
        return None


class _Supervisor:
    """Runs the child in its own process group and turns signals into a recorded result.

    One thread: the job's stderr, its exit (SIGCHLD) and a cancel (SIGTERM and the like) all
    wake one ``select`` through the signal wakeup pipe, whose timeout is the cancel's deadline.
    """

    def __init__(self, jobdir: Path, grace: float, cwd: str | None, argv: list[str]) -> None:
        self.jobdir, self.grace, self.cwd, self.argv = jobdir, grace, cwd, argv
        self.child: subprocess.Popen[bytes] | None = None
        self.deadline: float | None = None
        self.forwarded = False
        self.first = _FirstLine()

    def on_signal(self, signum: int, frame: object) -> None:
        if self.deadline is None:
            self.deadline = time.monotonic() + _grace(self.jobdir, self.grace)
        self._forward()

    def _forward(self) -> None:
        if self.child is None or self.forwarded or self.deadline is None:
            return
        self.forwarded = True
        _killpg(self.child.pid, signal.SIGTERM)

    def run(self) -> int:
        if (self.jobdir / CANCEL).exists():
            return self._record(-signal.SIGTERM)
        wake = self._wakeup()
        try:
            self.child = subprocess.Popen(
                self.argv,
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            print(f"nightshift: cannot start {self.argv[0]!r}: {exc}", file=sys.stderr, flush=True)
            write_atomic(self.jobdir / START_ERROR, _start_problem(exc, self.argv[0], self.cwd))
            code = _NOT_FOUND if isinstance(exc, FileNotFoundError) else _NOT_EXECUTABLE
            return self._record(code)
        write_atomic(self.jobdir / CHILD_PID, json.dumps(process_identity(self.child.pid)))
        write_atomic(self.jobdir / STARTED_AT, f"{time.time()!r}\n")
        code = self._watch(self.child, wake)
        if self.deadline is not None:
            # cancelled: leftovers of the group get the rest of the grace, then SIGKILL
            while group_alive(self.child.pid) and time.monotonic() < self.deadline:
                time.sleep(0.05)
            _killpg(self.child.pid, signal.SIGKILL)
            end = time.monotonic() + 2.0
            while group_alive(self.child.pid) and time.monotonic() < end:
                time.sleep(0.02)
        return self._record(code)

    @staticmethod
    def _wakeup() -> int:
        """A pipe that every handled signal writes to, SIGCHLD among them: select wakes on it."""
        read, write = os.pipe()
        os.set_blocking(read, False)
        os.set_blocking(write, False)
        signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        return read

    def _watch(self, child: subprocess.Popen[bytes], wake: int) -> int:
        """Tee the job's stderr until it exits, SIGKILL its group at a cancel's deadline."""
        assert child.stderr is not None
        err = child.stderr.fileno()
        os.set_blocking(err, False)
        sel = selectors.DefaultSelector()
        sel.register(wake, selectors.EVENT_READ)
        sel.register(err, selectors.EVENT_READ)
        killed = False
        while (code := child.poll()) is None:
            self._forward()  # a signal that arrived while we were starting the child
            timeout = None
            if self.deadline is not None and not killed:
                timeout = self.deadline - time.monotonic()
                if timeout <= 0:
                    _killpg(child.pid, signal.SIGKILL)
                    killed, timeout = True, None
            self._serve(sel, wake, err, timeout)
        # a grandchild may keep stderr open after the job exits: don't wait for it
        end = time.monotonic() + _TEE_JOIN_S
        while err in sel.get_map() and (left := end - time.monotonic()) > 0:
            self._serve(sel, wake, err, left)
        sel.close()
        return code

    def _serve(
        self, sel: selectors.BaseSelector, wake: int, err: int, timeout: float | None
    ) -> None:
        for key, _events in sel.select(timeout):
            if key.fd == wake:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake, 512)
            elif not self._tee(err):
                sel.unregister(err)

    def _tee(self, err: int) -> bool:
        """Copy what the job wrote to stderr to the log (fd 2); False at its end."""
        try:
            chunk = os.read(err, 65536)
        except BlockingIOError:
            return True
        except OSError:
            chunk = b""
        if chunk:
            with contextlib.suppress(OSError):
                os.write(2, chunk)
        if (line := self.first.feed(chunk, last=not chunk)) is not None:
            with contextlib.suppress(OSError):  # a full disk loses this line, not the job
                write_atomic(self.jobdir / FIRST_STDERR, line + "\n")
        return bool(chunk)

    def _record(self, code: int) -> int:
        finished = f"{time.time()!r}\n"
        # a full disk must not lose the job's outcome: the supervisor stays (its job reads as
        # still running) and writes it once there is room again
        keep_writing(self.jobdir / FINISHED_AT, finished)
        keep_writing(self.jobdir / EXIT_CODE, f"{code}\n")
        return 0


def _parse(args: list[str]) -> tuple[Path, float, str | None, list[str]]:
    if "--" not in args:
        raise SystemExit("usage: command_runner.py JOBDIR [--grace S] [--cwd DIR] -- ARGV...")
    split = args.index("--")
    head, argv = args[:split], args[split + 1 :]
    if not head or not argv:
        raise SystemExit("command_runner: need JOBDIR and a non-empty ARGV")
    opts = dict(zip(head[1::2], head[2::2], strict=False))
    return Path(head[0]).resolve(), float(opts.get("--grace", 5.0)), opts.get("--cwd"), argv


def main(args: list[str] | None = None) -> int:
    """Daemonize, supervise argv, record its exit code; returns this process's exit code."""
    jobdir, grace, cwd, argv = _parse(sys.argv[1:] if args is None else args)
    sup = _Supervisor(jobdir, grace, cwd, argv)
    # installed before the fork so a cancel can never hit a supervisor without its handler
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, sup.on_signal)
    pid = os.fork()
    if pid:
        write_atomic(jobdir / RUNNER_PID, json.dumps(process_identity(pid)))
        os._exit(0)
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDONLY)
    log = os.open(jobdir / LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(devnull, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(devnull)
    os.close(log)
    return sup.run()


if __name__ == "__main__":
    raise SystemExit(main())
