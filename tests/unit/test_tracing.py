"""A night's spans from its events, through the SDK's in-memory exporter: the tree (a night, a
chain, a failed try, a try re-attached from an earlier run), what each span says, the ids a
rerun finds again, and the settings the standard variables give."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from nightshift.engine.alerts import Alert
from nightshift.engine.events import JobChanged, JobFinished, LevelChanged, NightFinished
from nightshift.engine.outcomes import JobOutcome, NightSummary, Outcome, Severity
from nightshift.engine.trace_ids import (
    NightTrace,
    chain_span_id,
    night_span_id,
    parse_traceparent,
    traceparent,
    try_span_id,
    try_traceparent,
)
from nightshift.loop import NightLoop
from nightshift.tracing.export import SpanExport
from nightshift.tracing.settings import trace_settings
from nightshift.tracing.sink import TraceSink

T0 = datetime(2026, 12, 1, 2, 0, tzinfo=UTC)
TRACE = 0x4BF92F3577B34DA6A3CE929D0E0E4736
EARLIER = 0x1111111111111111AAAAAAAAAAAAAAAA
NIGHT, CAT, RUN = "2026-12-01", "reports", "run-2"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def changed(label: str, state: str, s: float, attempt: int = 1) -> JobChanged:
    return JobChanged(NIGHT, CAT, label, "cli", attempt, "x-" + label, state, at(s), None)


def finished(outcome: JobOutcome, s: float, trace: int, parent: int) -> JobFinished:
    return JobFinished(NIGHT, CAT, outcome, at(s), f"{trace:032x}", f"{parent:016x}")


def test_ids_are_derived_the_same_every_time_and_never_collide() -> None:
    assert night_span_id(TRACE, RUN) == night_span_id(TRACE, RUN)
    ids = {
        night_span_id(TRACE, RUN),
        night_span_id(TRACE, "run-1"),
        chain_span_id(TRACE, RUN, "a -> b"),
        try_span_id(TRACE, NIGHT, "a", 1),
        try_span_id(TRACE, NIGHT, "a", 2),
        try_span_id(TRACE, "2026-12-02", "a", 1),
    }
    assert len(ids) == 6 and all(0 < i < 1 << 64 for i in ids)
    carried = try_traceparent(f"{TRACE:032x}", NIGHT, "a", 1)
    assert carried == traceparent(TRACE, try_span_id(TRACE, NIGHT, "a", 1))
    assert parse_traceparent(carried) == (TRACE, try_span_id(TRACE, NIGHT, "a", 1), True)
    assert parse_traceparent(traceparent(TRACE, 7, sampled=False)) == (TRACE, 7, False)
    for bad in ("", "01-" + carried[3:], "00-" + "0" * 32 + "-00f067aa0ba902b7-01", "00-xyz"):
        assert parse_traceparent(bad) is None, bad


@pytest.mark.parametrize(
    ("environ", "exporters", "ratio"),
    [
        ({}, (), 1.0),  # off unless the variables say otherwise
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, ("otlp",), 1.0),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, ("otlp",), 1.0),
        ({"OTEL_TRACES_EXPORTER": "console,otlp"}, ("console", "otlp"), 1.0),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c"}, (), 1.0),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, (), 1.0),
        (
            {
                "OTEL_TRACES_EXPORTER": "otlp",
                "OTEL_TRACES_SAMPLER": "traceidratio",
                "OTEL_TRACES_SAMPLER_ARG": "0.25",
            },
            ("otlp",),
            0.25,
        ),
    ],
)
def test_the_standard_variables_decide(
    environ: dict[str, str], exporters: tuple[str, ...], ratio: float
) -> None:
    settings = trace_settings(environ)
    assert (settings.exporters, settings.ratio, settings.problems) == (exporters, ratio, ())


def test_settings_it_cannot_follow_are_said_and_sampling_is_per_trace() -> None:
    settings = trace_settings(
        {"OTEL_TRACES_EXPORTER": "jaeger,otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
         "OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.5"}
    )  # fmt: skip
    assert settings.exporters == ("otlp",)
    assert [p.split(":")[0] for p in settings.problems] == [
        "OTEL_TRACES_EXPORTER=jaeger",
        "OTEL_EXPORTER_OTLP_PROTOCOL=grpc",
    ]
    assert settings.sampled(0x0) and not settings.sampled(0xFFFFFFFFFFFFFFFF)
    assert not settings.sampled(0x0, parent=False)  # parent-based: the parent decides
    assert trace_settings({"OTEL_TRACES_SAMPLER": "always_off"}).sampled(0x0, parent=True) is False


def _night(exporter: InMemorySpanExporter, loop: NightLoop, **more: Any) -> TraceSink:
    trace = NightTrace(TRACE, RUN, chains={"etl:a": "etl:a -> etl:b", "etl:b": "etl:a -> etl:b"})
    return TraceSink(
        SpanExport([exporter]),
        loop,
        catalogue=CAT,
        night=NIGHT,
        run_id=RUN,
        trace=trace,
        started=at(0),
        budget=lambda label, state: (4.0, 9.0) if state == "queued" else None,
        **more,
    )


def test_a_nights_span_tree_and_what_each_span_says() -> None:
    exporter = InMemorySpanExporter()
    with NightLoop() as loop:
        sink = _night(
            exporter,
            loop,
            earlier={("old", 1): [("submitting", at(-50)), ("submitted", at(-49))]},
            links=[(EARLIER, night_span_id(EARLIER, "run-1"))],
        )
        trace = sink.trace
        for event in [
            changed("ok", "submitting", 1), changed("ok", "submitted", 2),
            changed("ok", "queued", 2), changed("ok", "running", 20),
            LevelChanged(Alert(NIGHT, CAT, "ok", "cli", "queued", "alert", 18.0, 9.0, at(20))),
            changed("ok", "succeeded", 30),
            changed("bad", "submitting", 1), changed("bad", "submitted", 2),
            changed("bad", "failed", 5),
            changed("etl:a", "submitting", 3), changed("etl:a", "submitted", 4),
            changed("etl:a", "succeeded", 10), changed("etl:b", "submitting", 11),
            changed("old", "running", 3), changed("old", "succeeded", 12),
        ]:  # fmt: skip
            sink(event)
        rows = {"submitted": 10, "succeeded": 9, "failed": 1, "missing": 0}
        tokens = {"prompt": 1200, "output": 300}
        gemini = {"tokens": tokens, "cost_usd": 0.42, "reconciliation": rows}
        ok = JobOutcome("ok", Outcome.SUCCEEDED, 29, 1, "x-ok", backend="gemini_batch", data=gemini)
        sink(finished(ok, 30, TRACE, trace.night_span))
        bad = JobOutcome("bad", Outcome.FAILED, 4, 1, "x-bad", backend="cli", detail="exit 3\nmore")
        sink(finished(bad, 5, TRACE, trace.night_span))
        a = JobOutcome("etl:a", Outcome.SUCCEEDED, 7, 1, "x-a", backend="cli")
        sink(finished(a, 10, TRACE, trace.parent_of("etl:a")))
        # begun by an earlier run (its trace, its parent), re-attached and ended by this one
        old = JobOutcome("old", Outcome.SUCCEEDED, 62, 1, "x-old", backend="cli")
        sink(finished(old, 12, EARLIER, night_span_id(EARLIER, "run-1")))
        # what gets no span: a job kept from an earlier run, one left running by a stop
        kept = JobOutcome("k", Outcome.SUCCEEDED, 5, 1, "x-k", kept=True)
        sink(finished(kept, 12, TRACE, trace.night_span))
        left = JobOutcome("l", Outcome.LEFT_RUNNING, 5, 1, "x-l")
        sink(finished(left, 12, TRACE, trace.night_span))
        summary = NightSummary(Severity.PARTIAL, [ok, bad, a, old])
        sink(NightFinished(NIGHT, CAT, summary, at(40)))
        assert sink.close(at(40)) == 6  # etl:b still out: its chain ends with the night
        sink.export.close()  # the night's end: what is queued goes out
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert set(spans) == {
        "ok (try 1)", "bad (try 1)", "etl:a (try 1)", "old (try 1)",
        "chain etl:a -> etl:b", f"night {CAT} {NIGHT}",
    }  # fmt: skip
    night = spans[f"night {CAT} {NIGHT}"]
    assert night.parent is None and night.context.span_id == trace.night_span
    assert (
        night.status.status_code is StatusCode.ERROR and night.status.description == "night partial"
    )
    assert night.attributes["cicd.pipeline.result"] == "failure"
    assert [(link.context.trace_id, link.context.span_id) for link in night.links] == [
        (EARLIER, night_span_id(EARLIER, "run-1"))
    ]
    chain = spans["chain etl:a -> etl:b"]
    assert chain.parent.span_id == trace.night_span
    assert (chain.start_time, chain.end_time) == (_ns(at(3)), _ns(at(40)))
    ok_span = spans["ok (try 1)"]
    assert ok_span.context.trace_id == TRACE and ok_span.parent.span_id == trace.night_span
    assert ok_span.context.span_id == try_span_id(TRACE, NIGHT, "ok", 1)
    assert (ok_span.start_time, ok_span.end_time) == (_ns(at(1)), _ns(at(30)))
    assert ok_span.status.status_code is StatusCode.OK
    assert dict(ok_span.attributes) == {
        "cicd.pipeline.name": CAT,
        "cicd.pipeline.task.name": "ok",
        "cicd.pipeline.task.run.id": f"{NIGHT}/ok#1",
        "cicd.pipeline.task.run.result": "success",
        "nightshift.catalogue": CAT,
        "nightshift.night": NIGHT,
        "nightshift.job.label": "ok",
        "nightshift.job.attempt": 1,
        "nightshift.job.state": "succeeded",
        "nightshift.job.backend": "gemini_batch",
        "gen_ai.provider.name": "gcp.gemini",
        "nightshift.job.external_id": "x-ok",
        "gen_ai.usage.input_tokens": 1200,
        "gen_ai.usage.output_tokens": 300,
        "nightshift.rows.submitted": 10,
        "nightshift.rows.succeeded": 9,
        "nightshift.rows.failed": 1,
        "nightshift.rows.missing": 0,
        "nightshift.cost_usd": 0.42,
        "nightshift.level": "alert",
    }
    events = [(e.name, e.timestamp, dict(e.attributes)) for e in ok_span.events]
    budget = {"nightshift.budget.p50_s": 4.0, "nightshift.budget.p95_s": 9.0}
    assert events[2] == ("queued", _ns(at(2)), {"nightshift.level": "alert", **budget})
    assert [e[0] for e in events] == ["submitting", "submitted", "queued", "running", "succeeded"]
    bad_span = spans["bad (try 1)"]
    assert bad_span.status.status_code is StatusCode.ERROR
    assert bad_span.status.description == "exit 3"
    assert bad_span.attributes["nightshift.job.reason"] == "exit 3"
    assert bad_span.attributes["cicd.pipeline.task.run.result"] == "failure"
    assert spans["etl:a (try 1)"].parent.span_id == chain.context.span_id
    old_span = spans["old (try 1)"]  # its whole life, the earlier run's rows first
    assert old_span.context.trace_id == EARLIER
    assert old_span.parent.span_id == night_span_id(EARLIER, "run-1")
    assert old_span.start_time == _ns(at(-50))
    assert [e.name for e in old_span.events] == ["submitting", "submitted", "running", "succeeded"]


def test_an_unsampled_night_exports_nothing() -> None:
    exporter = InMemorySpanExporter()
    with NightLoop() as loop:
        sink = TraceSink(
            SpanExport([exporter]), loop, catalogue=CAT, night=NIGHT, run_id=RUN,
            trace=NightTrace(TRACE, RUN, sampled=False), started=at(0),
        )  # fmt: skip
        sink(changed("a", "submitting", 1))
        sink(finished(JobOutcome("a", Outcome.SUCCEEDED, 1, 1, "x"), 2, TRACE, 1))
        assert sink.close(at(3)) == 0
        sink.export.close()
    assert exporter.get_finished_spans() == ()


def _ns(when: datetime) -> int:
    return int(when.timestamp() * 1_000_000_000)


def test_a_night_started_inside_a_span_joins_its_trace() -> None:
    """Prefect's flow-run span (any current span) first, else the TRACEPARENT it was started
    with; else None: the night's span is the root of a trace of its own."""
    from opentelemetry import trace as otel
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    from nightshift.tracing.night import _started_inside

    carried = traceparent(EARLIER, 0xABC, sampled=False)
    assert _started_inside({}) is None
    assert _started_inside({"TRACEPARENT": carried}) == (EARLIER, 0xABC, False)
    flow_run = SpanContext(TRACE, 0x77, is_remote=False, trace_flags=TraceFlags(1))
    with otel.use_span(NonRecordingSpan(flow_run)):
        assert _started_inside({"TRACEPARENT": carried}) == (TRACE, 0x77, True)


def test_the_catalogues_trace_url_is_a_template_with_the_trace_id(tmp_path: Any) -> None:
    from nightshift.config.loader import parse_catalogue
    from nightshift.errors import CatalogueError

    jobs = 'jobs:\n  - {label: a, backend: command, argv: ["true"]}\n'
    good = parse_catalogue(
        'telemetry: {trace_url: "https://tempo.internal/trace/{trace_id}"}\n' + jobs,
        tmp_path / "n.yaml",
    )
    assert good.telemetry.url_of("4bf9") == "https://tempo.internal/trace/4bf9"
    assert parse_catalogue(jobs, tmp_path / "n.yaml").telemetry.url_of("4bf9") is None
    with pytest.raises(CatalogueError) as refused:
        parse_catalogue('telemetry: {trace_url: "https://tempo/x"}\n' + jobs, tmp_path / "n.yaml")
    said = str(refused.value)
    assert "n.yaml:1" in said and "telemetry.trace_url" in said and "{trace_id}" in said, said
