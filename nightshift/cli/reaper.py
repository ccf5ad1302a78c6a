"""Prefect's temporary server dies with the ``nightshift`` process that started it, even on kill -9.

Prefect 3.9 starts the temporary server as a plain child (``SubprocessASGIServer``) and stops it
only at a clean exit. We start it through a subclass (Prefect keeps one instance, which every
later ``SubprocessASGIServer()`` call returns) that also starts a small reaper: it reads a pipe
only we write to, and when the pipe closes (we are gone, however we died) it stops the server.

The server also runs in a session of its own: a terminal's Ctrl-C (or GNU ``timeout``) signals
the whole process group, and the night still needs its server while it stops (its summary, its
slots); the reaper stops it when we are gone, ``temporary_server_alive`` says if it still runs.

Run as ``python -m nightshift.cli.reaper PID START`` (stdlib only apart from the identity helpers).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

from nightshift.backends.command.supervisor import identity_alive, process_identity

__all__ = ["install", "main", "start_reaper", "temporary_server_alive"]

_GRACE_S = 5.0


def install() -> None:
    """Make the temporary server, when Prefect starts one in this process, die with us."""
    from prefect.server.api.server import SubprocessASGIServer

    class _ReapedServer(SubprocessASGIServer):
        def _run_uvicorn_command(self) -> subprocess.Popen[Any]:
            proc = _own_session(super()._run_uvicorn_command)
            self._reaper = start_reaper(proc.pid)  # kept: its pipe must stay open until we die
            return proc

    _ReapedServer()  # registers itself as the instance Prefect's own calls get


def temporary_server_alive() -> bool | None:
    """Whether the temporary server we started still runs; None if we started none."""
    from prefect.server.api.server import SubprocessASGIServer

    proc = getattr(SubprocessASGIServer._instances.get(None), "server_process", None)
    if proc is None:
        return None
    return proc.poll() is None


def _own_session(start: Any) -> subprocess.Popen[Any]:
    """``start()``'s ``subprocess.Popen`` in a new session (Prefect offers no such option)."""
    popen = subprocess.Popen

    def in_own_session(*args: Any, **kwargs: Any) -> subprocess.Popen[Any]:
        kwargs.setdefault("start_new_session", True)
        return popen(*args, **kwargs)

    # only while the server starts, on the thread that starts it (before the night's threads)
    subprocess.Popen = in_own_session  # type: ignore[misc,assignment]
    try:
        proc: subprocess.Popen[Any] = start()
    finally:
        subprocess.Popen = popen  # type: ignore[misc]
    return proc


def start_reaper(pid: int) -> subprocess.Popen[bytes]:
    """A reaper of the process ``pid``: it stops it once the pipe to its stdin closes (we
    closed it, or we are gone, however we died)."""
    ident = json.dumps(process_identity(pid))
    return subprocess.Popen(
        [sys.executable, "-m", "nightshift.cli.reaper", ident],
        stdin=subprocess.PIPE,  # not inherited by anything else we start (close_fds)
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # a ^C meant for us must not stop it before it has done its job
    )


def main(argv: list[str] | None = None) -> int:
    """Wait until the pipe on stdin closes, then stop the process named in argv."""
    ident = json.loads((argv if argv is not None else sys.argv[1:])[0])
    while os.read(0, 4096):
        pass  # nothing is ever written: EOF means the process that started us is gone
    if not identity_alive(ident):
        return 0  # stopped cleanly (or already gone): never signal a reused pid
    with contextlib.suppress(ProcessLookupError):
        os.kill(int(ident["pid"]), signal.SIGTERM)
        deadline = time.monotonic() + _GRACE_S
        while identity_alive(ident) and time.monotonic() < deadline:
            time.sleep(0.1)
        if identity_alive(ident):
            os.kill(int(ident["pid"]), signal.SIGKILL)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
