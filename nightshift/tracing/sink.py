"""The night's trace as a sink of its events: each try's span when it ends, each chain's and the
night's when the night ends, built from what the night publishes and handed to the exporter.

The sink's state is its loop's (``nightshift/loop.py``): an event published on any thread is
handed to the loop and taken there, in order, so no lock guards it. A try's span is emitted
once, when its outcome is published, by the run that publishes it: a try that ended before a
crash was emitted then, one re-attached by the rerun is emitted by the rerun, in the trace and
under the ids it began with (``engine/trace_ids.py``). Its states at the service are its span's
events, dated as the ledger dates them (those before this run read from the ledger when the
night began), each with its budget and the level it reached.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from nightshift.engine.events import (
    JobChanged,
    JobFinished,
    LevelChanged,
    NightEvent,
    NightFinished,
)
from nightshift.engine.outcomes import JobOutcome
from nightshift.engine.trace_ids import NightTrace, chain_span_id, try_span_id
from nightshift.loop import NightLoop
from nightshift.states import JobState
from nightshift.tracing.export import SpanExport
from nightshift.tracing.spans import StateSeen, chain_span, night_span, try_span

__all__ = ["Chain", "TraceSink", "chain_name"]

# (label, state) -> (p50, p95) seconds, when a budget is known
BudgetOf = Callable[[str, str], tuple[float, float] | None]
_LEVELS = {"ok": 0, "watch": 1, "alert": 2}
SUBMITTING = JobState.SUBMITTING.value


def chain_name(labels: Iterable[str]) -> str:
    """A chain as its span names it: ``etl:extract -> etl:load``."""
    return " -> ".join(labels)


@dataclass
class Chain:
    """A chain's tries begun in this run: its span's extent, its steps ended, those still out."""

    start: datetime
    end: datetime
    steps: list[JobOutcome] = field(default_factory=list)
    out: set[str] = field(default_factory=set)


class TraceSink:
    """Spans of one night run, from its events; ``close`` emits the chains' and the night's."""

    def __init__(
        self,
        export: SpanExport,
        loop: NightLoop,
        *,
        catalogue: str,
        night: str,
        run_id: str,
        trace: NightTrace,
        started: datetime,
        budget: BudgetOf = lambda _label, _state: None,
        earlier: Mapping[tuple[str, int], list[tuple[str, datetime]]] | None = None,
        links: Iterable[tuple[int, int]] = (),
    ) -> None:
        self.export = export
        self._loop = loop
        self._catalogue, self._night, self._run_id = catalogue, night, run_id
        self.trace = trace
        self._started = started
        self._chain_of = dict(trace.chains)
        self._budget = budget
        # (label, attempt) -> its states as dated: the ledger's before this run, then ours
        self._states: dict[tuple[str, int], list[tuple[str, datetime]]] = {
            key: list(states) for key, states in (earlier or {}).items()
        }
        self._levels: dict[tuple[str, str], str] = {}
        # this run's chains: a chain's span is its trace's, emitted once, by the run that began
        # a try of it (a step re-attached later hangs under it, in that run's trace)
        self._chains: dict[str, Chain] = {}
        self._links = tuple(links)
        self._severity: str | None = None

    def __call__(self, event: NightEvent) -> None:
        """Hand the event to the loop, where the sink's state lives."""
        if isinstance(event, JobChanged | LevelChanged | JobFinished | NightFinished):
            self._loop.soon(self._take, event)

    def _take(self, event: NightEvent) -> None:
        self._loop.owned("the trace sink")
        if isinstance(event, JobChanged):
            states = self._states.setdefault((event.label, event.attempt), [])
            states.append((event.state, event.at))
            chain = self._chain_of.get(event.label)
            if chain is not None and event.state == SUBMITTING:  # a try begun by this run
                extent = self._chains.setdefault(chain, Chain(event.at, event.at))
                extent.out.add(event.label)
        elif isinstance(event, LevelChanged):
            key = (event.alert.label, event.alert.state)
            level = str(event.alert.level)
            if _LEVELS.get(level, 0) > _LEVELS.get(self._levels.get(key, "ok"), 0):
                self._levels[key] = level
        elif isinstance(event, JobFinished):
            self._finished(event)
        elif isinstance(event, NightFinished):
            self._severity = event.summary.severity.value

    def _finished(self, event: JobFinished) -> None:
        outcome = event.outcome
        if event.trace_id is None or not outcome.ran or not outcome.state.final:
            # untraced, kept from an earlier run, never tried, or left running by a stopped
            # night (the run that sees it end emits it)
            return
        trace_id, attempt = int(event.trace_id, 16), max(outcome.attempts, 1)
        parent = int(event.trace_parent or "0", 16) or self.trace.night_span
        states = self._states.pop((outcome.label, attempt), [])
        end = states[-1][1] if states and states[-1][0] == outcome.state.value else event.at
        start = states[0][1] if states else end - timedelta(seconds=outcome.duration_s)
        span = try_span(
            outcome,
            catalogue=self._catalogue,
            night=self._night,
            attempt=attempt,
            trace_id=trace_id,
            span_id=try_span_id(trace_id, self._night, outcome.label, attempt),
            parent_id=parent,
            start=start,
            end=end,
            states=[self._seen(outcome.label, s, at) for s, at in states],
            sampled=self.trace.sampled,
        )
        self.export.emit(span)
        chain = self._chain_of.get(outcome.label)
        extent = self._chains.get(chain) if chain is not None else None
        if extent is not None and trace_id == self.trace.trace_id:
            extent.start, extent.end = min(extent.start, start), max(extent.end, end)
            extent.steps.append(outcome)
            extent.out.discard(outcome.label)

    def _seen(self, label: str, state: str, at: datetime) -> StateSeen:
        budget = self._budget(label, state)
        p50, p95 = budget if budget is not None else (None, None)
        return StateSeen(state, at, p50, p95, self._levels.get((label, state), "ok"))

    def close(self, ended_at: datetime, how: str | None = None) -> int:
        """The night's end (``how``: "interrupted" when it was stopped): emit each chain's span
        and the night's; the spans emitted this run."""
        if self._loop.on_loop() or self._loop.closed:
            self._close(ended_at, how)
        else:

            async def on_loop() -> None:  # after every event handed over before it
                self._close(ended_at, how)

            self._loop.run(on_loop(), timeout=10)
        return self.export.sent

    def _close(self, ended_at: datetime, how: str | None) -> None:
        self._loop.owned("the trace sink")
        trace_id = self.trace.trace_id
        for name, extent in sorted(self._chains.items(), key=lambda c: c[1].start):
            self.export.emit(
                chain_span(
                    name,
                    extent.steps,
                    catalogue=self._catalogue,
                    night=self._night,
                    trace_id=trace_id,
                    span_id=chain_span_id(trace_id, self._run_id, name),
                    parent_id=self.trace.night_span,
                    start=extent.start,
                    end=ended_at if extent.out else extent.end,  # a step still out: the close
                    sampled=self.trace.sampled,
                )
            )
        self._chains.clear()
        self.export.emit(
            night_span(
                catalogue=self._catalogue,
                night=self._night,
                run_id=self._run_id,
                trace_id=self.trace.trace_id,
                span_id=self.trace.night_span,
                parent_id=self.trace.parent_span,
                start=self._started,
                end=ended_at,
                severity=self._severity if how is None else None,
                links=self._links,
                ended=how,
                sampled=self.trace.sampled,
            )
        )
