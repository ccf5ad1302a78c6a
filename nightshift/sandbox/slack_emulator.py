"""A local Slack emulator (``chat.postMessage``, ``auth.test``, incoming webhooks) for tests and
the demo.

It answers as Slack does: Web API methods take form or JSON bodies, a token as ``Authorization:
Bearer`` (or a ``token`` field), and answer HTTP 200 with ``{"ok": true, ...}`` or ``{"ok":
false, "error": "..."}``; a webhook answers the text ``ok`` or an HTTP error with a short text.
Every accepted message is recorded (``messages``) with its channel, text, blocks, thread_ts and
the ``ts`` it was given. Tokens are checked, never recorded.

Faults: ``inject("429", retry_after=1)``, ``"503"``, ``"invalid_auth"``, ``"channel_not_found"``,
``"not_in_channel"``, ``"close"`` (the connection closes without an answer), each answering the
next matching request once (``times`` for more); ``down()`` stops listening (connection refused)
until ``up()`` binds the same port again.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from typing import Any
from urllib.parse import urlparse

from nightshift.sandbox.slack_http import arguments, handler_for

__all__ = ["FAULTS", "SlackEmulator", "SlackMessage", "main"]

FAULTS = ("429", "503", "invalid_auth", "channel_not_found", "not_in_channel", "close")
_WEBHOOK_ERRORS = {"invalid_auth": (403, "invalid_token"), "channel_not_found": (404,
                   "channel_not_found"), "not_in_channel": (403, "action_prohibited")}  # fmt: skip


@dataclass(frozen=True)
class SlackMessage:
    """One message Slack accepted."""

    channel: str
    text: str | None
    blocks: list[dict[str, Any]] | None
    ts: str
    thread_ts: str | None = None
    via: str = "api"  # "api" | "webhook"


@dataclass
class _Fault:
    kind: str
    endpoint: str
    retry_after: int = 1
    times: int = 1


@dataclass
class _State:
    messages: list[SlackMessage] = field(default_factory=list)
    calls: list[tuple[str, int, str]] = field(default_factory=list)  # (endpoint, status, error)


class SlackEmulator:
    """Serve the Slack endpoints on 127.0.0.1 from a background thread."""

    def __init__(
        self,
        token: str = "xoxb-emulator-token",
        *,
        channels: list[str] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.token = token  # a request with another token gets invalid_auth
        self.channels = set(channels) if channels is not None else None  # None: any channel
        self._state = _State()
        self._faults: deque[_Fault] = deque()
        self._webhooks: dict[str, str] = {}  # path -> channel
        self._seq = itertools.count(1)
        self._lock = threading.RLock()
        self._host, self._port = host, port
        self._server: ThreadingHTTPServer | None = None

    # -- control surface -------------------------------------------------------------
    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/api/``: what ``WebClient(base_url=...)`` takes."""
        return f"http://{self._host}:{self._port}/api/"

    def webhook_url(self, channel: str) -> str:
        """A new incoming-webhook URL that posts into ``channel``."""
        with self._lock:
            path = f"/services/T0EMU/B{len(self._webhooks) + 1:04d}/whsecret{next(self._seq)}"
            self._webhooks[path] = channel
        return f"http://{self._host}:{self._port}{path}"

    @property
    def messages(self) -> list[SlackMessage]:
        """Every accepted message, in order."""
        with self._lock:
            return list(self._state.messages)

    @property
    def calls(self) -> list[tuple[str, int, str]]:
        """Every request: (endpoint, HTTP status, Slack error or "")."""
        with self._lock:
            return list(self._state.calls)

    def in_channel(self, channel: str) -> list[SlackMessage]:
        """The messages of one channel, in order."""
        return [m for m in self.messages if m.channel == channel]

    def transcript(self) -> str:
        """What each channel shows, for a person: channels in order of first message, a thread's
        replies indented under their root (each message's plain text, first line)."""
        messages = self.messages
        out: list[str] = []
        for channel in dict.fromkeys(m.channel for m in messages):
            out.append(channel)
            here = [m for m in messages if m.channel == channel]
            for root in (m for m in here if m.thread_ts is None):
                out.append(f"  {_first_line(root)}")
                out += [f"    > {_first_line(m)}" for m in here if m.thread_ts == root.ts]
        return "\n".join(out)

    def inject(
        self, kind: str, *, endpoint: str = "*", retry_after: int = 1, times: int = 1
    ) -> None:
        """Answer the next ``times`` requests to ``endpoint`` with a fault (see ``FAULTS``)."""
        if kind not in FAULTS:
            raise ValueError(f"unknown fault {kind!r}; use one of {', '.join(FAULTS)}")
        with self._lock:
            self._faults.append(_Fault(kind, endpoint, retry_after, times))

    def reset(self) -> None:
        """Forget messages, calls and faults (webhooks stay)."""
        with self._lock:
            self._state = _State()
            self._faults.clear()

    def start(self) -> SlackEmulator:
        """Bind (the same port again after ``down()``) and serve in a daemon thread."""
        server = ThreadingHTTPServer((self._host, self._port), handler_for(self.handle))
        server.daemon_threads = True
        self._port = server.server_address[1]
        self._server = server
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    down = stop  # connection refused until up()
    up = start

    def __enter__(self) -> SlackEmulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- requests ----------------------------------------------------------------------
    def handle(self, path: str, headers: Any, body: bytes) -> tuple[int, Any, dict[str, str]]:
        """(status, JSON or text, headers) for one POST; ``close`` raises ConnectionAbortedError."""
        url = urlparse(path)
        webhook = url.path in self._webhooks
        endpoint = "webhook" if webhook else url.path.removeprefix("/api/")
        fault = self._take_fault(endpoint)
        try:
            status, payload, extra = self._answer(endpoint, url.path, headers, body, fault)
        except ConnectionAbortedError:
            with self._lock:
                self._state.calls.append((endpoint, 0, "closed"))
            raise
        error = payload.get("error", "") if isinstance(payload, dict) else ""
        if status != 200 and isinstance(payload, str):
            error = payload
        with self._lock:
            self._state.calls.append((endpoint, status, error))
        return status, payload, extra

    def _take_fault(self, endpoint: str) -> _Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.endpoint in ("*", endpoint):
                    fault.times -= 1
                    if fault.times <= 0:
                        self._faults.remove(fault)
                    return fault
        return None

    def _answer(
        self, endpoint: str, path: str, headers: Any, body: bytes, fault: _Fault | None
    ) -> tuple[int, Any, dict[str, str]]:
        kind = fault.kind if fault else None
        if kind == "close":
            raise ConnectionAbortedError("fault: close")
        if kind == "429":
            extra = {"Retry-After": str(fault.retry_after if fault else 1)}
            return 429, ({"ok": False, "error": "ratelimited"} if endpoint != "webhook"
                         else "rate_limited"), extra  # fmt: skip
        if kind == "503":
            return 503, "service_unavailable", {}
        if endpoint == "webhook":
            return self._webhook(path, body, kind)
        if path.startswith("/services/"):
            return 404, "no_service", {}  # a webhook that was removed (or never made)
        if endpoint not in ("chat.postMessage", "auth.test"):
            return 200, {"ok": False, "error": "unknown_method"}, {}
        args = arguments(headers, body)
        token = (headers.get("authorization") or "").removeprefix("Bearer ").strip()
        token = token or str(args.get("token") or "")
        if not token:
            return 200, {"ok": False, "error": "not_authed"}, {}
        if token != self.token or kind == "invalid_auth":
            return 200, {"ok": False, "error": "invalid_auth"}, {}
        if endpoint == "auth.test":
            return 200, {"ok": True, "url": "https://emulator.slack.test/", "team": "Emulator",
                         "user": "nightshift", "team_id": "T0EMU", "user_id": "U0EMU",
                         "bot_id": "B0EMU"}, {}  # fmt: skip
        return self._post(args, kind)

    def _post(self, args: dict[str, Any], kind: str | None) -> tuple[int, Any, dict[str, str]]:
        channel = str(args.get("channel") or "")
        if (
            not channel
            or kind == "channel_not_found"
            or (self.channels is not None and channel not in self.channels)
        ):
            return 200, {"ok": False, "error": "channel_not_found"}, {}
        if kind == "not_in_channel":
            return 200, {"ok": False, "error": "not_in_channel"}, {}
        blocks = args.get("blocks")
        if isinstance(blocks, str):  # form bodies carry blocks as a JSON string
            blocks = json.loads(blocks)
        text = args.get("text")
        if not text and not blocks:
            return 200, {"ok": False, "error": "no_text"}, {}
        thread = args.get("thread_ts")
        message = self._record(channel, text, blocks, str(thread) if thread else None, "api")
        reply = {"ok": True, "channel": channel, "ts": message.ts,
                 "message": {"type": "message", "text": text, "ts": message.ts}}  # fmt: skip
        return 200, reply, {}

    def _webhook(self, path: str, body: bytes, kind: str | None) -> tuple[int, Any, dict[str, str]]:
        if kind in _WEBHOOK_ERRORS:
            return _WEBHOOK_ERRORS[kind][0], _WEBHOOK_ERRORS[kind][1], {}
        try:
            args = json.loads(body or b"{}")
        except ValueError:
            return 400, "invalid_payload", {}
        if not isinstance(args, dict) or not (args.get("text") or args.get("blocks")):
            return 400, "no_text", {}
        self._record(self._webhooks[path], args.get("text"), args.get("blocks"), None, "webhook")
        return 200, "ok", {}

    def _record(
        self, channel: str, text: Any, blocks: Any, thread_ts: str | None, via: str
    ) -> SlackMessage:
        with self._lock:
            ts = f"{int(time.time())}.{next(self._seq):06d}"
            message = SlackMessage(channel, text, blocks, ts, thread_ts, via)
            self._state.messages.append(message)
        return message


def _first_line(message: SlackMessage) -> str:
    text = (message.text or "").strip() or json.dumps(message.blocks)[:100]
    return text.splitlines()[0]


def main(argv: list[str] | None = None) -> int:
    """Run the emulator in the foreground, printing each message as it arrives."""
    parser = argparse.ArgumentParser(prog="python -m nightshift.sandbox.slack_emulator")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token", default="xoxb-emulator-token")
    args = parser.parse_args(argv)
    with SlackEmulator(args.token, port=args.port) as emulator:
        print(f"Slack emulator at {emulator.base_url} (token {args.token})", flush=True)
        seen = 0
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                messages = emulator.messages
                for message in messages[seen:]:
                    reply = f" (reply to {message.thread_ts})" if message.thread_ts else ""
                    print(f"{message.channel} {message.ts}{reply}: {message.text}", flush=True)
                seen = len(messages)
                time.sleep(0.2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
