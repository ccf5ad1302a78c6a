"""A night run's trace, begun and ended: the one place that decides whether a night is traced.

``begin_trace`` reads the standard variables (``settings.py``); off, it returns None having
imported nothing of OpenTelemetry. On, it chooses the run's trace (inside the span that started
it, when there is one: Prefect's flow-run span, or the ``TRACEPARENT`` the night was started
with), writes it down (``store/night_traces.py``), emits the spans of earlier runs of the night
that were killed before they could (their night span, and their chains'), and returns the sink
that emits this run's. ``end_trace`` emits the chains' and the night's spans, writes down that
they were, and waits a little for the exporter.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime

from nightshift.budgets.lookup import Budgets
from nightshift.config.catalogue import Catalogue
from nightshift.engine.outcomes import JobOutcome, Outcome
from nightshift.engine.trace_ids import (
    NightTrace,
    chain_span_id,
    new_trace_id,
    night_span_id,
    parse_traceparent,
)
from nightshift.loop import NightLoop
from nightshift.states import FINAL
from nightshift.store.ledger import JobRecord, Ledger
from nightshift.store.night_traces import NightTraces, TracedRun
from nightshift.tracing.export import SpanExport, exporters_for
from nightshift.tracing.settings import trace_settings
from nightshift.tracing.sink import BudgetOf, TraceSink, chain_name
from nightshift.tracing.spans import chain_span, night_span

__all__ = ["begin_trace", "budget_of", "end_trace"]

Logger = logging.Logger | logging.LoggerAdapter  # type: ignore[type-arg]
log = logging.getLogger("nightshift.tracing")
_NOT_INSTALLED = (
    "tracing: OTEL_* variables ask for traces, but the OpenTelemetry SDK is not installed "
    "(pip install 'nightshift[otel]'); the night runs untraced"
)


def begin_trace(
    environ: Mapping[str, str],
    *,
    ledger: Ledger,
    night: str,
    run_id: str,
    chains: list[list[str]],
    loop: NightLoop,
    now: datetime,
    logger: Logger,
    budget: BudgetOf = lambda _label, _state: None,
) -> TraceSink | None:
    """The night run's trace sink, or None when the night is not traced."""
    settings = trace_settings(environ)
    for problem in settings.problems:  # on the terminal too (the CLI shows nightshift.tracing)
        log.warning("tracing: %s", problem)
    if not settings.on:
        return None
    try:
        import opentelemetry.sdk.trace  # noqa: F401  (the extra is installed)
    except ImportError:
        log.warning("%s", _NOT_INSTALLED)
        return None
    parent = _started_inside(environ)
    trace_id = parent[0] if parent is not None else new_trace_id()
    sampled = settings.sampled(trace_id, parent[2] if parent is not None else None)
    trace = NightTrace(
        trace_id,
        run_id,
        sampled,
        parent[1] if parent is not None else None,
        {label: chain_name(chain) for chain in chains for label in chain},
    )
    export = SpanExport(exporters_for(settings))
    traces = NightTraces(ledger.engine, ledger.catalogue)
    earlier = [r for r in traces.of(night) if r.run_id != run_id]
    records = ledger.jobs_of(night) if earlier else []
    for killed in (r for r in earlier if r.emitted_at is None):
        _close_killed(export, traces, ledger, night, killed, records, trace.chains, now)
    parent_hex = f"{trace.parent_span:016x}" if trace.parent_span is not None else None
    traces.begin(night, TracedRun(run_id, trace.hex, parent_hex, sampled, now, None))
    logger.info("night %s: trace %s", night, trace.hex)
    return TraceSink(
        export,
        loop,
        catalogue=ledger.catalogue,
        night=night,
        run_id=run_id,
        trace=trace,
        started=now,
        budget=budget,
        earlier=_earlier_states(ledger, night) if earlier else None,
        links=[
            (int(r.trace_id, 16), night_span_id(int(r.trace_id, 16), r.run_id)) for r in earlier
        ],
    )


