"""On-demand rows under a job's own spend cap: answered a few at a time while the job's cost,
batch rows and on-demand rows so far, leaves room for the next few at the cost rows had so far.

The Batch API says nothing of a running batch's tokens (the SDK exposes no counters): a batch's
cost is known when its results are. The fallback is where a job's spend grows row by row, so
that is where its own cap holds: rows past it are left for the retry file, never guessed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from nightshift.backends.gemini.pricing import Price, job_cost

__all__ = ["answer_within"]

Row = TypeVar("Row")


def answer_within(
    todo: Sequence[Row],
    key: Callable[[Row], str],
    answer: Callable[[Row], Mapping[str, Any]],
    *,
    model: str,
    kept: Mapping[str, Mapping[str, Any]],
    cap_usd: float | None,
    concurrency: int,
    prices: Mapping[str, Price] | None = None,
) -> tuple[dict[str, Mapping[str, Any]], str | None]:
    """Each row's on-demand answer by key, and a note when the cap left rows unanswered.

    ``kept``: the batch's own results (their cost counts). With no cap, or a model with no
    price, every row is answered as before.
    """
    answers: dict[str, Mapping[str, Any]] = {}
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        if cap_usd is None:
            return dict(zip(map(key, todo), pool.map(answer, todo), strict=True)), None
        left = list(todo)
        while left:
            spent, per_row = _so_far(model, kept, answers, prices)
            if spent is None:  # no price: a cap can't be held, and isn't pretended
                batch = left
            else:
                room = cap_usd - spent
                # the first on-demand row is measured one at a time when nothing says its cost
                fits = (
                    1 if per_row is None else math.floor(room / per_row) if per_row else len(left)
                )
                batch = left[: max(0, min(fits, concurrency, len(left)))] if room > 0 else []
            if not batch:
                break
            answers.update(zip(map(key, batch), pool.map(answer, batch), strict=True))
            left = left[len(batch) :]
    if not left:
        return answers, None
    spent, _ = _so_far(model, kept, answers, prices)
    said = f"${spent:.2f}" if spent is not None else "its cost"
    return answers, (
        f"spend cap of the job: {said} of ${cap_usd:g} spent, {len(left)} row(s) not answered "
        "on demand (retry file)"
    )


def _so_far(
    model: str,
    kept: Mapping[str, Mapping[str, Any]],
    answers: Mapping[str, Mapping[str, Any]],
    prices: Mapping[str, Price] | None,
) -> tuple[float | None, float | None]:
    """What the job cost so far (None: no price), and an on-demand row's mean cost (None: no
    row answered yet)."""
    merged = {**kept, **answers}
    _, spent = job_cost(model, merged, answers.keys(), prices)
    if spent is None:
        return None, None
    answered = [r for r in answers.values() if r.get("response") is not None]
    if not answered:
        return spent, None
    _, direct = job_cost(model, answers, answers.keys(), prices)
    return spent, (direct or 0.0) / len(answered)
