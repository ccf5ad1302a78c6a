"""What a Gemini batch was asked and what it answered: the submit manifest, matching results to
rows, and writing the output, the retry file and the reconciliation.

The manifest (``.<output name>.<batch id>.manifest.json`` beside the output) records the rows
actually submitted, so a later process (or a changed input file) reconciles against them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nightshift.backends.base import COST_USD
from nightshift.backends.gemini.batch_input import BatchRow, render_rows, sdk_request
from nightshift.backends.gemini.options import GeminiJobOptions
from nightshift.backends.gemini.pricing import job_cost
from nightshift.backends.gemini.reconcile import (
    RowResult,
    parse_results_jsonl,
    reconcile,
    render_results,
    summary_line,
)
from nightshift.backends.gemini.sdk_values import sdk_json
from nightshift.errors import PermanentBackendError
from nightshift.files import write_atomic

__all__ = [
    "batch_results",
    "finish_job",
    "inline_request",
    "manifest_path",
    "match_inline",
    "read_manifest",
    "write_manifest",
]

_MANIFEST_VERSION = 1


def manifest_path(output: Path, external_id: str) -> Path:
    """``<output dir>/.<output name>.<batch id, path-safe>.manifest.json``."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", external_id)
    return output.with_name(f".{output.name}.{safe}.manifest.json")


def write_manifest(
    output: Path, external_id: str, rows: Sequence[BatchRow], *, model: str, mode: str
) -> Path:
    """Record the submitted rows (keys, requests, count) atomically; returns the path."""
    path = manifest_path(output, external_id)
    data = {
        "version": _MANIFEST_VERSION,
        "batch": external_id,
        "model": model,
        "mode": mode,
        "submitted_at": datetime.now(UTC).isoformat(),
        "row_count": len(rows),
        "rows": [{"key": r.key, "request": r.request, "line": r.line} for r in rows],
    }
    write_atomic(path, json.dumps(data, separators=(",", ":")) + "\n")
    return path


def read_manifest(output: Path, external_id: str) -> list[BatchRow] | None:
    """The rows submitted in batch ``external_id``; None when it has no manifest."""
    path = manifest_path(output, external_id)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise PermanentBackendError(f"cannot read manifest {path}: {exc}") from None
    try:
        data = json.loads(text)
        rows = [BatchRow(str(r["key"]), dict(r["request"]), int(r["line"])) for r in data["rows"]]
        count, batch = int(data["row_count"]), data["batch"]
    except (ValueError, KeyError, TypeError) as exc:
        raise PermanentBackendError(f"damaged manifest {path}: {exc!r}") from None
    if count != len(rows) or batch != external_id:
        raise PermanentBackendError(
            f"damaged manifest {path}: {len(rows)} rows for {count}, batch {batch!r}"
        )
    return rows


def inline_request(row: BatchRow) -> dict[str, Any]:
    """A row as a google-genai inlined request (our key in ``metadata``; maybe not echoed)."""
    contents, config = sdk_request(row.request)
    item: dict[str, Any] = {"contents": contents, "metadata": {"key": row.key}}
    if config:
        item["config"] = config
    return item


def _row_result(item: Any) -> RowResult | None:
    if item.response is not None:
        return {"response": sdk_json(item.response)}
    if item.error is not None:
        return {"error": sdk_json(item.error)}
    return None


def _echoed_key(item: Any) -> str | None:
    meta = getattr(item, "metadata", None)
    key = meta.get("key") if isinstance(meta, dict) else None
    return key if isinstance(key, str) else None


