"""Prefect's temporary server dies with the ``nightshift`` process that started it, even on kill -9.

Prefect 3.9 starts the temporary server as a plain child (``SubprocessASGIServer``) and stops it
only at a clean exit. We start it through a subclass (Prefect keeps one instance, which every
later ``SubprocessASGIServer()`` call returns) that also starts a small reaper: it reads a pipe
only we write to, and when the pipe closes (we are gone, however we died) it stops the server.

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

__all__ = ["install", "main"]

_GRACE_S = 5.0


def install() -> None:
    """Make the temporary server, when Prefect starts one in this process, die with us."""
    from prefect.server.api.server import SubprocessASGIServer

    class _ReapedServer(SubprocessASGIServer):
        def _run_uvicorn_command(self) -> subprocess.Popen[Any]:
            proc = super()._run_uvicorn_command()
            self._reaper = _start_reaper(proc.pid)  # kept: its pipe must stay open until we die
            return proc

    _ReapedServer()  # registers itself as the instance Prefect's own calls get


def _start_reaper(pid: int) -> subprocess.Popen[bytes]:
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
