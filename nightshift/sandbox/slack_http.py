"""The Slack emulator's HTTP layer: a Web API call's arguments, the request handler class."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs

__all__ = ["Handle", "arguments", "handler_for"]

# (path, headers, body) -> (status, JSON or text, extra headers); ConnectionAbortedError: close
Handle = Callable[[str, Any, bytes], tuple[int, Any, dict[str, str]]]


def arguments(headers: Any, body: bytes) -> dict[str, Any]:
    """A Web API call's arguments from a JSON or form body."""
    if not body:
        return {}
    if "json" in (headers.get("content-type") or ""):
        try:
            data = json.loads(body)
        except ValueError:
            return {}
        return data if isinstance(data, dict) else {}
    return {k: v[-1] for k, v in parse_qs(body.decode("utf-8", "replace")).items()}


def handler_for(handle: Handle) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else b""
            try:
                status, payload, extra = handle(self.path, self.headers, body)
            except ConnectionAbortedError:
                self.close_connection = True
                with contextlib.suppress(OSError):
                    self.connection.shutdown(2)
                return
            raw = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
            ctype = "text/plain" if isinstance(payload, str) else "application/json; charset=utf-8"
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.send_response(status)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(raw)))
                for name, value in extra.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(raw)

        do_GET = do_POST

        def log_message(self, format: str, *args: Any) -> None:
            return  # quiet: tests assert on the emulator's calls instead

    return Handler
