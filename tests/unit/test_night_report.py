"""The night report as a value and as markdown: pure, drawn from literal nights."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from nightshift.engine.explain import tail_end
from nightshift.engine.outcomes import JobOutcome, NightSummary, Outcome, join, retry_line
from nightshift.orchestration.night_report import (
    SlackLine,
    Usual,
    WatchLine,
    build_report,
    render_report,
)
from nightshift.orchestration.night_runs import (
    RunSpan,
    Try,
    night_runs,
    record_from_json,
    record_of,
)
from nightshift.store.ledger import Transition


def job(label: str, state: Outcome, seconds: float, **kw: object) -> JobOutcome:
    return JobOutcome(label=label, state=state, duration_s=seconds, attempts=1, **kw)  # type: ignore[arg-type]


NIGHT = join(
    [
        job("fast", Outcome.SUCCEEDED, 10, external_id="c-1"),
        job("slow", Outcome.SUCCEEDED, 300, external_id="c-2"),
        job("stuck", Outcome.STUCK_QUEUED, 900, detail="still queued after 15m", external_id="j-9"),
        job(
            "broken",
            Outcome.FAILED,
            3,
            detail="exit code 3",
            external_id="c-3",
            log_tail_path="/runs/x/logs/broken.tail.log",
        ),
        job("kept", Outcome.SUCCEEDED, 50, external_id="c-0", kept=True),
    ],
    "2026-12-01T02:00:00+00:00",
    "2026-12-01T02:20:00+00:00",
)
USUAL = {"fast": Usual(8, 12), "slow": Usual(60, 100), "kept": Usual(40, 60)}


def report() -> dict[str, object]:
    return build_report(
        NIGHT,
        night="2026-12-01",
        catalogue="nightly",
        usual=USUAL,
        excerpts={"broken": ["Traceback (most recent call last):", "OSError: disk full"]},
        watches=[WatchLine("slow", "alert", "dwell", "running", 250.0, 100.0, "night")],
        slack=[SlackLine("#digest", "digest", "partial: 3/5 succeeded", None, "171.1", True)],
    )


def test_jobs_come_worst_first_with_their_usual_and_ratio() -> None:
    page = report()
    jobs = page["jobs"]
    assert isinstance(jobs, list)
    assert [j["label"] for j in jobs] == ["broken", "stuck", "slow", "fast", "kept"]
    slow = jobs[2]
    assert (slow["usual_p50_s"], slow["usual_p95_s"], slow["ratio"]) == (60, 100, 3.0)
    assert jobs[1]["shown_as"] == "Stuck"
    assert jobs[4]["tonight"] == "kept" and jobs[4]["shown_as"] == "Kept"
    assert jobs[4]["ratio"] is None  # a kept job did not run tonight: nothing to compare
    assert page["headline"] == (
        "partial: 3/5 succeeded (1 failed, 1 stuck_queued); "
        "retry: 4 re-ran (2 now ok, 2 still failing), 1 kept; "
        "worst: broken (3s, failed), stuck (15m, stuck_queued)"
    )
    assert page["retry"] == "retry: 4 re-ran (2 now ok, 2 still failing), 1 kept"


def test_the_markdown_page_has_every_part() -> None:
    text = render_report(report(), plot="data:image/png;base64,AAAA")
    assert text.startswith("# Night 2026-12-01 · nightly\n")
    assert "**partial: 3/5 succeeded" in text
    assert "; retry: 4 re-ran (2 now ok, 2 still failing), 1 kept; " in text
    assert "| `slow` | Completed | 5m | 1m / 2m | x3.0 | 1 | `c-2` |" in text
    assert "| `kept` | Kept | 50s earlier | 40s / 1m | " in text
    assert "**broken** (Failed): exit code 3" in text
    assert "- tail: `/runs/x/logs/broken.tail.log`" in text
    assert "```\nTraceback (most recent call last):\nOSError: disk full\n```" in text
    assert "- **alert** `slow` dwell in running for 4m (p95 2m, x2.5), by the night" in text
    assert "| #digest | digest | partial: 3/5 succeeded | top-level | yes |" in text
    assert "- #digest digest: ts `171.1`" in text  # Slack's id, below the table
    assert "![durations against budgets](data:image/png;base64,AAAA)" in text
    # the table comes before the reasons: the first screen is the table
    assert text.index("## Jobs, worst first") < text.index("## Why")


def test_the_page_says_when_the_night_ran_in_words_a_reader_scans() -> None:
    text = render_report(report())
    assert "Ran 02:00:00-02:20:00 UTC (20m)" in text
    assert "T02:00:00+00:00" not in text
    # a night that crosses midnight names both days; one that never finished says so
    late = join(NIGHT.jobs, "2026-12-01T23:50:00+00:00", "2026-12-02T00:10:05+00:00")
    page = build_report(late, night="2026-12-01", catalogue="nightly")
    assert "Ran 2026-12-01 23:50:00 - 2026-12-02 00:10:05 UTC (20m)" in render_report(page)
    cut = join(NIGHT.jobs, "2026-12-01T02:00:00+00:00", None)
    page = build_report(cut, night="2026-12-01", catalogue="nightly")
    assert "Started 02:00:00 UTC, no end recorded" in render_report(page)


def test_a_night_without_slack_or_watches_says_so() -> None:
    page = build_report(NIGHT, night="2026-12-01", catalogue="nightly")
    text = render_report(page)
    assert "None tonight." in text
    assert "Nothing: the catalogue has no `notify:` section." in text
    assert "| `fast` | Completed | 10s | learning |  |" in text  # no budgets yet
    assert "![" not in text


def test_a_job_that_did_not_run_tonight_has_no_time_and_no_ratio() -> None:
    night = join(
        [
            job("fetch", Outcome.FAILED, 1, external_id="c-1", detail="exit code 3"),
            JobOutcome("summarize", Outcome.SKIPPED, detail="fetch failed"),
        ]
    )
    page = build_report(night, night="n", catalogue="c", usual={"summarize": Usual(2, 3)})
    skipped = page["jobs"][1]
    assert (skipped["tonight"], skipped["ratio"]) == ("not run", None)
    assert "| `summarize` | Skipped | not run | 2s / 3s |  | 0 |  |" in render_report(page)


def test_a_first_run_has_no_retry_line() -> None:
    first = join([job("a", Outcome.SUCCEEDED, 1)])
    assert retry_line(first) is None


# -- a retry reads as one night ------------------------------------------------------------
DAY = "2026-12-05"
FIRST_RUN = ("2026-12-05T15:12:29+00:00", "2026-12-05T15:12:45+00:00")
RETRY_RUN = ("2026-12-05T15:17:22+00:00", "2026-12-05T15:17:29+00:00")
AUDIT_TAIL = "/state/runs/2026-12-05/151229-aaaaaa/logs/audit+links.tail.log"


def row(i: int, label: str, state: str, at: str, attempt: int, run: str = "flow-1") -> Transition:
    when = datetime.fromisoformat(f"2026-12-05T{at}+00:00")
    return Transition(i, DAY, run, label, "command", None, None, state, when, None, attempt)


# the ledger of the night: the audit failed, then was fixed and re-ran ok; a chain's
# first step failed twice, its second step never ran; three jobs were ok at once (kept after).
# The UI's Retry keeps the flow run id: both runs' rows carry the same run_id.
ROWS = [
    row(1, "gen:articles", "submitting", "15:12:30", 1),
    row(2, "fetch:feeds", "submitting", "15:12:30", 1),
    row(3, "fetch:feeds", "failed", "15:12:31", 1),
    row(4, "publish:feeds", "skipped", "15:12:31", 0),
    row(5, "audit:links", "submitting", "15:12:30", 1),
    row(6, "audit:links", "failed", "15:12:37", 1),
    row(7, "gen:articles", "succeeded", "15:12:40", 1),
    row(8, "audit:links", "submitting", "15:17:23", 2),
    row(9, "fetch:feeds", "submitting", "15:17:23", 2),
    row(10, "fetch:feeds", "failed", "15:17:25", 2),
    row(11, "audit:links", "succeeded", "15:17:27", 2),
]
FIRST_SUMMARY = {  # what the first run left in its run folder's summary.json
    "started_at": FIRST_RUN[0],
    "finished_at": FIRST_RUN[1],
    "jobs": [
        {"label": "audit:links", "state": "failed", "attempts": 1, "detail": "exit code 3",
         "log_tail_path": AUDIT_TAIL},
        {"label": "fetch:feeds", "state": "failed", "attempts": 1, "detail": "exit code 3"},
        {"label": "publish:feeds", "state": "skipped", "attempts": 0,
         "detail": "fetch:feeds failed"},
        {"label": "gen:articles", "state": "succeeded", "attempts": 1},
    ],
}  # fmt: skip


def retried() -> NightSummary:
    """The retry's own summary: what it re-ran, what it kept."""
    kept = [
        JobOutcome(x, Outcome.SUCCEEDED, 3.0, 1, external_id=f"{x}-1", kept=True)
        for x in ("gen:articles", "extract:orders", "report:daily")
    ]
    return join(
        [
            replace(job("audit:links", Outcome.SUCCEEDED, 4, external_id="a-2"), attempts=2),
            replace(
                job("fetch:feeds", Outcome.FAILED, 2, detail="exit code 3: feed down"), attempts=2
            ),
            JobOutcome("publish:feeds", Outcome.SKIPPED, detail="fetch:feeds failed"),
            *kept,
        ],
        *RETRY_RUN,
    )


