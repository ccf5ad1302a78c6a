"""A retry's digest (pure): it says it is a retry and replies in the night's first digest."""

from __future__ import annotations

from nightshift.config.notify import NotifyConfig, Route
from nightshift.engine.outcomes import JobOutcome, Outcome, join
from nightshift.notify.render import render_night

CONFIG = NotifyConfig.model_validate(
    {
        "env": "prod",
        "routes": {
            "partial": {"channel": "#digest"},
            "failed": {"channel": "#fail", "mention": "<!here>"},
        },
    }
)
FIRST = (Route(channel="#digest"), "1700000000.000100")


def retry(*states: Outcome) -> object:
    jobs = [JobOutcome("kept", Outcome.SUCCEEDED, 5.0, 1, external_id="c-0", kept=True)]
    jobs += [JobOutcome(f"j{i}", s, 2.0, 2) for i, s in enumerate(states)]
    return join(jobs)


def test_a_retry_that_made_the_night_ok_replies_in_the_first_digest_thread() -> None:
    (message,) = render_night(
        retry(Outcome.SUCCEEDED), CONFIG, night="n", catalogue="c", reply_in=FIRST
    )
    assert message.reply_to == FIRST[1] and message.destination.channel == "#digest"
    assert message.text.splitlines()[:2] == [
        "ok: 2/2 succeeded (prod, night n)",
        "retry: 1 re-ran (1 now ok, 0 still failing), 1 kept",
    ]
    assert "retry" in message.blocks[0]["text"]["text"]


def test_a_retry_still_failing_keeps_its_routes_mention_in_the_thread() -> None:
    night = retry(Outcome.FAILED)
    (message,) = render_night(night, CONFIG, night="n", catalogue="c", reply_in=FIRST)
    assert message.destination.channel == "#digest" and message.destination.mention is None
    assert "retry: 1 re-ran (0 now ok, 1 still failing), 1 kept" in message.text
    all_failed = join([JobOutcome("a", Outcome.FAILED, 1.0, 2)])
    first_of_all = render_night(all_failed, CONFIG, night="n", catalogue="c")
    assert first_of_all[0].reply_to is None  # not a retry: top-level as before


def test_a_skipped_step_that_never_ran_is_still_skipped_not_re_ran() -> None:
    night = retry(Outcome.FAILED, Outcome.SKIPPED)
    (message,) = render_night(night, CONFIG, night="n", catalogue="c", reply_in=FIRST)
    assert message.text.splitlines()[1] == (
        "retry: 1 re-ran (0 now ok, 1 still failing), 1 still skipped, 1 kept"
    )


def test_without_a_first_digest_a_silent_route_stays_silent() -> None:
    assert render_night(retry(Outcome.SUCCEEDED), CONFIG, night="n", catalogue="c") == []
