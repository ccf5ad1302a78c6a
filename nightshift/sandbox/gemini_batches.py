"""The emulated batches: how a ``BatchScript`` drives a batch's state, results and operation JSON.

Durations are emulated seconds; a batch's clock is the emulator's, multiplied by ``time_scale``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

__all__ = ["Batch", "BatchScript", "fake_response", "is_final", "now_iso"]

_FINAL = {"SUCCEEDED", "FAILED", "CANCELLED", "EXPIRED"}
_OPERATION_TYPE = "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatch"


@dataclass(frozen=True)
class BatchScript:
    """How one batch behaves; ``final="stuck"`` never leaves PENDING/RUNNING.

    A cancel takes ``cancel_delay_s`` emulated seconds (like the real, asynchronous one): till
    then the batch keeps its state (or finishes on its own), after it reports CANCELLED with
    ``done_on_cancel`` rows. ``shuffle`` returns results rotated by one (the last first), so
    none is at its input position.
    """

    queued_s: float = 0.0
    running_s: float = 0.0
    final: str = "SUCCEEDED"  # SUCCEEDED|FAILED|CANCELLED|EXPIRED|stuck|any other state name
    drop_rows: int = 0
    drop_keys: tuple[str, ...] | list[str] = ()
    error_keys: tuple[str, ...] | list[str] = ()
    error_indices: tuple[int, ...] | list[int] = ()
    error_code: int = 500
    done_on_cancel: int = 0  # rows with results when cancelled while RUNNING
    cancel_delay_s: float = 0.0  # emulated seconds before a cancel takes effect
    shuffle: bool = False  # results out of input order (rotated by one)
    fail_message: str = "emulated batch failure"
    # echo each inline request's ``metadata`` on its response (the real API may not: off)
    echo_metadata: bool = False
    # ``details`` of row errors; objects here make the SDK's pydantic parsing fail
    error_details: tuple[Any, ...] | list[Any] = ()


def _prompt(request: dict[str, Any]) -> str:
    texts = [p.get("text", "") for c in request.get("contents") or [] for p in c.get("parts") or []]
    return " ".join(t for t in texts if t)


def fake_response(request: dict[str, Any]) -> dict[str, Any]:
    """Deterministic GenerateContentResponse JSON for a request."""
    prompt = _prompt(request)
    text = f"answer to: {prompt[:40]}"
    p_tok, c_tok = max(1, len(prompt) // 4), max(1, len(text) // 4)
    return {
        "candidates": [
            {"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP"}
        ],
        "usageMetadata": {
            "promptTokenCount": p_tok,
            "candidatesTokenCount": c_tok,
            "totalTokenCount": p_tok + c_tok,
        },
        "modelVersion": "emulated",
    }


def now_iso() -> str:
    """The wall-clock time as the API writes it (``...Z``)."""
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def is_final(state: str) -> bool:
    """Whether a REST state name (``BATCH_STATE_...``) is one a batch never leaves."""
    return state.removeprefix("BATCH_STATE_") in _FINAL


@dataclass
class Batch:
    """One emulated batch; ``started`` and ``cancelled_at`` are readings of the emulator's clock."""

    name: str
    model: str
    display_name: str
    script: BatchScript
    rows: list[tuple[str, dict[str, Any]]]
    inline: bool
    started: float
    create_time: str = field(default_factory=now_iso)
    cancelled_at: float | None = None
    end_time: str | None = None
    output_file: str | None = None

    def cancel(self, now: float) -> None:
        """Ask for a cancel at clock reading ``now`` (a second ask changes nothing)."""
        if self.cancelled_at is None:
            self.cancelled_at = now

    def state(self, now: float, time_scale: float) -> str:
        """REST state name (``BATCH_STATE_...``) at clock reading ``now``."""
        if self.cancelled_at is None:
            return self._scripted(now, time_scale)
        effective = self.cancelled_at + self.script.cancel_delay_s / time_scale
        scripted = self._scripted(min(now, effective), time_scale)
        if is_final(scripted) or now < effective:  # finished first, or cancel still pending
            return scripted
        return "BATCH_STATE_CANCELLED"

    def changed(self, now: float, time_scale: float) -> float:
        """Clock reading at which the batch entered its state at clock reading ``now``."""
        s = self.script
        running_at = self.started + s.queued_s / time_scale
        ended_at = running_at + s.running_s / time_scale
        if self.cancelled_at is not None:
            effective = self.cancelled_at + s.cancel_delay_s / time_scale
            if now >= effective and not is_final(self._scripted(effective, time_scale)):
                return effective  # cancelled before it finished on its own
        if now < running_at:
            return self.started
        return running_at if self.script.final == "stuck" or now < ended_at else ended_at

    def wall(self, reading: float) -> str:
        """Clock reading ``reading`` as wall-clock time (``...Z``), from the create time."""
        created = datetime.fromisoformat(self.create_time.replace("Z", "+00:00"))
        moment = created + timedelta(seconds=reading - self.started)
        return moment.isoformat().replace("+00:00", "Z")

    def _scripted(self, now: float, time_scale: float) -> str:
        s, elapsed = self.script, (now - self.started) * time_scale
        if elapsed < s.queued_s:
            return "BATCH_STATE_PENDING"
        if s.final == "stuck" or elapsed < s.queued_s + s.running_s:
            return "BATCH_STATE_RUNNING"
        return s.final if s.final.startswith("BATCH_STATE_") else f"BATCH_STATE_{s.final}"

    def results(self, state: str) -> list[dict[str, Any]] | None:
        """Result lines (``key`` plus ``response`` or ``error``) in ``state``; None if none."""
        s = self.script
        rows = list(enumerate(self.rows))
        if state == "BATCH_STATE_CANCELLED":
            rows = rows[: s.done_on_cancel] if self.cancelled_at is not None else []
        elif state != "BATCH_STATE_SUCCEEDED":
            return None
        rows = [(i, kr) for i, kr in rows if kr[0] not in s.drop_keys]
        if s.drop_rows:
            rows = rows[: max(0, len(rows) - s.drop_rows)]
        if not rows and state == "BATCH_STATE_CANCELLED":
            return None
        if s.shuffle and rows:
            rows = rows[-1:] + rows[:-1]
        out = []
        for i, (key, request) in rows:
            if key in s.error_keys or i in s.error_indices:
                err: dict[str, Any] = {"code": s.error_code}
                err["message"] = f"emulated row error for {key}"
                if s.error_details:
                    err["details"] = list(s.error_details)
                out.append({"key": key, "error": err})
            else:
                out.append({"key": key, "response": fake_response(request)})
        return out

    def operation(
        self, state: str, save_output: Callable[[bytes], str], changed: str | None = None
    ) -> dict[str, Any]:
        """The batch as an Operation in ``state``; file output is saved once via ``save_output``.

        ``changed`` (wall time) is when it entered ``state``: its ``updateTime``, and its
        ``endTime`` once final, as the real API dates them (not when someone asked).
        """
        meta: dict[str, Any] = {
            "@type": _OPERATION_TYPE,
            "model": self.model,
            "displayName": self.display_name,
            "state": state,
            "createTime": self.create_time,
            "updateTime": changed or now_iso(),
        }
        op: dict[str, Any] = {"name": self.name, "metadata": meta}
        if is_final(state):
            self.end_time = self.end_time or changed or now_iso()
            meta["endTime"] = op["metadata"]["updateTime"] = self.end_time
            op["done"] = True
            results = self.results(state)
            if results is not None and self.inline:
                rows = [{k: v for k, v in r.items() if k != "key"} for r in results]
                for row, r in zip(rows, results, strict=True):
                    if self.script.echo_metadata:
                        row["metadata"] = {"key": r["key"]}
                meta["output"] = {"inlinedResponses": {"inlinedResponses": rows}}
            elif results is not None:
                if self.output_file is None:
                    body = "".join(json.dumps(r) + "\n" for r in results).encode()
                    self.output_file = save_output(body)
                meta["output"] = {"responsesFile": self.output_file}
            if state == "BATCH_STATE_FAILED":
                op["error"] = {"code": 500, "message": self.script.fail_message}
        return op
