"""A job that did not succeed, explained in one log record (pure: the caller reads the tail)."""

from __future__ import annotations

from nightshift.config.durations import format_duration
from nightshift.engine.outcomes import JobOutcome, Outcome, state_name

__all__ = ["TAIL_HEAD_LINES", "failure_note", "tail_head"]

TAIL_HEAD_LINES = 5  # the first lines of a saved log tail shown in the log record


def failure_note(job: JobOutcome, tail: str | None = None) -> str:
    """``gen:broken Failed after 3s: exit code 3 · external id 42 · tail logs/gen.tail.log``
    and, indented under it, the first lines of the tail."""
    reason = job.detail or "no reason recorded"
    # a skipped job, or one the night never reached, did not run: no time to speak of
    ran = job.state is not Outcome.SKIPPED and (job.attempts > 0 or job.external_id is not None)
    took = f" after {format_duration(job.duration_s)}" if ran else ""
    head = f"{job.label} {state_name(job)}{took}: {reason}"
    facts = [f"external id {job.external_id}" if job.external_id else "no external id"]
    if job.log_tail_path:
        facts.append(f"tail {job.log_tail_path}")
    lines = [f"{head} · {' · '.join(facts)}"]
    lines += [f"    | {line}" for line in tail_head(tail)]
    return "\n".join(lines)


def tail_head(tail: str | None, lines: int = TAIL_HEAD_LINES) -> list[str]:
    """The first non-empty lines of a log tail, each cut to 200 characters."""
    if not tail:
        return []
    kept = [line.rstrip()[:200] for line in tail.splitlines() if line.strip()]
    return kept[:lines]
