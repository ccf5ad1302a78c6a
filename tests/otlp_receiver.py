"""An OTLP/HTTP trace receiver on 127.0.0.1, for the tests: it decodes each export request with
``opentelemetry-proto`` (as a collector does) and keeps the spans it got, in order.

``hang`` makes it take requests and never answer (a collector that hangs); ``stop`` closes it
(a collector that is down).
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

__all__ = ["Received", "Receiver", "otlp_receiver"]


@dataclass(frozen=True)
class Received:
    """One span as the collector saw it (ids in hex, times in ns)."""

    trace_id: str
    span_id: str
    parent_id: str
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[tuple[str, int, dict[str, Any]]]
    links: list[tuple[str, str]]
    error: str | None  # the status message of an error span
    service: str


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


def _attrs(items: Any) -> dict[str, Any]:
    return {a.key: _value(a.value) for a in items}


@dataclass
class Receiver:
    url: str
    spans: list[Received] = field(default_factory=list)
    requests: int = 0
    hang: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        got: list[Received] = []
        for resource_spans in request.resource_spans:
            service = str(_attrs(resource_spans.resource.attributes).get("service.name", ""))
            for scope_spans in resource_spans.scope_spans:
                for s in scope_spans.spans:
                    error = s.status.message if s.status.code == 2 else None
                    got.append(
                        Received(
                            s.trace_id.hex(),
                            s.span_id.hex(),
                            s.parent_span_id.hex(),
                            s.name,
                            s.start_time_unix_nano,
                            s.end_time_unix_nano,
                            _attrs(s.attributes),
                            [(e.name, e.time_unix_nano, _attrs(e.attributes)) for e in s.events],
                            [(link.trace_id.hex(), link.span_id.hex()) for link in s.links],
                            error,
                            service,
                        )
                    )
        with self.lock:
            self.requests += 1
            self.spans += got

    def named(self, name: str) -> list[Received]:
        with self.lock:
            return [s for s in self.spans if s.name == name]


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    """A receiver at ``receiver.url`` (the OTLP endpoint, without /v1/traces)."""
    holder: dict[str, Receiver] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            receiver = holder["r"]
            if receiver.hang.is_set():
                receiver.hang.wait(3600)  # never answers while the test runs
                return
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            receiver.take(body)
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *_args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    holder["r"] = Receiver(f"http://127.0.0.1:{server.server_address[1]}")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield holder["r"]
    finally:
        holder["r"].hang.clear()
        server.shutdown()
        server.server_close()
