"""The night report as a value and as markdown: pure, drawn from literal nights."""

from __future__ import annotations

from nightshift.engine.explain import failure_note, tail_head
from nightshift.engine.outcomes import JobOutcome, Outcome, join, retry_line
from nightshift.orchestration.night_report import (
    SlackLine,
    Usual,
    WatchLine,
    build_report,
    render_report,
)


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
        "retry: 4 re-ran, 2 now ok, 2 still failing (1 kept); "
        "worst: broken (3s, failed), stuck (15m, stuck_queued)"
    )
    assert page["retry"] == "retry: 4 re-ran, 2 now ok, 2 still failing (1 kept)"


def test_the_markdown_page_has_every_part() -> None:
    text = render_report(report(), plot="data:image/png;base64,AAAA")
    assert text.startswith("# Night 2026-12-01 · nightly\n")
    assert "**partial: 3/5 succeeded" in text
    assert "; retry: 4 re-ran, 2 now ok, 2 still failing (1 kept); " in text
    assert "| `slow` | Completed | 5m | 1m / 2m | x3.0 | 1 | ran | `c-2` |" in text
    assert "| `kept` | Kept | (50s earlier) | 40s / 1m | " in text
    assert "**broken** (Failed): exit code 3" in text
    assert "tail: `/runs/x/logs/broken.tail.log`" in text
    assert "```\nTraceback (most recent call last):\nOSError: disk full\n```" in text
    assert "- **alert** `slow` dwell in running for 4m (p95 2m, x2.5), by the night" in text
    assert "| #digest | digest | partial: 3/5 succeeded | top-level | yes (171.1) |" in text
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


def test_a_failure_note_says_why_where_and_how_it_ended() -> None:
    broken = NIGHT.jobs[3]
    note = failure_note(broken, "\n\nTraceback:\n  OSError: disk full\n")
    first, *rest = note.splitlines()
    assert first == (
        "broken Failed after 3s: exit code 3 · external id c-3 · tail /runs/x/logs/broken.tail.log"
    )
    assert rest == ["    | Traceback:", "    |   OSError: disk full"]
    assert tail_head("a\nb\nc", lines=2) == ["a", "b"]


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
    assert "| `summarize` | Skipped | - | 2s / 3s |  | 0 | not run |  |" in render_report(page)


def test_a_first_run_has_no_retry_line() -> None:
    first = join([job("a", Outcome.SUCCEEDED, 1)])
    assert retry_line(first) is None
