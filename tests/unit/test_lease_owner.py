"""A lease's owner string: its parts, and when its holder is a gone process of this machine."""

from __future__ import annotations

import os
import socket

from nightshift.store.lease_owner import default_owner, described, gone_here, machine, parse_owner


def test_an_owner_is_read_back_into_its_parts() -> None:
    owner = parse_owner(default_owner("0b7e-run"))
    assert (owner.host, owner.pid, owner.flow_run, owner.machine) == (
        socket.gethostname(), os.getpid(), "0b7e-run", machine()
    )  # fmt: skip
    assert parse_owner(default_owner()).flow_run is None
    # written before the machine was named, or by hand: no machine, nothing guessed
    assert parse_owner("host-a:12:aaaaaaaa:run-1") == parse_owner("host-a:12:aaaaaaaa:run-1@")
    assert parse_owner("host-a:12:aaaaaaaa:run-1").machine is None
    assert parse_owner("thread-3") == parse_owner("thread-3")
    assert parse_owner("thread-3").pid is None


def dead(_pid: int) -> bool:
    return False


def test_only_a_dead_process_of_this_machine_is_gone() -> None:
    here = machine()
    assert gone_here(f"h:4242:aaaaaaaa@{here}", alive=dead)
    assert gone_here(f"h:4242:aaaaaaaa:run-1@{here}", alive=dead)
    assert not gone_here(f"h:4242:aaaaaaaa@{here}", alive=lambda _pid: True)
    # another machine's (another host of the same name, another container): never looked up
    assert not gone_here("h:4242:aaaaaaaa@0badc0de", here="1234abcd", alive=dead)
    # no machine named (an older night's lease), or no pid: its ttl decides
    assert not gone_here("h:4242:aaaaaaaa", alive=dead)
    assert not gone_here(f"h:x:aaaaaaaa@{here}", alive=dead)
    assert not gone_here(f"h:0:aaaaaaaa@{here}", alive=dead)
    # this very process is never gone
    assert not gone_here(default_owner(), alive=dead)


def test_a_process_that_runs_is_alive() -> None:
    assert gone_here(default_owner()) is False
    assert machine() == machine()


def test_an_owner_reads_as_its_host_pid_and_flow_run() -> None:
    assert described("vm:4242:abcd1234:0b7e-run@da4d8bdc") == "host vm, pid 4242, flow run 0b7e-run"
    assert described("vm:4242:abcd1234") == "host vm, pid 4242"
    assert described("thread-3") == "thread-3"  # another shape: as it is
