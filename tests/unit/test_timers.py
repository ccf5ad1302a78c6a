"""Which timers apply to which job (pure)."""

from __future__ import annotations

from datetime import UTC, datetime

from nightshift.config.loader import parse_catalogue
from nightshift.engine.timers import job_timers

NIGHT_END = datetime(2026, 11, 29, 3, 0, tzinfo=UTC)
CATALOGUE = parse_catalogue(
    """\
jobs:
  - {label: cmd, backend: command, argv: [x]}
  - {label: short, backend: command, argv: [x], timeout: 20m}
  - {label: batch, backend: gemini_batch, model: m, input: i.jsonl, output: o.jsonl}
  - {label: capped, backend: gemini_batch, model: m, input: i.jsonl, output: c.jsonl,
     timeout: 23h, queued_timeout: 2h}
  - {label: nofb, backend: gemini_batch, model: m, input: i.jsonl, output: n.jsonl,
     fallback: none}
"""
)


def timers(label: str):
    job = CATALOGUE.job(label)
    return job_timers(
        job, CATALOGUE.defaults, origin=0.0, deadline_at=3600.0, deadline_wall=NIGHT_END
    )


def test_a_command_job_has_the_night_deadline_and_the_default_queue_timer() -> None:
    t = timers("cmd")
    assert (t.timeout_at, t.timeout_why) == (3600.0, "night deadline at 03:00 UTC")
    assert (t.queued_timeout_at, t.queued_why) == (900.0, "still queued after queued_timeout 15m")
    assert t.fallback_at is None


def test_the_earlier_of_job_timeout_and_night_deadline_wins_and_says_so() -> None:
    assert (timers("short").timeout_at, timers("short").timeout_why) == (1200.0, "job timeout 20m")


def test_a_batch_with_the_defaults_is_cut_only_by_its_sla_fallback() -> None:
    t = timers("batch")
    assert (t.timeout_at, t.queued_timeout_at) == (None, None)
    assert t.fallback_at == 0.8 * 86400


def test_timers_set_on_a_batch_itself_apply() -> None:
    t = timers("capped")
    assert (t.timeout_at, t.queued_timeout_at) == (23 * 3600.0, 2 * 3600.0)
    assert timers("nofb").fallback_at is None


def test_a_job_not_visible_yet_waits_visible_within_but_never_past_its_other_timers() -> None:
    # 10 minutes by default, within the 15-minute queue timer
    assert (timers("cmd").visible_at, timers("cmd").visible_within) == (600.0, 600.0)
    assert timers("cmd").unseen_text() == (
        "lost: never seen at the service in 10m (visible_within)"
    )
    # a batch has no deadline nor default queue timer: its own 10 minutes
    assert timers("batch").visible_at == 600.0
    quick = parse_catalogue(
        "jobs:\n  - {label: q, backend: command, argv: [x], queued_timeout: 2m,"
        " visible_within: 1h}\n"
    )
    bound = job_timers(
        quick.job("q"), quick.defaults, origin=0.0, deadline_at=3600.0, deadline_wall=NIGHT_END
    )
    assert bound.visible_at == 120.0  # the queue timer comes first
