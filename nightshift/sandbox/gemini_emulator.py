"""A local Gemini API emulator (batches, generateContent, files) for tests and the demo.

Each batch follows a ``BatchScript`` chosen by its displayName (else the default script).
Durations are emulated seconds, divided by ``time_scale``. ``drop_rows`` removes results from
the END of the output, ``drop_keys`` from anywhere. Inline responses echo the request's
``metadata`` only with ``BatchScript(echo_metadata=True)``: clients must not rely on it.
A cancel takes ``cancel_delay_s``; ``shuffle`` reorders results. Like the real API, a batch's
``updateTime`` is when it entered its state and ``endTime`` when it ended, not when it was read
(wall time: ``createTime`` plus the emulator's clock since the create).
``echo_key_in_errors`` puts the API key a request sent into its 401 message (leak tests).
``inject_faults`` loses answers after the work is done (``after:503``, ``hang``) or answers in
ways an HTTP client chokes on (``garbled`` body, ``redirect`` to itself).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import re
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from http.server import ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from nightshift.sandbox.gemini_batches import Batch, BatchScript, fake_response, is_final, now_iso
from nightshift.sandbox.gemini_routes import endpoint_name, error_reply, handler_for

__all__ = ["BatchScript", "GeminiEmulator", "fake_response", "main"]


class GeminiEmulator:
    """Serve the Gemini REST endpoints on 127.0.0.1 from a background thread."""

    def __init__(
        self,
        *,
        time_scale: float = 1.0,
        default_script: BatchScript | None = None,
        api_key: str | None = None,
        echo_key_in_errors: bool = False,
        host: str = "127.0.0.1",
        port: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.time_scale = time_scale
        self.default_script = default_script or BatchScript()
        self.api_key = api_key  # when set, a different key gets 401
        self.echo_key_in_errors = echo_key_in_errors
        self.counts: Counter[str] = Counter()
        self.calls: list[tuple[str, str, int]] = []  # (endpoint, path, status)
        self.last_body: dict[str, Any] = {}  # endpoint -> last JSON body it received
        self._host, self._port, self._clock = host, port, clock
        self._scripts: dict[str, BatchScript] = {}
        self._errors: dict[str, deque[tuple[int, str | None, float | None]]] = {}
        self._faults: dict[str, deque[str]] = {}
        self._release = threading.Event()  # ends every hanging answer (stop, reset)
        self._batches: dict[str, Batch] = {}
        self._files: dict[str, dict[str, Any]] = {}
        self._uploads: dict[str, dict[str, Any]] = {}
        self._ids = itertools.count(1)
        self._lock = threading.RLock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- control surface -------------------------------------------------------------
    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT`` of the running server."""
        if self._server is None:
            raise RuntimeError("emulator not started")
        return f"http://{self._host}:{self._server.server_address[1]}"

    def start(self) -> GeminiEmulator:
        """Bind and serve in a daemon thread."""
        self._server = ThreadingHTTPServer((self._host, self._port), handler_for(self.handle))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._release.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> GeminiEmulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def reset(self) -> None:
        """Forget batches, files, scripts, queued errors and counts (keep serving)."""
        self._release.set()  # let hanging answers go before forgetting them
        with self._lock:
            stores = (self._scripts, self._errors, self._faults, self._batches, self._files)
            for store in (*stores, self._uploads):
                store.clear()
            self._release = threading.Event()
            self.counts.clear()
            self.calls.clear()
            self.last_body.clear()
            self.echo_key_in_errors = False

    def script_batch(self, display_name: str, script: BatchScript) -> None:
        """Use ``script`` for batches created with this displayName."""
        with self._lock:
            self._scripts[display_name] = script

    def inject_errors(
        self,
        statuses: Iterable[int],
        endpoint: str = "*",
        message: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        """Answer the next requests (to ``endpoint`` or any) with these HTTP statuses, before
        doing any work (a refused create makes no batch), with a ``Retry-After`` if given."""
        with self._lock:
            queue = self._errors.setdefault(endpoint, deque())
            queue.extend((s, message, retry_after) for s in statuses)

    def inject_faults(self, kind: str, endpoint: str = "*", times: int = 1) -> None:
        """Answer the next ``times`` requests to ``endpoint`` (or any) with a fault.

        ``after:CODE``: do the work (a create makes its batch), then answer HTTP CODE.
        ``hang``: do the work, then answer nothing until the emulator stops or is reset.
        ``garbled``: a 200 whose gzip body does not decode. ``redirect``: a 307 to itself.
        """
        if kind not in ("hang", "garbled", "redirect") and not re.fullmatch(r"after:\d{3}", kind):
            raise ValueError(f"unknown fault {kind!r}")
        with self._lock:
            self._faults.setdefault(endpoint, deque()).extend([kind] * times)

    def batches(self, display_name: str | None = None) -> list[str]:
        """Names of the batches created so far (with this displayName), oldest first."""
        with self._lock:
            found = self._batches.values()
            return [b.name for b in found if display_name in (None, b.display_name)]

    def count(self, endpoint: str | None = None) -> int:
        """Requests seen for one endpoint (e.g. ``batches.create``), or in total."""
        with self._lock:
            return sum(self.counts.values()) if endpoint is None else self.counts[endpoint]

    def batch_state(self, name: str) -> str:
        """Current REST state name of a batch (``BATCH_STATE_...``)."""
        with self._lock:
            return self._state(self._batches[name])

    # -- behaviour -------------------------------------------------------------------
    def _state(self, batch: Batch) -> str:
        return batch.state(self._clock(), self.time_scale)

    def _operation(self, batch: Batch) -> dict[str, Any]:
        def save_output(body: bytes) -> str:
            return str(self._new_file(body, "application/jsonl")["name"])

        now = self._clock()
        changed = batch.wall(batch.changed(now, self.time_scale))
        return batch.operation(batch.state(now, self.time_scale), save_output, changed)

    def _new_file(self, data: bytes, mime: str, display: str | None = None) -> dict[str, Any]:
        name = f"files/f{next(self._ids):06d}"
        meta = {"name": name, "displayName": display or name, "mimeType": mime,
                "sizeBytes": str(len(data)), "state": "ACTIVE", "createTime": now_iso(),
                "uri": f"{self.base_url}/v1beta/{name}", "source": "UPLOADED"}  # fmt: skip
        self._files[name] = {"meta": meta, "data": data}
        return meta

    def _create_batch(self, model: str, body: dict[str, Any]) -> tuple[int, Any]:
        spec = body.get("batch") or {}
        cfg = spec.get("inputConfig") or {}
        display = spec.get("displayName") or "batch"
        if "requests" in cfg:
            reqs = (cfg["requests"] or {}).get("requests") or []
            rows = [
                ((r.get("metadata") or {}).get("key", str(i)), r.get("request") or {})
                for i, r in enumerate(reqs)
            ]
            inline = True
        elif "fileName" in cfg:
            file = self._files.get(cfg["fileName"])
            if file is None:
                return error_reply(400, f"input file {cfg['fileName']} does not exist")
            try:
                records = [json.loads(x) for x in file["data"].decode().splitlines() if x.strip()]
            except ValueError as exc:
                return error_reply(400, f"input file {cfg['fileName']} is not valid JSONL: {exc}")
            rows = [(str(r.get("key", i)), r.get("request") or {}) for i, r in enumerate(records)]
            inline = False
        else:
            return error_reply(400, "batch.inputConfig must have requests or fileName")
        if not rows:
            return error_reply(400, "batch has no requests")
        if any(not r.get("contents") for _, r in rows):
            return error_reply(400, "every request needs contents")
        script = self._script_for(display)
        name = f"batches/b{next(self._ids):06d}"
        batch = Batch(name, f"models/{model}", display, script, rows, inline, self._clock())
        self._batches[name] = batch
        return 200, self._operation(batch)

    def _script_for(self, display: str) -> BatchScript:
        """The script named exactly, else one named by a ``/``-separated part of the name.

        A night names its batches by submission key (``catalogue/night/label/attempt``): a test
        scripts a batch by its job label.
        """
        if display in self._scripts:
            return self._scripts[display]
        padded = f"/{display}/"
        for name, script in self._scripts.items():
            if f"/{name}/" in padded:
                return script
        return self.default_script

    def _list(self, query: dict[str, list[str]]) -> tuple[int, Any]:
        size = int((query.get("pageSize") or ["50"])[0])
        start = int((query.get("pageToken") or ["0"])[0])
        names = sorted(self._batches, reverse=True)
        page = [self._operation(self._batches[n]) for n in names[start : start + size]]
        out: dict[str, Any] = {"operations": page}
        if start + size < len(names):
            out["nextPageToken"] = str(start + size)
        return 200, out

    def handle(self, method: str, path: str, headers: Any, body: bytes) -> tuple[int, Any, dict]:
        """Route one request; returns (status, JSON or bytes, extra headers)."""
        url = urlparse(path)
        query = parse_qs(url.query)
        parts = url.path.strip("/").split("/")
        endpoint = endpoint_name(method, parts, query)
        with self._lock:
            self.counts[endpoint] += 1
            status, payload, extra = self._dispatch(endpoint, parts, query, headers, body)
            fault = self._next_fault(endpoint) if status != 401 else None
            if fault is not None and fault.startswith("after:"):
                status, payload = error_reply(int(fault[6:]), f"emulated HTTP {fault[6:]}")
            elif fault == "garbled":
                status, payload, extra = 200, b"this is not gzip", {"content-encoding": "gzip"}
            elif fault == "redirect":
                status, payload, extra = 307, b"", {"location": path}
            self.calls.append((endpoint, path, status))
            release = self._release
        if fault == "hang":  # outside the lock: other requests go on
            release.wait(60)
            return (*error_reply(503, "emulated answer after a hang"), {})
        return status, payload, extra

    def _next_fault(self, endpoint: str) -> str | None:
        for queue_name in (endpoint, "*"):
            queue = self._faults.get(queue_name)
            if queue:
                return queue.popleft()
        return None

    def _dispatch(self, endpoint, parts, query, headers, body) -> tuple[int, Any, dict]:
        if endpoint != "files.upload_bytes":
            key = headers.get("x-goog-api-key")
            if not key or (self.api_key is not None and key != self.api_key):
                shown = f" ({key!r})" if self.echo_key_in_errors else ""
                message = f"API key not valid{shown}. Please pass a valid API key."
                return (*error_reply(401, message), {})
        for queue_name in (endpoint, "*"):
            queue = self._errors.get(queue_name)
            if queue:
                code, said, retry_after = queue.popleft()
                extra: dict[str, str] = (
                    {"x-goog-upload-status": "final"} if "upload" in endpoint else {}
                )
                if retry_after is not None:
                    extra["retry-after"] = f"{retry_after:g}"
                return (*error_reply(code, said or f"emulated HTTP {code}"), extra)
        try:
            data = json.loads(body) if body and endpoint != "files.upload_bytes" else {}
        except ValueError:
            return (*error_reply(400, "request body is not JSON"), {})
        if data:
            self.last_body[endpoint] = data
        tail = parts[-1] if parts else ""
        if endpoint == "batches.create":
            return (*self._create_batch(tail.split(":")[0], data), {})
        if endpoint == "models.generateContent":
            return 200, fake_response(data), {}
        if endpoint == "batches.list":
            return (*self._list(query), {})
        if endpoint in ("batches.get", "batches.cancel", "batches.delete"):
            name = "batches/" + tail.split(":")[0]
            batch = self._batches.get(name)
            if batch is None:
                return (*error_reply(404, f"Batch {name} not found"), {})
            if endpoint == "batches.get":
                return 200, self._operation(batch), {}
            if endpoint == "batches.delete":
                del self._batches[name]
            elif not is_final(self._state(batch)):
                batch.cancel(self._clock())
            return 200, {}, {}
        if endpoint == "files.upload_start":
            upload_id = f"u{next(self._ids):06d}"
            meta = data.get("file") or {}
            self._uploads[upload_id] = {"meta": meta, "data": b""}
            url = f"{self.base_url}/upload/{parts[1]}/files?upload_id={upload_id}"
            return 200, {}, {"x-goog-upload-url": url, "x-goog-upload-status": "active"}
        if endpoint == "files.upload_bytes":
            return self._upload_bytes(query, headers, body)
        if endpoint in ("files.get", "files.download"):
            name = "files/" + tail.split(":")[0]
            file = self._files.get(name)
            if file is None:
                return (*error_reply(404, f"File {name} not found"), {})
            return 200, file["data"] if endpoint == "files.download" else file["meta"], {}
        return (*error_reply(404, f"no such endpoint: {endpoint}"), {})

    def _upload_bytes(self, query, headers, body) -> tuple[int, Any, dict]:
        upload = self._uploads.get((query.get("upload_id") or [""])[0])
        if upload is None:
            return (*error_reply(404, "unknown upload"), {"x-goog-upload-status": "final"})
        upload["data"] += body
        if "finalize" not in (headers.get("x-goog-upload-command") or ""):
            return 200, {}, {"x-goog-upload-status": "active"}
        meta = upload["meta"]
        mime = meta.get("mime_type") or meta.get("mimeType") or "application/octet-stream"
        display = meta.get("display_name") or meta.get("displayName")
        info = self._new_file(upload["data"], mime, display)
        return 200, {"file": info}, {"x-goog-upload-status": "final"}


def main(argv: list[str] | None = None) -> None:
    """Serve until Ctrl-C: ``python -m sandbox.gemini_emulator --port N --time-scale X``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--time-scale", type=float, default=1.0)
    args = parser.parse_args(argv)
    with GeminiEmulator(host=args.host, port=args.port, time_scale=args.time_scale) as emu:
        print(emu.base_url, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()
