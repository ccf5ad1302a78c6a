"""A job that did not succeed, explained: its one log record and its one-line reason (pure:
the caller reads the tail)."""

from __future__ import annotations

from nightshift.engine.outcomes import JobOutcome, Outcome, state_name

__all__ = [
    "LINE_CHARS",
    "TAIL_END_LINES",
    "failure_note",
    "failure_reason",
    "tail_end",
]

TAIL_END_LINES = 10  # the last lines of a saved log tail shown in the log record
LINE_CHARS = 200  # each line of a tail, as a record or a reason shows it
NO_REASON = "no reason recorded"


def failure_note(job: JobOutcome, tail: str | None = None, *, chain: str | None = None) -> str:
    """``gen:broken Failed after 3s: exit code 3 · external id 42`` and, indented under it, the
    last lines of its tail (the error is almost always at the end), then the whole tail's path;
    ``chain``: the chain whose step it was, said when the night's own log tells it."""
    reason = job.detail or NO_REASON
    # a skipped job, or one the night never reached, did not run: no time to speak of
    took = f" after {job.took()}" if job.ran else ""
    head = f"{job.label} {state_name(job)}{took}: {reason}"
    facts = [f"external id {job.external_id}" if job.external_id else "no external id"]
    if chain:
        facts.append(f"step of chain {chain}")
    lines = [f"{head} · {' · '.join(facts)}"]
    lines += [f"    | {line}" for line in tail_end(tail)]
    if job.log_tail_path:
        lines.append(f"    whole tail: {job.log_tail_path}")
    return "\n".join(lines)


def failure_reason(job: JobOutcome, tail: str | None = None) -> str:
    """Why the job did not succeed, in one line: its detail, then its tail's last line when
    that adds something the detail lacks (``exit code 3: 2 broken links found``); a skipped
    step says which step it waited for (``not run: pull failed``)."""
    detail = " ".join((job.detail or "").split())
    if job.state is Outcome.SKIPPED:
        return f"not run: {detail}" if detail else "not run"
    last = next(iter(tail_end(tail, lines=1)), "").strip()
    if not last or " ".join(last.split()).casefold() in detail.casefold():
        return detail or NO_REASON
    return f"{detail}: {last}" if detail else last


def tail_end(tail: str | None, lines: int = TAIL_END_LINES) -> list[str]:
    """The last non-empty lines of a log tail, each cut to 200 characters."""
    return _kept(tail)[-lines:] if lines > 0 else []


def _kept(tail: str | None) -> list[str]:
    if not tail:
        return []
    return [line.rstrip()[:LINE_CHARS] for line in tail.splitlines() if line.strip()]