def budget_of(budgets: Budgets | None, catalogue: Catalogue) -> BudgetOf:
    """Each job's learned p50 and p95 in a state, for its span's events (none while learning)."""

    def of(label: str, state: str) -> tuple[float, float] | None:
        if budgets is None:
            return None
        found = budgets.budget(catalogue.key, label, state, catalogue.job(label).backend)
        return (found.p50, found.p95) if found is not None else None

    return of


def end_trace(sink: TraceSink, ledger: Ledger, night: str, at: datetime, how: str | None) -> None:
    """Emit the run's chains and night span, write down that they were, flush the exporter."""
    try:
        sink.close(at, how)
        NightTraces(ledger.engine, ledger.catalogue).emitted(night, sink.trace.run_id, at)
    finally:
        sink.export.close()


def _started_inside(environ: Mapping[str, str]) -> tuple[int, int, bool] | None:
    """The span the night runs inside: Prefect's flow-run span when its telemetry is on, else
    the ``TRACEPARENT`` it was started with (OpenTelemetry's environment carrier)."""
    from opentelemetry import trace as otel

    context = otel.get_current_span().get_span_context()
    if context.is_valid:
        return context.trace_id, context.span_id, context.trace_flags.sampled
    carried = environ.get("TRACEPARENT")
    return parse_traceparent(carried) if carried else None


def _night_span_of(run: TracedRun) -> tuple[int, int]:
    """(trace id, span id) of an earlier run's night span: this run's span links to it."""
    trace_id = int(run.trace_id, 16)
    return trace_id, night_span_id(trace_id, run.run_id)


States = dict[tuple[str, int], list[tuple[str, datetime]]]


def _earlier_states(ledger: Ledger, night: str) -> States:
    """Each try's states as the ledger dated them before this run (a re-attached try's span
    shows its whole life)."""
    states: States = {}
    for row in ledger.dwells(night):
        if row.attempt is not None:
            states.setdefault((row.label, row.attempt), []).append((row.to_state, row.at))
    return states


def _close_killed(
    export: SpanExport,
    traces: NightTraces,
    ledger: Ledger,
    night: str,
    killed: TracedRun,
    records: list[JobRecord],
    chains: Mapping[str, str],
    now: datetime,
) -> None:
    """An earlier run of the night that died without emitting its span (kill -9): its night
    span and its chains' now, so no try it began is left without a parent."""
    trace_id = int(killed.trace_id, 16)
    mine = [r for r in records if r.trace_id == killed.trace_id]
    ended = max(
        [killed.started_at, *[t for r in mine for t in (r.submitted_at, r.finished_at) if t]]
    )
    by_chain: dict[str, list[JobRecord]] = {}
    for record in mine:
        if (chain := chains.get(record.label)) is not None:
            by_chain.setdefault(chain, []).append(record)
    for name, steps in by_chain.items():
        starts = [r.submitted_at for r in steps if r.submitted_at] or [killed.started_at]
        export.emit(
            chain_span(
                name,
                [_as_outcome(r) for r in steps],
                catalogue=ledger.catalogue,
                night=night,
                trace_id=trace_id,
                span_id=chain_span_id(trace_id, killed.run_id, name),
                parent_id=night_span_id(trace_id, killed.run_id),
                start=min(starts),
                end=ended,
                sampled=killed.sampled,
            )
        )
    export.emit(
        night_span(
            catalogue=ledger.catalogue,
            night=night,
            run_id=killed.run_id,
            trace_id=trace_id,
            span_id=night_span_id(trace_id, killed.run_id),
            parent_id=int(killed.parent_span, 16) if killed.parent_span else None,
            start=killed.started_at,
            end=ended,
            severity=None,
            ended="killed",
            sampled=killed.sampled,
        )
    )
    traces.emitted(night, killed.run_id, now)


def _as_outcome(record: JobRecord) -> JobOutcome:
    """A step of a killed run's chain, as far as its row says (still out: left running)."""
    state = Outcome(record.state) if record.state in FINAL else Outcome.LEFT_RUNNING
    return JobOutcome(record.label, state, backend=record.backend)