def match_inline(
    rows: Sequence[BatchRow], inlined: Sequence[Any]
) -> tuple[dict[str, RowResult], str | None]:
    """Results of inline responses by row key, plus a note when not matched plainly in order.

    When every response echoes a key in its ``metadata``, those keys place them, whatever the
    counts (a key never submitted is ignored, a repeated one counts once). When none does
    (the API need not echo it), one response per row is taken in input order. Anything else
    (fewer or more responses without keys, or only some keys echoed) guesses nothing: every
    row counts as missing.
    """
    if not inlined:
        return {}, None
    keys = [_echoed_key(item) for item in inlined]
    counts = f"{len(inlined)} results for {len(rows)} rows"
    if all(keys):
        return _match_by_key(rows, [str(k) for k in keys], inlined, counts)
    if not any(keys) and len(inlined) == len(rows):
        results: dict[str, RowResult] = {}
        for row, item in zip(rows, inlined, strict=True):
            if (result := _row_result(item)) is not None:
                results[row.key] = result
        return results, None
    why = "no echoed keys" if not any(keys) else f"only {sum(map(bool, keys))} echo a key"
    note = f"{counts}: cannot match inline results by position ({why}); every row counts as missing"
    return {}, note


def _match_by_key(
    rows: Sequence[BatchRow], keys: list[str], inlined: Sequence[Any], counts: str
) -> tuple[dict[str, RowResult], str | None]:
    submitted = {r.key for r in rows}
    results: dict[str, RowResult] = {}
    seen: set[str] = set()
    unknown = repeated = 0
    for key, item in zip(keys, inlined, strict=True):
        if key not in submitted:
            unknown += 1
        elif key in seen:
            repeated += 1
        else:
            seen.add(key)
            if (result := _row_result(item)) is not None:
                results[key] = result
    in_order = keys == [r.key for r in rows]
    if in_order:
        return results, None
    note = f"{counts}: matched by echoed key"
    if len(inlined) == len(rows) and not unknown and not repeated:
        note += " (responses out of input order)"
    if unknown:
        note += f" ({unknown} with a key never submitted, ignored)"
    if repeated:
        note += f" ({repeated} repeating a key, ignored)"
    return results, note


def batch_results(
    dest: Any, rows: Sequence[BatchRow], notes: list[str], download: Callable[[str], bytes]
) -> dict[str, RowResult]:
    """A batch's results by row key from its ``dest`` (inline, or a file fetched by
    ``download``); notes on what could not be used are appended to ``notes``."""
    if dest is None:
        return {}
    if dest.inlined_responses is not None:
        results, note = match_inline(rows, dest.inlined_responses)
        if note:
            notes.append(note)
        return results
    if dest.file_name:
        name = str(dest.file_name)
        parsed, bad = parse_results_jsonl(download(name).decode("utf-8", errors="replace"))
        if bad:
            notes.append(f"{bad} unusable line(s) in {name}")
        return parsed
    return {}


def finish_job(
    opts: GeminiJobOptions,
    rows: Sequence[BatchRow],
    results: dict[str, RowResult],
    fallback_keys: set[str],
    batch_ok: bool,
    notes: Sequence[str] = (),
) -> dict[str, Any]:
    """Write the output (with each row's source) and retry file; reconcile and price them."""
    keys = [r.key for r in rows]
    rec = reconcile(keys, results, fallback_keys)
    write_atomic(opts.output, render_results(keys, results, fallback_keys))
    retry_file: Path | None = opts.retry_file
    if rec.retry_keys:
        wanted = set(rec.retry_keys)
        write_atomic(opts.retry_file, render_rows([r for r in rows if r.key in wanted]))
    else:
        opts.retry_file.unlink(missing_ok=True)  # a stale retry file would mislead tomorrow
        retry_file = None
    usage, cost = job_cost(opts.model, results, fallback_keys, opts.prices)
    unpriced = opts.model if cost is None else None
    summary = "; ".join([summary_line(rec, cost, unpriced=unpriced), *notes])
    return {
        "ok": batch_ok and rec.failed == 0 and rec.missing == 0,
        "reconciliation": rec.as_dict(),
        "tokens": usage.as_dict(),
        COST_USD: None if cost is None else round(cost, 6),  # None: no known price
        "summary": summary,
        "notes": list(notes),
        "output": str(opts.output),
        "retry_file": str(retry_file) if retry_file else None,
    }
