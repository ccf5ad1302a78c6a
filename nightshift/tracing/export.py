"""Finished spans handed to OpenTelemetry's SDK: the only module that imports it, and only when a
night is traced (``nightshift[otel]``: opentelemetry-sdk and the OTLP/HTTP exporter).

Each span is built whole from a ``SpanRecord`` (its ids, its backdated start, its end) and put on
the SDK's batch processor: a bounded queue that one SDK thread exports from. A collector that is
down or slow costs the night nothing: a full queue drops spans (the SDK says so once), and the
night's end waits ``flush_s`` at most for what is left, then says in one line how many spans
were not sent.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from nightshift.tracing.settings import TraceSettings
from nightshift.tracing.spans import SpanRecord

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

__all__ = ["QUEUE", "SpanExport", "exporters_for"]

log = logging.getLogger("nightshift.tracing")
QUEUE = 4096  # spans waiting for export at most (a 1,000-job night's, with its retries)
FLUSH_S = 2.0  # what the night's end waits for its last spans, at most


def exporters_for(settings: TraceSettings) -> list[SpanExporter]:
    """The SDK's exporters the settings name (each reads its own ``OTEL_EXPORTER_*``)."""
    out: list[SpanExporter] = []
    for name in settings.exporters:
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            out.append(OTLPSpanExporter())
        elif name == "console":
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter

            out.append(ConsoleSpanExporter())
    return out


def _shut(processor: Any, within_s: float) -> None:
    """Shut a batch processor down waiting ``within_s`` at most: its own ``shutdown()`` waits
    30 s and its ``force_flush`` ignores its timeout (opentelemetry-python#4568), so its batch
    processor is asked directly where it takes a timeout."""
    inner = getattr(processor, "_batch_processor", None)
    shutdown = getattr(inner, "shutdown", None)
    if shutdown is not None and "timeout_millis" in inspect.signature(shutdown).parameters:
        shutdown(timeout_millis=int(within_s * 1000))
    else:
        processor.shutdown()


class _Counted:
    """An exporter that counts what it exported (the SDK's processors do not say)."""

    def __init__(self, inner: SpanExporter) -> None:
        self._inner = inner
        self.exported = 0
        self.failure: str | None = None

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        try:
            result = self._inner.export(spans)
        except Exception as exc:  # a refused connection, as some exporters raise it
            self.failure = f"{type(exc).__name__}: {exc}"
            return SpanExportResult.FAILURE
        if result == SpanExportResult.SUCCESS:
            self.exported += len(spans)
        else:
            self.failure = "the collector did not take them"
        return result

    def shutdown(self, timeout_millis: float = 30_000) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._inner.force_flush(timeout_millis)


def _ns(at: datetime) -> int:
    return int(at.timestamp() * 1_000_000_000)


class SpanExport:
    """Where a night's finished spans go: the exporters, behind one bounded batch queue each."""

    def __init__(self, exporters: Sequence[SpanExporter], flush_s: float = FLUSH_S) -> None:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES as every SDK reads them
        self._resource = Resource.create({"service.name": "nightshift"}).merge(Resource.create({}))
        self._scope = InstrumentationScope("nightshift", _version())
        self._counted = [_Counted(e) for e in exporters]
        self._processors = [
            BatchSpanProcessor(
                cast("SpanExporter", c), max_queue_size=QUEUE, schedule_delay_millis=500
            )
            for c in self._counted
        ]
        self._flush_s = flush_s
        self.sent = 0
        # the exporter says each failed try of each batch (a collector down: a line a second);
        # the night says once, at its end, how many spans were dropped
        logging.getLogger("opentelemetry.exporter.otlp").setLevel(logging.CRITICAL)

    def emit(self, record: SpanRecord) -> None:
        """Queue one finished span for export (never blocks on the collector)."""
        if not record.sampled or not self._processors:
            return
        span = self._readable(record)
        for processor in self._processors:
            processor.on_end(span)
        self.sent += 1

    def close(self) -> None:
        """Wait ``flush_s`` at most for the spans still queued (the SDK's shutdown: its
        ``force_flush`` waits for a slow collector however long it takes); one line says how
        many were not sent."""
        for processor, counted in zip(self._processors, self._counted, strict=True):
            try:
                _shut(processor, self._flush_s)
            except Exception as exc:  # the exporter's own bug: the night is over anyway
                log.warning("tracing: the exporter failed: %s", exc)
            if (lost := self.sent - counted.exported) > 0:
                log.warning(
                    "tracing: %d of %d spans not sent within %gs of the night's end (the "
                    "collector down or slow? %s); they are dropped",
                    lost,
                    self.sent,
                    self._flush_s,
                    counted.failure or "no answer",
                )
        self._processors, self._counted = [], []

    def _readable(self, record: SpanRecord) -> Any:
        from opentelemetry.sdk.trace import Event, ReadableSpan
        from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

        flags = TraceFlags(TraceFlags.SAMPLED)

        def context(trace_id: int, span_id: int, remote: bool = False) -> SpanContext:
            return SpanContext(trace_id, span_id, is_remote=remote, trace_flags=flags)

        parent = None
        if record.parent_id is not None:
            parent = context(record.trace_id, record.parent_id)
        status = (
            Status(StatusCode.ERROR, record.error)
            if record.error is not None
            else Status(StatusCode.OK)
        )
        return ReadableSpan(
            name=record.name,
            context=context(record.trace_id, record.span_id),
            parent=parent,
            resource=self._resource,
            attributes=dict(record.attributes),
            events=[Event(e.name, dict(e.attributes), _ns(e.at)) for e in record.events],
            links=[Link(context(t, s, remote=True)) for t, s in record.links],
            kind=SpanKind.INTERNAL,
            status=status,
            start_time=_ns(record.start),
            end_time=_ns(record.end),
            instrumentation_scope=self._scope,
        )


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nightshift")
    except PackageNotFoundError:
        return "unknown"
