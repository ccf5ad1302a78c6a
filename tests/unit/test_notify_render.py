"""Slack messages from literal night summaries and alerts: routing, content, escaping, limits."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from nightshift.budgets.lookup import Budget, Budgets
from nightshift.config.loader import parse_catalogue
from nightshift.config.notify import NotifyConfig
from nightshift.engine.alerts import Alert
from nightshift.engine.outcomes import JobOutcome, NightSummary, Outcome, Severity
from nightshift.errors import CatalogueError
from nightshift.notify.blocks import HEADER_CHARS, MAX_BLOCKS, SECTION_CHARS, escape, pack_lines
from nightshift.notify.render import (
    flow_run_link,
    job_line,
    render_alert,
    render_night,
    render_recovered,
)
from nightshift.notify.slow import SlowJob, slow_jobs, slow_line

CONFIG = NotifyConfig.model_validate(
    {
        "env": "production",
        "routes": {
            "failed": {"channel": "#batch-alerts", "mention": "<!here>"},
            "partial": {"channel": "#batch-digest"},
            "alert": {"channel": "#batch-alerts"},
        },
    }
)
START, END = "2026-11-29T01:00:00+00:00", "2026-11-29T02:12:00+00:00"


def _night(severity: Severity, *jobs: JobOutcome) -> NightSummary:
    return NightSummary(severity, list(jobs), START, END)


def _texts(blocks: list[dict]) -> str:
    return json.dumps(blocks, ensure_ascii=False)


def test_an_ok_night_says_nothing_unless_an_ok_route_is_set() -> None:
    night = _night(Severity.OK, JobOutcome("etl", Outcome.SUCCEEDED, 60, 1))

    assert render_night(night, CONFIG, night="2026-11-29", catalogue="nightly") == []
    raw = CONFIG.model_dump(exclude_none=True)
    heartbeat = NotifyConfig.model_validate(
        {**raw, "routes": {**raw["routes"], "ok": {"channel": "#heartbeat"}}}
    )
    [message] = render_night(night, heartbeat, night="2026-11-29", catalogue="nightly")
    assert message.destination.channel == "#heartbeat"
    assert message.route == "ok"


def test_a_partial_night_is_one_digest_with_a_line_per_job_that_was_not_ok() -> None:
    night = _night(
        Severity.PARTIAL,
        JobOutcome("generate:a", Outcome.SUCCEEDED, 300, 1),
        JobOutcome("audit:internal-links", Outcome.FAILED, 720, 1, detail="exit code 2\ntrace..."),
        JobOutcome(
            "embed:docs", Outcome.PARTIAL, 3900, 1, detail="rows 12/15 ok, 0 failed, 3 missing",
            data={"reconciliation": {"submitted": 15, "succeeded": 12, "failed": 0,
                                     "missing": 3}},
        ),
    )  # fmt: skip

    [message] = render_night(
        night, CONFIG, night="2026-11-29", catalogue="nightly",
        flow_run_url=flow_run_link("http://127.0.0.1:4200", "abc-123"),
    )  # fmt: skip

    assert message.route == "partial"
    assert message.destination.channel == "#batch-digest"
    head = message.blocks[0]
    assert head["type"] == "header"
    assert "PARTIAL" in head["text"]["text"] and "production" in head["text"]["text"]
    assert "night 2026-11-29" in head["text"]["text"]
    facts = message.blocks[1]["text"]["text"]
    assert "*Started* 2026-11-29 01:00 UTC · *Duration* 1h12m" in facts
    assert "*Jobs* 3: 1 ok, 1 partial, 1 failed, 0 timeout, 0 stuck, 0 skipped" in facts
    lines = message.blocks[2]["text"]["text"].splitlines()
    assert lines == [
        "• `audit:internal-links` (12m, failed): exit code 2",
        "• `embed:docs` (1h05m, partial): rows 12/15 ok, 0 failed, 3 missing",
    ]
    assert message.blocks[-1]["elements"][0]["text"] == (
        "<http://127.0.0.1:4200/runs/flow-run/abc-123|Flow run in the Prefect UI>"
    )
    assert message.text.startswith("partial: 1/3 succeeded (1 failed, 1 partial)")
    assert "<!here>" not in message.text


def test_a_failed_night_carries_the_mention_in_text_and_blocks() -> None:
    night = _night(Severity.FAILED, JobOutcome("etl", Outcome.TIMEOUT, 1200, 1))

    [message] = render_night(night, CONFIG, night="2026-11-29", catalogue="nightly")

    assert message.destination.channel == "#batch-alerts"
    assert message.text.startswith("<!here> failed: 0/1 succeeded")
    assert message.blocks[1]["text"]["text"].startswith("<!here> ")
    assert "• `etl` (20m, timeout)" in _texts(message.blocks)


def test_job_text_is_escaped_so_it_pings_nobody() -> None:
    job = JobOutcome("etl", Outcome.FAILED, 5, 1, detail="boom <!channel> & <b>bold</b> <@U123>")
    night = _night(Severity.FAILED, job)

    [message] = render_night(night, CONFIG, night="2026-11-29", catalogue="x<y>")

    assert job_line(job) == (
        "• `etl` (5s, failed): boom &lt;!channel&gt; &amp; &lt;b&gt;bold&lt;/b&gt; &lt;@U123&gt;"
    )
    everything = message.text + _texts(message.blocks)
    assert (
        "<!channel>" not in everything and "<b>" not in everything and "<@U123>" not in everything
    )
    assert "&lt;!channel&gt;" in message.text
    assert escape("a&lt;") == "a&amp;lt;"


def test_a_60_job_partial_night_fits_slacks_limits() -> None:
    jobs = [
        JobOutcome(f"job:{i:02d}", Outcome.FAILED, 60 * i, 1, detail="E" * 400) for i in range(60)
    ]
    night = _night(Severity.PARTIAL, JobOutcome("ok", Outcome.SUCCEEDED, 1, 1), *jobs)

    [message] = render_night(night, CONFIG, night="2026-11-29", catalogue="n" * 300)

    assert len(message.blocks) <= MAX_BLOCKS
    assert len(message.blocks[0]["text"]["text"]) <= HEADER_CHARS
    sections = [b["text"]["text"] for b in message.blocks if b["type"] == "section"]
    assert all(len(text) <= SECTION_CHARS for text in sections)
    shown = sum(text.count("• `job:") for text in sections)
    assert shown == 60  # 60 lines of ~330 characters fit in 7 sections
    assert len(message.text) <= 3000


def test_lines_beyond_the_block_limit_end_in_and_n_more() -> None:
    lines = [f"line {i} " + "x" * 990 for i in range(500)]

    blocks = pack_lines(lines, 5)

    assert len(blocks) == 5
    texts = [b["text"]["text"] for b in blocks]
    assert all(len(t) <= SECTION_CHARS for t in texts)
    shown = sum(t.count("line ") for t in texts)
    assert texts[-1].endswith(f"... and {500 - shown} more")
    assert shown == 14  # three ~1,000-character lines a section; the last keeps room for "more"


ALERT = Alert(
    night="2026-11-29", catalogue="nightly", label="etl", backend="cli", state="queued",
    level="alert", dwell_s=7800, p95_s=2460, at=datetime(2026, 11, 29, 3, tzinfo=UTC),
)  # fmt: skip


def test_an_alert_and_its_recovery_are_thread_replies_for_the_alert_route() -> None:
    message = render_alert(ALERT, CONFIG)
    recovered = render_recovered(
        CONFIG, night="2026-11-29", catalogue="nightly",
        job=JobOutcome("etl", Outcome.SUCCEEDED, 9000, 1),
    )  # fmt: skip

    assert message is not None and recovered is not None
    assert (message.route, message.kind, message.label, message.thread) == (
        "alert", "alert", "etl", True,
    )  # fmt: skip
    assert (
        "`etl` (cli) queued for 2h10m (p95 41m, x3.2), alert" in message.blocks[0]["text"]["text"]
    )
    assert (recovered.kind, recovered.thread) == ("recovered", True)
    assert "`etl` recovered: ok after 2h30m" in recovered.blocks[0]["text"]["text"]
    watch = Alert(**{**ALERT.__dict__, "level": "watch"})
    assert render_alert(watch, CONFIG) is None  # only alert_levels are sent


def _catalogue(notify: str) -> str:
    return "jobs:\n  - {label: a, backend: command, argv: [echo]}\nnotify:\n" + notify


def test_a_notify_section_loads_into_the_catalogue() -> None:
    catalogue = parse_catalogue(
        _catalogue(
            "  env: staging\n  slack: {token_block: slack-bot}\n"
            "  routes:\n    partial: {webhook: SLACK_DIGEST_HOOK}\n"
        )
    )
    assert catalogue.notify is not None
    assert catalogue.notify.slack.token_setting == (
        "notify.slack.token_block (Prefect Secret block 'slack-bot')"
    )
    assert catalogue.notify.routes.partial is not None
    assert catalogue.notify.routes.partial.target == "webhook $SLACK_DIGEST_HOOK"
    assert (
        parse_catalogue(_catalogue("  env: x\n").replace("notify:\n  env: x\n", "")).notify is None
    )


@pytest.mark.parametrize(
    ("notify", "expected"),
    [
        ("  routes:\n    failed: {channel: '#a', webhook: HOOK}\n",
         "c.yaml:5: field 'notify.routes.failed': give exactly one of channel, webhook"),
        ("  routes:\n    failed: {chanel: '#a'}\n",
         "c.yaml:5: field 'notify.routes.failed.chanel': unknown key"),
        ("  slack: {token: xoxb-1234-secret}\n",
         "c.yaml:4: field 'notify.slack.token': must name an environment variable"),
        ("  routes:\n    failed: {channel: '#a', mention: '@here'}\n",
         "c.yaml:5: field 'notify.routes.failed.mention': use Slack's syntax"),
        ("  routes:\n    nightly: {channel: '#a'}\n",
         "c.yaml:5: field 'notify.routes.nightly': unknown key"),
    ],
)  # fmt: skip
def test_bad_notify_config_is_a_catalogue_error_with_line_and_field(
    notify: str, expected: str
) -> None:
    with pytest.raises(CatalogueError) as caught:
        parse_catalogue(_catalogue(notify), "c.yaml")

    assert expected in str(caught.value)
    assert "xoxb-1234-secret" not in str(caught.value)


def test_a_batch_line_says_its_rows_once() -> None:
    from nightshift.notify.render import job_line

    rec = {"submitted": 12, "succeeded": 9, "failed": 0, "missing": 3}
    batch = JobOutcome(
        "report:admob",
        Outcome.PARTIAL,
        600,
        1,
        detail="batch succeeded; rows 9/12 ok, 0 failed, 3 missing ~$0.01; 3 rows via fallback",
        data={"reconciliation": rec},
    )
    only_rows = JobOutcome(
        "report:b", Outcome.PARTIAL, 60, 1, detail="rows 9/12 ok", data={"reconciliation": rec}
    )

    assert job_line(batch) == (
        "• `report:admob` (10m, partial): rows 9/12 ok, 0 failed, 3 missing"
        " - batch succeeded; 3 rows via fallback"
    )
    assert job_line(only_rows).endswith("rows 9/12 ok, 0 failed, 3 missing")


# tonight's slow jobs: whole-job budgets (p50, p95) as the latest snapshot would give them
BUDGETS = {
    "extract:orders": (3.0, 3.2),  # 14 s tonight: 4.4 x its p95
    "load:orders": (20.0, 30.0),  # 45 s tonight: 1.5 x
    "ping": (0.5, 1.5),  # 3 s tonight: past its p95 but not its floor (5 s): not slow
    "audit:links": (2.0, 4.0),  # failed after 10 s tonight: slow too (2.5 x)
    "publish": (1.0, 2.0),  # skipped tonight: did not run
    "fetch": (1.0, 2.0),  # kept from an earlier run of the night: did not run tonight
}


def _slow_night(severity: Severity) -> NightSummary:
    def ran(label: str, state: Outcome, took: float, **more: object) -> JobOutcome:
        return JobOutcome(label, state, took, attempts=1, external_id=f"id-{label}", **more)  # type: ignore[arg-type]

    jobs = [
        ran("extract:orders", Outcome.SUCCEEDED, 14.0),
        ran("load:orders", Outcome.SUCCEEDED, 45.0),
        ran("ping", Outcome.SUCCEEDED, 3.0),
        ran("learning", Outcome.SUCCEEDED, 99.0),  # no budget yet
        ran("fetch", Outcome.SUCCEEDED, 60.0, kept=True),
    ]
    if severity is not Severity.OK:
        jobs += [
            ran("audit:links", Outcome.FAILED, 10.0, detail="exit code 3"),
            JobOutcome("publish", Outcome.SKIPPED, 0.0),
        ]
    return _night(severity, *jobs)


def _budget_of(label: str) -> Budget | None:
    return Budget(*BUDGETS[label], n=12) if label in BUDGETS else None


def test_tonights_slow_jobs_are_those_past_their_whole_job_watch_line_worst_first() -> None:
    slow = slow_jobs(_slow_night(Severity.PARTIAL), _budget_of)

    assert [(j.label, round(j.ratio, 2)) for j in slow] == [
        ("extract:orders", 4.38),
        ("audit:links", 2.5),
        ("load:orders", 1.5),
    ]
    assert slow_line(slow) == (
        "slow: extract:orders 14s, usual 3s (4.4× p95); audit:links 10s, usual 2s (2.5× p95);"
        " load:orders 45s, usual 20s (1.5× p95)"
    )
    assert slow_line(slow, most=1) == "slow: extract:orders 14s, usual 3s (4.4× p95); and 2 more"
    assert slow_line([]) is None
    budgets = Budgets(jobs={("nightly", label): Budget(*BUDGETS[label]) for label in BUDGETS})
    assert slow_jobs(_slow_night(Severity.PARTIAL), lambda x: budgets.job("nightly", x)) == slow


def test_a_digest_sent_anyway_names_tonights_slow_jobs_in_one_line() -> None:
    night = _slow_night(Severity.PARTIAL)
    slow = slow_jobs(night, _budget_of)

    [message] = render_night(
        night, CONFIG, night="2026-11-29", catalogue="nightly", slow=slow,
        flow_run_url=flow_run_link("http://127.0.0.1:4200", "abc-123"),
    )  # fmt: skip

    line = slow_line(slow)
    assert line is not None and line.startswith("slow: extract:orders 14s, usual 3s (4.4× p95)")
    # one line of the text, after the jobs not ok and before the link
    lines = message.text.splitlines()
    assert lines.count(line) == 1
    assert lines.index(line) == len(lines) - 2 and lines[-1].endswith("/flow-run/abc-123")
    # one section of the blocks, before the link
    sections = [b["text"]["text"] for b in message.blocks if b["type"] == "section"]
    assert sections[-1] == line and sum(line in text for text in sections) == 1
    assert message.blocks[-1]["type"] == "context"
    # without slow jobs the digest is as it was
    [plain] = render_night(night, CONFIG, night="2026-11-29", catalogue="nightly")
    assert "slow:" not in plain.text + _texts(plain.blocks)


def test_a_calm_night_with_a_slow_job_still_sends_nothing() -> None:
    night = _slow_night(Severity.OK)
    slow = slow_jobs(night, _budget_of)
    assert [j.label for j in slow] == ["extract:orders", "load:orders"]

    assert render_night(night, CONFIG, night="2026-11-29", catalogue="nightly", slow=slow) == []


def test_the_slow_line_fits_a_digest_at_slacks_limits_and_is_escaped() -> None:
    jobs = [
        JobOutcome(f"job:{i:02d}", Outcome.FAILED, 60 * i, 1, detail="E" * 400) for i in range(60)
    ]
    night = _night(Severity.PARTIAL, JobOutcome("ok", Outcome.SUCCEEDED, 1, 1), *jobs)
    slow = [SlowJob(f"<!channel> {i}", 100.0 + i, 3.0, 4.0) for i in range(9)]

    [message] = render_night(night, CONFIG, night="2026-11-29", catalogue="nightly", slow=slow)

    assert len(message.blocks) <= MAX_BLOCKS
    sections = [b["text"]["text"] for b in message.blocks if b["type"] == "section"]
    assert sections[-1].startswith("slow: &lt;!channel&gt; 0 2m, usual 3s (25.0× p95);")
    assert sections[-1].endswith("; and 4 more")
    assert "<!channel>" not in _texts(message.blocks) + message.text


def test_a_digest_of_a_night_that_ran_late_says_so() -> None:
    from dataclasses import replace

    night = _night(Severity.PARTIAL, JobOutcome("audit:links", Outcome.FAILED, 60, 1, detail="x"))
    late = "ran late: scheduled 2026-11-29 02:00 UTC, started 2026-11-29 09:12 UTC (7h12m late)"
    [message] = render_night(
        replace(night, late=late), CONFIG, night="2026-11-29", catalogue="nightly"
    )
    assert late in message.text and late in _texts(message.blocks)
    [on_time] = render_night(night, CONFIG, night="2026-11-29", catalogue="nightly")
    assert "ran late" not in on_time.text


def test_a_traced_nights_digest_links_its_trace() -> None:
    """The night's trace id (and its link, from the catalogue's telemetry.trace_url) is the
    digest's last context line and its text's last line; an untraced night has neither."""
    import dataclasses

    trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    bad = JobOutcome("audit", Outcome.FAILED, 720, 1)
    night = dataclasses.replace(
        _night(Severity.PARTIAL, bad, JobOutcome("etl", Outcome.SUCCEEDED, 60, 1)),
        trace=trace,
        trace_url=f"https://tempo.internal/trace/{trace}",
    )
    (message,) = render_night(night, CONFIG, night="2026-11-29", catalogue="nightly")
    assert message.blocks[-1] == {
        "type": "context",
        "elements": [
            {"type": "mrkdwn", "text": f"<https://tempo.internal/trace/{trace}|Trace {trace}>"}
        ],
    }
    assert message.text.splitlines()[-1] == f"trace {trace}"
    plain = dataclasses.replace(night, trace=None, trace_url=None)
    (untraced,) = render_night(plain, CONFIG, night="2026-11-29", catalogue="nightly")
    assert "Trace" not in _texts(untraced.blocks) and "trace" not in untraced.text