def test_a_retry_counts_only_the_jobs_that_ran_a_skipped_step_is_still_skipped() -> None:
    assert retry_line(retried()) == (
        "retry: 2 re-ran (1 now ok, 1 still failing), 1 still skipped, 3 kept"
    )
    only_kept = join([JobOutcome("a", Outcome.SUCCEEDED, 1.0, 1, kept=True)])
    assert retry_line(only_kept) == "retry: 0 re-ran, 1 kept"


def test_the_runs_of_a_night_and_each_jobs_tries_come_from_the_ledger_and_the_summaries() -> None:
    first = record_from_json(FIRST_SUMMARY)
    now = record_of(retried())
    assert first is not None and now is not None
    runs, tries = night_runs([now, first], ROWS)
    assert runs == [RunSpan(*FIRST_RUN), RunSpan(*RETRY_RUN)]
    assert tries["audit:links"] == [
        Try(1, "failed", "2026-12-05T15:12:37+00:00", "exit code 3", AUDIT_TAIL),
        Try(2, "succeeded", "2026-12-05T15:17:27+00:00"),
    ]
    assert [(t.attempt, t.state, t.reason) for t in tries["fetch:feeds"]] == [
        (1, "failed", "exit code 3"),
        (2, "failed", "exit code 3: feed down"),
    ]
    assert tries["publish:feeds"] == [
        Try(0, "skipped", "2026-12-05T15:12:31+00:00", "fetch:feeds failed")
    ]


