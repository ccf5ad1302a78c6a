"""The emulator's HTTP layer: which endpoint a request is for, error bodies, the handler class."""

from __future__ import annotations

import json
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

__all__ = ["Handle", "endpoint_name", "error_reply", "handler_for"]

# (method, path, headers, body) -> (status, JSON or bytes, extra headers)
Handle = Callable[[str, str, Any, bytes], tuple[int, Any, dict]]

_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
           404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE",
           504: "DEADLINE_EXCEEDED"}  # fmt: skip


def error_reply(code: int, message: str) -> tuple[int, dict[str, Any]]:
    """(status, body) of a Google API error with this HTTP code."""
    status = _STATUS.get(code, "UNKNOWN")
    return code, {"error": {"code": code, "message": message, "status": status}}


def endpoint_name(method: str, parts: list[str], query: dict[str, list[str]]) -> str:
    """The SDK-style name (``batches.create``) of a request to ``/parts...?query``."""
    tail = parts[-1] if parts else ""
    if parts[:1] == ["upload"]:
        return "files.upload_bytes" if "upload_id" in query else "files.upload_start"
    if len(parts) >= 2 and parts[1] == "models" and tail.endswith(":batchGenerateContent"):
        return "batches.create"
    if len(parts) >= 2 and parts[1] == "models" and tail.endswith(":generateContent"):
        return "models.generateContent"
    if len(parts) >= 2 and parts[1] == "batches":
        if len(parts) == 2:
            return "batches.list"
        if tail.endswith(":cancel"):
            return "batches.cancel"
        return "batches.delete" if method == "DELETE" else "batches.get"
    if len(parts) >= 3 and parts[1] == "files":
        return "files.download" if tail.endswith(":download") else "files.get"
    return f"unknown {method} /{'/'.join(parts)}"


def handler_for(handle: Handle) -> type[BaseHTTPRequestHandler]:
    """A request handler class that answers every request through ``handle``."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else b""
            status, payload, extra = handle(self.command, self.path, self.headers, body)
            raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            ctype = "application/octet-stream" if isinstance(payload, bytes) else "application/json"
            try:
                self.send_response(status)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(raw)))
                for name, value in extra.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(raw)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True  # the client gave up waiting (a hang fault)

        do_GET = do_POST = do_DELETE = _serve

        def log_message(self, format: str, *args: Any) -> None:
            return  # quiet: tests assert on emu.calls instead

    return Handler
