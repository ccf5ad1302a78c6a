"""Trace and span ids, and the W3C ``traceparent`` that carries them: values, no I/O.

A night run's trace id is chosen when it begins and written to the ledger (``night_traces``), and
a job try keeps the trace of the run that began it and its parent span (``jobs.trace_id``,
``jobs.trace_parent``). Every span id is *derived* from its trace id and what it names (the
night run's span, a chain's in that run, a try's), so a rerun that re-attaches to a try begun
before a crash finds the same ids without storing each one: the span it emits is the one the
crashed run would have emitted, never a second one beside it.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "NightTrace",
    "chain_span_id",
    "new_trace_id",
    "night_span_id",
    "parse_traceparent",
    "trace_hex",
    "traceparent",
    "try_span_id",
    "try_traceparent",
]

_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


def new_trace_id() -> int:
    """A random 128-bit trace id (never 0, which W3C reserves for "none")."""
    while (value := secrets.randbits(128)) == 0:
        pass
    return value


def _derived(trace_id: int, *parts: str) -> int:
    digest = hashlib.blake2b(
        "\x1f".join([f"{trace_id:032x}", *parts]).encode(), digest_size=8
    ).digest()
    return int.from_bytes(digest, "big") or 1  # 0 is "no span"


def night_span_id(trace_id: int, run_id: str) -> int:
    """A night run's own span (the trace's root, unless Prefect's flow-run span holds it)."""
    return _derived(trace_id, "night", run_id)


def chain_span_id(trace_id: int, run_id: str, chain: str) -> int:
    """A chain's span in a night run (the parent of the steps that run began)."""
    return _derived(trace_id, "chain", run_id, chain)


def try_span_id(trace_id: int, night: str, label: str, attempt: int) -> int:
    """One try of one job of one night."""
    return _derived(trace_id, "try", night, label, str(attempt))


def trace_hex(trace_id: int) -> str:
    """The trace id as tracing backends show it: 32 lowercase hex digits."""
    return f"{trace_id:032x}"


def traceparent(trace_id: int, span_id: int, sampled: bool = True) -> str:
    """The W3C ``traceparent`` header (and ``TRACEPARENT`` variable) for a child of the span."""
    return f"00-{trace_id:032x}-{span_id:016x}-{'01' if sampled else '00'}"


def parse_traceparent(value: str) -> tuple[int, int, bool] | None:
    """(trace id, parent span id, sampled) of a ``traceparent``; None when it is not one."""
    found = _TRACEPARENT.match(value.strip().lower())
    if found is None:
        return None
    trace_id, span_id = int(found[1], 16), int(found[2], 16)
    if trace_id == 0 or span_id == 0:
        return None
    return trace_id, span_id, bool(int(found[3], 16) & 1)


@dataclass(frozen=True)
class NightTrace:
    """A traced night run: its trace id, whether it is kept (sampled), the span its night span
    hangs under (Prefect's flow-run span, or the ``TRACEPARENT`` the night was started with;
    None: the night's span is the trace's root), and each chained job's chain."""

    trace_id: int
    run_id: str
    sampled: bool = True
    parent_span: int | None = None
    chains: Mapping[str, str] = field(default_factory=dict)  # label -> its chain's name

    @property
    def hex(self) -> str:
        return trace_hex(self.trace_id)

    @property
    def night_span(self) -> int:
        return night_span_id(self.trace_id, self.run_id)

    def parent_of(self, label: str) -> int:
        """The span a try of ``label`` begun in this run hangs under: its chain's, or the
        night's."""
        chain = self.chains.get(label)
        if chain is None:
            return self.night_span
        return chain_span_id(self.trace_id, self.run_id, chain)


def try_traceparent(
    trace_hex_id: str, night: str, label: str, attempt: int, sampled: bool = True
) -> str:
    """The ``traceparent`` a job's try hands its job: the try's own span as the parent."""
    trace_id = int(trace_hex_id, 16)
    return traceparent(trace_id, try_span_id(trace_id, night, label, attempt), sampled)