def test_a_run_that_left_no_summary_is_dated_by_its_ledger_rows() -> None:
    """The first run's summary.json is gone (a kill -9, or a run folder the retry reused)."""
    now = record_of(retried())
    assert now is not None
    runs, tries = night_runs([now], ROWS)
    assert runs == [
        RunSpan("2026-12-05T15:12:30+00:00", "2026-12-05T15:12:40+00:00", "ledger"),
        RunSpan(*RETRY_RUN),
    ]
    assert tries["audit:links"][0] == Try(1, "failed", "2026-12-05T15:12:37+00:00")  # no reason
    page = build_report(retried(), night=DAY, catalogue="morning", runs=runs, tries=tries)
    assert render_report(page).splitlines()[4] == (
        "Ran 15:12:30-15:12:40 UTC (10s, dated by its ledger rows: no summary kept); "
        "retry 15:17:22-15:17:29 (7s)"
    )


def test_the_report_after_a_retry_reads_as_one_night() -> None:
    first = record_from_json(FIRST_SUMMARY)
    now = record_of(retried())
    assert first is not None and now is not None
    runs, tries = night_runs([now, first], ROWS)
    page = build_report(
        retried(),
        night=DAY,
        catalogue="morning",
        excerpts={"audit:links": ["checking 214 links", "2 broken links found"]},
        runs=runs,
        tries=tries,
    )
    assert page["retry"] == "retry: 2 re-ran (1 now ok, 1 still failing), 1 still skipped, 3 kept"
    audit = next(j for j in page["jobs"] if j["label"] == "audit:links")
    assert audit["last_failure"] == {
        "attempt": 1,
        "state": "failed",
        "at": "2026-12-05T15:12:37+00:00",
        "reason": "exit code 3",
        "log_tail_path": AUDIT_TAIL,
    }
    text = render_report(page)
    assert "\nRan 15:12:29-15:12:45 UTC (16s); retry 15:17:22-15:17:29 (7s)\n" in text
    why = text.split("## Why", 1)[1].split("## Watches", 1)[0]
    assert (
        "**audit:links** (Completed): failed on attempt 1 at 15:12, ok on attempt 2\n"
        "- last failure (failed on attempt 1 at 15:12): exit code 3\n"
        f"- tail: `{AUDIT_TAIL}`\n\n```\nchecking 214 links\n2 broken links found\n```"
    ) in why
    assert (
        "**fetch:feeds** (Failed): exit code 3: feed down\n"
        "- tonight: failed on attempt 1 at 15:12, failed on attempt 2 at 15:17\n"
    ) in why
    assert "**publish:feeds** (Skipped): fetch:feeds failed\n" in why
    assert "gen:articles" not in why  # ok all night: nothing to explain


