"""Who holds a lease, as its owner string says, and whether that holder is a process of this
machine that is gone (a night killed with kill -9: its lease need not be waited out).

An owner is ``host:pid:tag[:flow-run]@machine``: ``machine`` names this machine and its process
namespace (two containers, or two hosts of the same name, differ), so a pid is only ever looked
up where it was taken. An owner written without ``@machine`` (an older night, a test's name) is
never found gone: its lease runs out on its ttl, as before.
"""

from __future__ import annotations

import hashlib
import os
import socket
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

__all__ = [
    "Owner",
    "default_owner",
    "described",
    "gone_here",
    "machine",
    "parse_owner",
    "pid_alive",
]


@dataclass(frozen=True)
class Owner:
    """An owner string's parts (None where it has none)."""

    host: str
    pid: int | None
    flow_run: str | None
    machine: str | None


def default_owner(flow_run: str | None = None) -> str:
    """``host:pid:uuid8[:flow-run]@machine``: names the holder for humans, stays unique per
    lease, and lets a rerun on this machine see that its holder's process is gone."""
    run = f":{flow_run}" if flow_run else ""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}{run}@{machine()}"


def parse_owner(owner: str) -> Owner:
    """The parts of ``host:pid:tag[:flow-run][@machine]`` (any other text: its host only)."""
    head, at, where = owner.rpartition("@")
    if not at:
        head, where = owner, ""
    parts = head.split(":")
    pid = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None
    run = parts[3] if len(parts) > 3 and parts[3] else None
    return Owner(parts[0], pid, run, where or None)


def described(owner: str) -> str:
    """The owner as people read it: ``host vm, pid 4242, flow run 0b7e...`` (an owner string of
    another shape as it is)."""
    found = parse_owner(owner)
    if found.pid is None:
        return owner
    run = f", flow run {found.flow_run}" if found.flow_run else ""
    return f"host {found.host}, pid {found.pid}{run}"


def gone_here(
    owner: str, *, here: str | None = None, alive: Callable[[int], bool] | None = None
) -> bool:
    """Whether ``owner`` was a process of this machine (``here``: ``machine()``) that no longer
    runs (``alive``: ``pid_alive``). A pid used again by another process reads as alive: the
    lease is then waited out, never taken from a live night."""
    found = parse_owner(owner)
    if found.machine is None or found.pid is None or found.pid <= 0:
        return False
    if found.machine != (here if here is not None else machine()):
        return False
    if found.pid == os.getpid():
        return False  # this process: alive, whatever a test's ``alive`` says
    return not (alive or pid_alive)(found.pid)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs here (a zombie, killed and not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # no /proc (macOS), or it ended meanwhile: as kill said
        return True
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


@cache
def machine() -> str:
    """Eight hex digits naming this machine since its boot and this process namespace: its
    boot id and pid namespace on Linux, its hardware address and host name on macOS; where
    neither can be read, this process's own (no lease of it is ever found gone)."""
    if sys.platform == "darwin":  # no pid namespaces
        parts = [f"{uuid.getnode():x}", socket.gethostname()]
    else:
        try:
            parts = [
                Path("/proc/sys/kernel/random/boot_id").read_text().strip(),
                os.readlink("/proc/self/ns/pid"),
            ]
        except OSError:  # one without the other could name two containers alike: this
            return uuid.uuid4().hex[:8]  # process's own, so nobody takes a lease over here
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:8]
