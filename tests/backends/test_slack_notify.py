"""Slack notifications with the real slack-sdk clients over loopback against the emulator, the
outbox on SQLite and PostgreSQL: digests, mentions, escaping, retries, Slack down, threads."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from nightshift.config.notify import NotifyConfig
from nightshift.engine.alerts import Alert
from nightshift.engine.outcomes import JobOutcome, NightSummary, Outcome, Severity
from nightshift.notify.notifier import Notifier, SlackAlertSink, flush_outbox
from nightshift.notify.render import Message, render_night
from nightshift.notify.send import SlackSender
from nightshift.sandbox.slack_emulator import SlackEmulator
from nightshift.store.ledger import Ledger
from nightshift.store.outbox import Outbox
from tests.support import wait_until

TOKEN = "xoxb-test-7c1e55d0a9"  # distinctive: a leak into any line is easy to spot
NIGHT = "2026-11-29"
START, END = "2026-11-29T01:00:00+00:00", "2026-11-29T01:30:00+00:00"
ENV = {"SLACK_BOT_TOKEN": TOKEN}


@pytest.fixture
def slack() -> Iterator[SlackEmulator]:
    with SlackEmulator(TOKEN) as emulator:
        yield emulator


def _config(emulator: SlackEmulator, **routes: object) -> NotifyConfig:
    routes = routes or {
        "failed": {"channel": "#batch-alerts", "mention": "<!here>"},
        "partial": {"channel": "#batch-digest"},
        "alert": {"channel": "#batch-alerts"},
    }
    return NotifyConfig.model_validate(
        {"env": "test", "slack": {"base_url": emulator.base_url, "timeout": 5}, "routes": routes}
    )


def _notifier(
    emulator: SlackEmulator,
    outbox: Outbox | None = None,
    env: dict[str, str] = ENV,
    **routes: object,
) -> Notifier:
    config = _config(emulator, **routes)
    # no backoff between retries: the test waits on the emulator, not on a sleep
    sender = SlackSender(config.slack, env=env, backoff_s=0.0)
    return Notifier(config, catalogue="nightly", outbox=outbox, sender=sender)


@pytest.fixture
def outbox(db_url: str) -> Iterator[Outbox]:
    ledger = Ledger(db_url)  # creates the schema, outbox included
    yield Outbox(ledger.engine)
    ledger.close()


PARTIAL = NightSummary(
    Severity.PARTIAL,
    [JobOutcome("etl", Outcome.SUCCEEDED, 60, 1),
     JobOutcome("audit:internal-links", Outcome.FAILED, 720, 1, detail="boom <!channel> <b>x</b>")],
    START, END,
)  # fmt: skip
FAILED = NightSummary(Severity.FAILED, [JobOutcome("etl", Outcome.TIMEOUT, 1200, 1)], START, END)
OK = NightSummary(Severity.OK, [JobOutcome("etl", Outcome.SUCCEEDED, 60, 1)], START, END)


def test_an_ok_night_sends_nothing_and_a_partial_one_one_digest(slack: SlackEmulator) -> None:
    notifier = _notifier(slack)

    assert notifier.night_end(OK, night=NIGHT) == []
    [delivery] = notifier.night_end(PARTIAL, night=NIGHT)

    assert delivery.ok and delivery.ts
    [message] = slack.messages
    assert message.channel == "#batch-digest"
    assert message.text.startswith("partial: 1/2 succeeded (1 failed)")
    assert "• `audit:internal-links` (12m, failed)" in message.blocks[2]["text"]["text"]


def test_tonights_slow_job_arrives_in_a_digest_sent_anyway_and_alone_sends_nothing(
    slack: SlackEmulator,
) -> None:
    from nightshift.notify.slow import SlowJob

    notifier = _notifier(slack)
    slow = [SlowJob("etl", 60.0, 10.0, 13.6)]

    assert notifier.night_end(OK, night=NIGHT, slow=slow) == []  # quiet: a slow job alone
    [delivery] = notifier.night_end(PARTIAL, night=NIGHT, slow=slow)

    assert delivery.ok
    [message] = slack.messages
    line = "slow: etl 1m, usual 10s (4.4× p95)"
    assert line in message.text.splitlines()
    assert [b["text"]["text"] for b in message.blocks if b["type"] == "section"][-1] == line


def test_a_failed_night_is_one_message_with_the_mention(slack: SlackEmulator) -> None:
    _notifier(slack).night_end(FAILED, night=NIGHT)

    [message] = slack.messages
    assert message.channel == "#batch-alerts"
    assert message.text.startswith("<!here> failed: 0/1 succeeded")


def test_a_jobs_error_arrives_escaped(slack: SlackEmulator) -> None:
    _notifier(slack).night_end(PARTIAL, night=NIGHT)

    [message] = slack.messages
    line = message.blocks[2]["text"]["text"]
    assert "boom &lt;!channel&gt; &lt;b&gt;x&lt;/b&gt;" in line
    assert "<!channel>" not in message.text + str(message.blocks)
    assert "<b>" not in message.text + str(message.blocks)


def test_rate_limited_then_accepted_is_delivered_once(slack: SlackEmulator) -> None:
    slack.inject("429", retry_after=0)

    [delivery] = _notifier(slack).night_end(PARTIAL, night=NIGHT)

    assert delivery.ok
    assert [(endpoint, status) for endpoint, status, _ in slack.calls] == [
        ("chat.postMessage", 429),
        ("chat.postMessage", 200),
    ]
    assert len(slack.messages) == 1


def test_slack_down_keeps_the_digest_and_a_flush_delivers_it_once(
    slack: SlackEmulator, outbox: Outbox, caplog: pytest.LogCaptureFixture
) -> None:
    slack.down()
    with caplog.at_level(logging.ERROR, "nightshift.notify"):
        [delivery] = _notifier(slack, outbox).night_end(PARTIAL, night=NIGHT)

    assert not delivery.ok and not delivery.permanent
    assert "cannot reach Slack at http://127.0.0.1:" in (delivery.error or "")
    [kept] = outbox.pending()
    assert kept.kind == "digest" and kept.attempts == 1 and kept.last_error == delivery.error
    assert "kept in the outbox" in caplog.text and TOKEN not in caplog.text
    assert TOKEN not in repr(outbox.items())  # the outbox keeps the variable's name only

    slack.up()
    report = flush_outbox(outbox, env=ENV)
    again = flush_outbox(outbox, env=ENV)

    assert report.sent == [kept.id] and again.sent == []
    assert [m.channel for m in slack.messages] == ["#batch-digest"]
    assert outbox.pending() == []


def test_two_alerts_and_a_recovery_share_one_thread(slack: SlackEmulator, outbox: Outbox) -> None:
    notifier = _notifier(slack, outbox)
    sink = SlackAlertSink(notifier)
    at = datetime(2026, 11, 29, 3, tzinfo=UTC)

    sink.send(Alert(NIGHT, "nightly", "etl", "cli", "queued", "alert", 7800, 2460, at))
    sink.send(Alert(NIGHT, "nightly", "embed", "gemini_batch", "running", "alert", 900, 300, at))
    notifier.night_end(
        NightSummary(Severity.PARTIAL, [JobOutcome("etl", Outcome.SUCCEEDED, 9000, 1),
                                        JobOutcome("embed", Outcome.FAILED, 950, 1)], START, END),
        night=NIGHT,
    )  # fmt: skip

    alerts = slack.in_channel("#batch-alerts")
    root = alerts[0]
    assert root.thread_ts is None
    assert root.text.startswith("dwell alert: etl queued for 2h10m")
    assert [m.thread_ts for m in alerts[1:]] == [root.ts, root.ts]
    assert "recovered" in alerts[2].text and "etl" in alerts[2].text
    assert [m.channel for m in slack.messages] == [
        "#batch-alerts", "#batch-alerts", "#batch-digest", "#batch-alerts"
    ]  # fmt: skip
    assert slack.transcript().splitlines() == [
        "#batch-alerts",
        "  dwell alert: etl queued for 2h10m (p95 41m, x3.2), alert (nightly, test, night "
        "2026-11-29)",
        "    > dwell alert: embed running for 15m (p95 5m, x3.0), alert (nightly, test, night "
        "2026-11-29)",
        "    > recovered: etl succeeded (nightly, test, night 2026-11-29)",
        "#batch-digest",
        "  partial: 1/2 succeeded (1 failed) (test, night 2026-11-29)",
    ]
    # a second process (the watchdog) finds the same thread in the ledger
    other = _notifier(slack, outbox)
    other.notice(NIGHT, "embed", "timed out after 16m")
    assert slack.messages[-1].thread_ts == root.ts


def test_a_bad_token_is_one_line_naming_the_setting_and_the_message_stays(
    slack: SlackEmulator, outbox: Outbox, caplog: pytest.LogCaptureFixture
) -> None:
    wrong = {"SLACK_BOT_TOKEN": "xoxb-wrong-0000"}
    with caplog.at_level(logging.ERROR, "nightshift.notify"):
        [delivery] = _notifier(slack, outbox, env=wrong).night_end(PARTIAL, night=NIGHT)

    assert delivery.error == (
        "Slack refused the token (invalid_auth): fix notify.slack.token "
        "(environment variable SLACK_BOT_TOKEN)"
    )
    assert delivery.permanent
    assert len(outbox.pending()) == 1
    assert "xoxb-wrong-0000" not in caplog.text
    [record] = [r for r in caplog.records if "not sent" in r.getMessage()]
    assert "\n" not in record.getMessage()

    report = flush_outbox(outbox, env=wrong)  # still wrong: still kept, still one line
    assert report.sent == [] and len(report.kept) == 1
    assert flush_outbox(outbox, env=ENV).sent == [outbox.items()[0].id]
    assert len(slack.messages) == 1


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        ("channel_not_found", "Slack has no channel #batch-digest (channel_not_found): "
                              "fix notify.routes.partial"),
        ("not_in_channel", "the Slack bot is not in #batch-digest (not_in_channel): invite it "
                           "there, or fix notify.routes.partial"),
    ],
)  # fmt: skip
def test_channel_refusals_name_the_route_to_fix(
    slack: SlackEmulator, fault: str, expected: str
) -> None:
    slack.inject(fault)

    [delivery] = _notifier(slack).night_end(PARTIAL, night=NIGHT)

    assert delivery.error == expected and delivery.permanent


def test_a_webhook_route_posts_and_its_refusal_hides_the_url(slack: SlackEmulator) -> None:
    url = slack.webhook_url("#team")
    env = {"SLACK_HOOK": url}
    notifier = _notifier(slack, env=env, partial={"webhook": "SLACK_HOOK"})

    [delivery] = notifier.night_end(PARTIAL, night=NIGHT)
    slack.inject("channel_not_found")
    [refused] = notifier.night_end(PARTIAL, night=NIGHT)

    assert delivery.ok and [m.via for m in slack.messages] == ["webhook"]
    assert refused.error == (
        "the Slack webhook refused the message (HTTP 404 channel_not_found): "
        "fix notify.routes.partial.webhook (environment variable SLACK_HOOK)"
    )
    assert "whsecret" not in (refused.error or "")


def test_a_crash_between_send_and_mark_sends_it_at_most_once_more(
    slack: SlackEmulator, outbox: Outbox
) -> None:
    # what a crash leaves: the message kept, accepted by Slack, never marked sent; the crashed
    # writer's claim has run out (claim_s=0 here, 300 s in a night)
    notifier = _notifier(slack, outbox)
    message = _digest(notifier)
    item_id = outbox.add(
        catalogue="nightly", night=NIGHT, route=message.route,
        destination={"channel": "#batch-digest"}, slack={"base_url": slack.base_url},
        kind=message.kind, label=None, thread=False, text=message.text, blocks=message.blocks,
    )  # fmt: skip
    assert notifier.sender.post("partial", message.destination, message.text, message.blocks).ok

    first = flush_outbox(outbox, env=ENV)
    second = flush_outbox(outbox, env=ENV)

    assert first.sent == [item_id] and second.sent == []
    texts = [m.text for m in slack.messages]
    assert texts == [message.text, message.text]  # the accepted one, and exactly once more


def _digest(notifier: Notifier) -> Message:
    [message] = render_night(PARTIAL, notifier.config, night=NIGHT, catalogue="nightly")
    return message


def test_a_message_claimed_by_its_sender_is_left_alone_by_a_flush(
    slack: SlackEmulator, outbox: Outbox
) -> None:
    notifier = _notifier(slack, outbox)
    slack.down()
    notifier.night_end(PARTIAL, night=NIGHT)  # kept, and released: a flush may take it
    message = _digest(notifier)
    claimed = outbox.add(
        catalogue="nightly",
        night=NIGHT,
        route="partial",
        destination={"channel": "#x"},
        slack={"base_url": slack.base_url},
        kind="digest",
        label=None,
        thread=False,
        text=message.text,
        blocks=message.blocks,
        claim_s=300,
    )  # fmt: skip  (a night that is sending it right now)
    slack.up()

    report = flush_outbox(outbox, env=ENV)

    assert len(report.sent) == 1 and [m.channel for m in slack.messages] == ["#batch-digest"]
    assert [item.id for item in outbox.pending()] == [claimed]
    assert outbox.claim(claimed) is False


def test_no_token_in_the_environment_is_one_line_and_the_digest_is_kept(
    slack: SlackEmulator, outbox: Outbox
) -> None:
    [delivery] = _notifier(slack, outbox, env={}).night_end(
        PARTIAL, night=NIGHT, flow_run_id="run-1"
    )

    assert delivery.error == (
        "no Slack token: set notify.slack.token (environment variable SLACK_BOT_TOKEN)"
    )
    assert slack.calls == [] and len(outbox.pending()) == 1


def test_the_digest_links_the_flow_run_when_the_ui_is_known(slack: SlackEmulator) -> None:
    config = _config(slack).model_copy(update={"ui_url": "http://127.0.0.1:4200/"})
    sender = SlackSender(config.slack, env=ENV, backoff_s=0.0)
    notifier = Notifier(config, catalogue="nightly", sender=sender)

    notifier.night_end(PARTIAL, night=NIGHT, flow_run_id="run-1")

    [message] = slack.messages
    assert message.blocks[-1]["elements"][0]["text"] == (
        "<http://127.0.0.1:4200/runs/flow-run/run-1|Flow run in the Prefect UI>"
    )


def test_a_503_then_200_is_delivered_once(slack: SlackEmulator) -> None:
    slack.inject("503")

    [delivery] = _notifier(slack).night_end(PARTIAL, night=NIGHT)

    assert delivery.ok and [status for _, status, _ in slack.calls] == [503, 200]
    assert len(slack.messages) == 1


def test_a_retry_after_beyond_the_bound_goes_to_the_outbox_at_once(
    slack: SlackEmulator, outbox: Outbox
) -> None:
    slack.inject("429", retry_after=3600)

    [delivery] = _notifier(slack, outbox).night_end(PARTIAL, night=NIGHT)

    assert delivery.error == (
        "Slack did not accept the message to #batch-digest: ratelimited (rate limited after "
        "retries)"
    )
    assert not delivery.permanent and len(slack.calls) == 1 and len(outbox.pending()) == 1


def test_a_token_from_a_secret_block_and_a_missing_block(slack: SlackEmulator) -> None:
    config = NotifyConfig.model_validate(
        {"slack": {"token_block": "slack-bot", "base_url": slack.base_url},
         "routes": {"partial": {"channel": "#d"}}}
    )  # fmt: skip
    blocks = {"slack-bot": TOKEN}

    def load(name: str) -> str:  # stands in for Prefect's Secret.load(name).get()
        return blocks[name]

    ok = Notifier(config, catalogue="n", sender=SlackSender(config.slack, secret=load))
    [delivery] = ok.night_end(PARTIAL, night=NIGHT)
    blocks.clear()
    [missing] = ok.night_end(PARTIAL, night=NIGHT)

    assert delivery.ok and len(slack.messages) == 1
    assert missing.error == (
        "cannot read the Slack token: fix notify.slack.token_block (Prefect Secret block "
        "'slack-bot')"
    )


@pytest.mark.parametrize(
    ("levels", "sent"),
    [(["alert"], ["dwell alert"]), (["watch", "alert"], ["dwell watch", "dwell alert"])],
)
def test_watches_reach_slack_when_alert_levels_lists_them(
    slack: SlackEmulator, outbox: Outbox, levels: list[str], sent: list[str]
) -> None:
    from datetime import timedelta

    from nightshift.budgets.lookup import Budget
    from nightshift.engine.detection import BudgetTable, Detector
    from nightshift.engine.dwell_watch import DwellWatch, LevelOutlets
    from nightshift.engine.events import JobChanged
    from nightshift.loop import NightLoop
    from nightshift.store.alert_log import AlertLog

    config = _config(slack).model_copy(update={"alert_levels": levels})
    notifier = Notifier(config, catalogue="nightly", outbox=outbox,
                        sender=SlackSender(config.slack, env=ENV, backoff_s=0.0))  # fmt: skip
    at = datetime(2026, 11, 29, 3, tzinfo=UTC)
    now = [at]
    detector = Detector(NIGHT, "nightly", BudgetTable({("etl", "queued"): Budget(60, 100, 30)}))
    with NightLoop("test-dwell") as loop:  # the night's loop is its maker's, handed in
        watch = DwellWatch(
            detector, LevelOutlets(AlertLog(outbox.engine), lambda _e: None,
                                   SlackAlertSink(notifier)),
            wall=lambda: now[0], loop=loop,
        )  # fmt: skip
        watch.start()
        watch(JobChanged(NIGHT, "nightly", "etl", "cli", 1, "x", "queued", at, None))
        for seconds, level in ((150, "watch"), (250, "alert")):  # past p95, then 2 x p95
            now[0] = at + timedelta(seconds=seconds)
            watch.poke()  # the timer looks at the (moved) clock: the level is raised on its tick
            wait_until(lambda: ("etl", "queued", level) in watch.raised(), what=level)  # noqa: B023
        watch.stop()  # what was raised is delivered first
    assert [m.text.split(":")[0] for m in slack.in_channel("#batch-alerts")] == sent


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_in_night_alerts_are_kept_at_once_and_posted_by_the_nights_one_sender_in_order(
    slack: SlackEmulator, outbox: Outbox
) -> None:
    import threading
    from concurrent.futures import ThreadPoolExecutor

    notifier = _notifier(slack, outbox)
    posted_on: list[str] = []
    real_post = notifier.sender.post

    def post(*args: object, **kwargs: object) -> object:
        posted_on.append(threading.current_thread().name)
        return real_post(*args, **kwargs)  # type: ignore[arg-type]

    notifier.sender.post = post  # type: ignore[method-assign]
    sender = ThreadPoolExecutor(1, thread_name_prefix="slack")
    busy = threading.Event()
    sender.submit(busy.wait, 30)  # Slack is slow: the sender is still on an earlier post
    notifier.sending_from(sender)
    at = datetime(2026, 11, 29, 3, 0, tzinfo=UTC)
    for label in ("etl", "embed"):  # from this (a status) thread: kept, not posted here
        assert (
            notifier.alert(Alert(NIGHT, "nightly", label, "cli", "queued", "alert", 900, 300, at))
            is None
        )
    kept = outbox.items()
    assert [i.label for i in kept] == ["etl", "embed"] and all(i.sent_at is None for i in kept)
    assert slack.messages == []
    busy.set()
    notifier.sending_from(None)  # the night's end: what was handed over is posted first
    first, second = slack.in_channel("#batch-alerts")
    assert second.thread_ts == first.ts  # in order: the first starts the night's thread
    assert posted_on == ["slack_0", "slack_0"]
    assert all(i.sent_at is not None for i in outbox.items())
    sender.shutdown()