def test_a_report_kept_before_runs_were_still_says_when_the_night_ran() -> None:
    page = build_report(NIGHT, night="2026-12-01", catalogue="nightly")
    del page["runs"]
    assert "\nRan 02:00:00-02:20:00 UTC (20m)\n" in render_report(page)


# -- tables that fit the card ----------------------------------------------------------------
def test_long_ids_and_labels_are_shortened_in_the_table_and_kept_in_full_below_it() -> None:
    batch = "batches/0123456789abcdefghijklmnopqrstuv"
    label = "report:weekly-revenue-by-region-and-product"
    night = join(
        [
            job("gen:articles", Outcome.PARTIAL, 120, external_id=batch, detail="3 rows failed"),
            job(label, Outcome.SUCCEEDED, 3, external_id="3f2b8c1e-9d4a-4b7e-8c2f-1a2b3c4d5e6f"),
            job("short", Outcome.SUCCEEDED, 1, external_id="c-1"),
        ]
    )
    long_line = "partial: 2/3 succeeded (1 partial) (prod, night 2026-12-05) " + "x" * 80
    slack = [
        SlackLine("#batch-digest", "digest", long_line, None, "1733412345.123456", True),
        SlackLine("#batch-digest", "digest", "retry", "1733412345.123456", None, False),
    ]
    text = render_report(build_report(night, night="n", catalogue="c", slack=slack))
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert "| `gen:articles` | Partial | 2m | learning |  | 1 | `batches/…` |" in rows
    assert "| `report:weekly-revenue-…` | Completed | 3s | learning |  | 1 | `3f2b8c1e…` |" in rows
    assert "| `short` | Completed | 1s | learning |  | 1 | `c-1` |" in rows
    for cells in (r.strip("|").split(" | ") for r in rows):
        assert all(len(c.strip()) <= 44 for c in cells), cells  # a Slack line at most 43 + …
        assert all(len(c.strip()) <= 25 for c in cells if "partial: 2/3" not in c), cells
    below = text.split("Full labels and external ids:", 1)[1].split("## ", 1)[0]
    assert f"- `gen:articles`: `{batch}`" in below
    assert f"- `{label}`: `3f2b8c1e-9d4a-4b7e-8c2f-1a2b3c4d5e6f`" in below
    assert "short" not in below
    assert f"| #batch-digest | digest | {long_line[:42]}… | top-level | yes |" in rows
    assert "| #batch-digest | digest | retry | reply | not yet (outbox) |" in rows
    assert f"- #batch-digest digest: ts `1733412345.123456`: {long_line}" in text
    assert "- #batch-digest digest: not sent yet, in thread `1733412345.123456`\n" in text


def test_the_summary_table_artifact_is_worst_first_as_the_report_is(monkeypatch) -> None:
    from nightshift.orchestration import report as published

    tables: list[list[dict[str, object]]] = []
    monkeypatch.setattr(published, "create_table_artifact", lambda rows, **_: tables.append(rows))
    published.publish_summary(NIGHT)
    assert [r["job"] for r in tables[0]] == ["broken", "stuck", "fast", "kept", "slow"]
    assert tail_end("a\nb\nc", lines=2) == ["b", "c"]  # the report's excerpt: a tail's end


def test_the_page_says_what_tonight_spent_against_its_cap() -> None:
    from nightshift.engine.spend import SpendTotals

    assert build_report(NIGHT, night="2026-11-29", catalogue="n")["spend"] is None
    spent = SpendTotals(50, 41.2, 0, refused=("report_c",))
    page = build_report(replace(NIGHT, spend=spent), night="2026-11-29", catalogue="n")
    assert page["spend"] == "spend: $41.20 of a $50 cap; not submitted by the cap: report_c"
    assert "\n**Spend: $41.20 of a $50 cap; not submitted by the cap: report\\_c**\n" in (
        render_report(page)
    )


def test_a_report_without_its_picture_keeps_the_rest(tmp_path) -> None:
    import json

    from nightshift.orchestration.report import PLOT_FILE, SUMMARY_FILE, report

    page = build_report(NIGHT, night="2026-11-29", catalogue="n")
    report(tmp_path, NIGHT, page=page, publish=False, plot=False)  # NIGHTSHIFT_REPORT_PLOT=false
    assert not (tmp_path / PLOT_FILE).exists()
    kept = json.loads((tmp_path / SUMMARY_FILE).read_text())
    assert kept["report"]["jobs"] == page["jobs"]
    assert "Tonight against the budgets" not in render_report(page, plot=None)


def test_a_night_that_ran_late_says_so_above_its_jobs() -> None:
    late = "ran late: scheduled 2026-12-01 02:00 UTC, started 2026-12-01 09:12 UTC (7h12m late)"
    late += "; missed before it: 2026-11-29 (never run), 2026-11-30 (run since: ok)"
    fields = build_report(replace(NIGHT, late=late), night="2026-12-01", catalogue="nightly")
    assert fields["late"] == late
    page = render_report(fields)
    assert f"**{late}**" in page
    assert page.index("ran late") < page.index("## Jobs, worst first")
    assert "ran late" not in render_report(report())  # on time: nothing said


def test_a_job_under_a_second_reads_the_same_whatever_its_clocks_measured() -> None:
    """One notation in one table: a job its clocks saw end at once (0) and one they measured at
    968 ms both ran under a second (a stop's review: ``<1s`` beside ``968ms``)."""
    took = [job(x, Outcome.SUCCEEDED, s).took() for x, s in [("a", 0.0), ("b", 0.968), ("c", 1.0)]]
    assert took == ["<1s", "<1s", "1s"]
    kept = JobOutcome("d", Outcome.SUCCEEDED, 0.004, 1, external_id="d-1", kept=True)
    assert kept.took() == "<1s earlier"
    assert job("e", Outcome.FAILED, 0.0002).named() == "e (<1s, failed)"
    # the report's table says it so too (review: it said 968ms)
    night = join([job("b", Outcome.SUCCEEDED, 0.968), job("c", Outcome.SUCCEEDED, 12.0)])
    text = render_report(build_report(night, night="n", catalogue="c"))
    assert "| `b` | Completed | <1s |" in text and "| `c` | Completed | 12s |" in text
