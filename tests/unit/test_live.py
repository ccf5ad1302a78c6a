"""What the live output prints: labels and details as they are, never emoji or markup."""

from __future__ import annotations

import io

from rich.console import Console

from nightshift.cli.live import LiveTable


def test_labels_are_printed_as_they_are() -> None:
    out = io.StringIO()
    table = LiveTable(["gen:a:", "x[bold]y"], Console(file=out, width=200))
    with table.shown(enabled=False):
        table.update("gen:a:", "succeeded")
        table.update("x[bold]y", "failed")
    assert out.getvalue().splitlines() == ["[1/2] gen:a:: succeeded", "[2/2] x[bold]y: failed"]
    rendered = io.StringIO()
    Console(file=rendered, width=200).print(table.render())
    assert "gen:a:" in rendered.getvalue() and "x[bold]y" in rendered.getvalue()


def test_the_finished_count_goes_down_when_a_failed_job_is_retried() -> None:
    out = io.StringIO()
    table = LiveTable(["a", "b"], Console(file=out, width=200))
    with table.shown(enabled=False):
        table.update("a", "failed")
        table.update("a", "submitting")  # its retry: not finished any more
        table.update("b", "succeeded")
        table.update("a", "succeeded")
    assert out.getvalue().splitlines() == [
        "[1/2] a: failed",
        "[1/2] b: succeeded",
        "[2/2] a: succeeded",
    ]


def test_the_table_is_a_sink_of_the_nights_events() -> None:
    from datetime import UTC, datetime

    from nightshift.engine.events import JobChanged, JobFinished
    from nightshift.engine.outcomes import JobOutcome, Outcome

    out = io.StringIO()
    table = LiveTable(["a", "b"], Console(file=out, width=200))
    at = datetime(2030, 1, 1, tzinfo=UTC)
    with table.shown(enabled=False):
        table.on_event(JobChanged("n", "c", "a", "command", 1, "a", "running", at, None))
        table.on_event(JobChanged("n", "c", "a", "command", 1, "a", "failed", at, 1.0))
        table.on_event(JobFinished("n", "c", JobOutcome("a", Outcome.FAILED), at))  # said once
        table.on_event(JobFinished("n", "c", JobOutcome("b", Outcome.SUCCEEDED), at))  # kept
    assert out.getvalue().splitlines() == ["[1/2] a: failed", "[2/2] b: succeeded"]


def _expected_night() -> list:
    """Three jobs with learned p50s: one started, one re-attached, one waiting on the first."""
    from datetime import UTC, datetime, timedelta

    from nightshift.engine.events import ExpectedDurations, JobChanged
    from nightshift.engine.expected import Typical

    t = datetime(2030, 1, 1, 22, 0, tzinfo=UTC)
    typical = {
        "a": Typical(job_p50=600.0, states={"queued": 30.0}),
        "b": Typical(states={"queued": 60.0, "running": 300.0}),
        "c": Typical(job_p50=100.0, after=("a",)),
    }
    return [
        ExpectedDurations("n", "c", typical, t),
        JobChanged("n", "c", "a", "cli", 1, None, "submitting", t, None),
        JobChanged("n", "c", "a", "cli", 1, "a", "queued", t + timedelta(seconds=5), 5.0),
        # b was re-attached: first seen queued, its start unknown
        JobChanged("n", "c", "b", "cli", 1, "b", "queued", t + timedelta(seconds=10), None),
    ]


def test_expected_ends_of_started_re_attached_and_waiting_jobs() -> None:
    from datetime import timedelta

    from nightshift.engine.night_progress import NightProgress

    events = _expected_night()
    t = events[0].at
    progress = NightProgress(["a", "b", "c"])
    for event in events:
        progress.on_event(event)
    now = t + timedelta(seconds=20)
    ends = {view.label: view.expected_end for view in progress.jobs(now)}
    assert ends == {
        "a": t + timedelta(seconds=600),  # its start + the whole job's p50
        "b": t + timedelta(seconds=10 + 60 + 300),  # queued since, then its running p50
        "c": t + timedelta(seconds=700),  # after a, then its own p50
    }
    assert progress.line(now) == "0/3 finished, expected done ~22:11 UTC"
    # a overdue: c starts now at the earliest; to the second once it is close
    assert progress.line(t + timedelta(seconds=800)) == "0/3 finished, expected done ~22:15:00 UTC"
    # a job with nothing learned: no night estimate, the count alone
    unknown = NightProgress(["a", "b", "c", "d"])
    for event in events:
        unknown.on_event(event)
    assert unknown.line(now) == "0/4 finished"


def test_the_table_marks_watch_and_alert_and_shows_expected_ends() -> None:
    from datetime import timedelta

    from nightshift.engine.alerts import Alert
    from nightshift.engine.events import JobChanged, LevelChanged

    events = _expected_night()
    t = events[0].at
    now = t + timedelta(seconds=20)
    out = io.StringIO()
    table = LiveTable(["a", "b", "c"], Console(file=out, width=200), wall=lambda: now)

    def level(label: str, lvl: str) -> LevelChanged:
        return LevelChanged(Alert("n", "c", label, "cli", "queued", lvl, 15.0, 5.0, now))  # type: ignore[arg-type]

    with table.shown(enabled=False):
        for event in [*events, level("a", "watch"), level("b", "watch"), level("b", "alert")]:
            table.on_event(event)
    # not a terminal: each level a line of its own
    assert out.getvalue().splitlines() == [
        "[watch] watch: c/a (cli) queued for 15.0s (p95 5.0s, x3.0) night n",
        "[watch] watch: c/b (cli) queued for 15.0s (p95 5.0s, x3.0) night n",
        "[alert] alert: c/b (cli) queued for 15.0s (p95 5.0s, x3.0) night n",
    ]
    rendered = io.StringIO()
    Console(file=rendered, width=200).print(table.render())
    text = rendered.getvalue()
    assert "0/3 finished, expected done ~22:11 UTC" in text
    row = {
        line.split()[1]: line
        for line in text.splitlines()
        if line.split()[1:2] in (["a"], ["b"], ["c"])
    }
    assert "queued watch" in row["a"] and "~22:10:00 UTC" in row["a"]
    assert "queued ALERT" in row["b"] and "~22:06:10 UTC" in row["b"]
    assert "waiting" in row["c"] and "~22:11 UTC" in row["c"]
    # a new state clears the marker: its level is of the state left
    table.on_event(JobChanged("n", "c", "b", "cli", 1, "b", "running", now, 10.0))
    rendered = io.StringIO()
    Console(file=rendered, width=200).print(table.render())
    assert "ALERT" not in rendered.getvalue()


def test_without_budgets_the_table_is_as_before() -> None:
    from datetime import UTC, datetime

    from nightshift.engine.events import JobChanged

    out = io.StringIO()
    table = LiveTable(["a", "b"], Console(file=out, width=200))
    at = datetime(2030, 1, 1, tzinfo=UTC)
    table.on_event(JobChanged("n", "c", "a", "command", 1, "a", "running", at, None))
    rendered = io.StringIO()
    Console(file=rendered, width=200).print(table.render())
    text = rendered.getvalue()
    assert "nightshift: 0/2 jobs finished" in text
    assert "expected" not in text


def test_a_night_taller_than_the_terminal_shows_counts_and_the_jobs_not_ok() -> None:
    labels = [f"job-{i:04d}" for i in range(1000)]
    table = LiveTable(labels, Console(file=io.StringIO(), width=120, height=30))
    for label in labels[:700]:
        table.update(label, "running")
    for label in labels[700:950]:
        table.update(label, "succeeded")
    table.update("job-0003", "failed")
    table.update("job-0004", "timeout")
    rendered = io.StringIO()
    Console(file=rendered, width=120, height=30).print(table.render())
    text = rendered.getvalue()
    assert "running 698" in text and "succeeded 250" in text and "waiting 50" in text
    assert "failed 1" in text and "timeout 1" in text
    shown = {x for x in labels if x in text}
    assert shown == {"job-0003", "job-0004"}  # only the jobs that need a look
    assert len(text.splitlines()) <= 30


def test_more_jobs_not_ok_than_fit_are_cut_with_a_count() -> None:
    labels = [f"job-{i:04d}" for i in range(200)]
    table = LiveTable(labels, Console(file=io.StringIO(), width=120, height=20))
    for label in labels:
        table.update(label, "failed")
    rendered = io.StringIO()
    Console(file=rendered, width=120, height=20).print(table.render())
    text = rendered.getvalue()
    assert "failed 200" in text and "188 more not shown" in text
    assert len(text.splitlines()) <= 20


def test_the_finished_count_follows_ends_retries_and_repeats() -> None:
    """Kept as events come (one step per event, not a pass over thousands of jobs)."""
    from datetime import UTC, datetime

    from nightshift.engine.events import JobChanged, JobFinished
    from nightshift.engine.night_progress import NightProgress
    from nightshift.engine.outcomes import JobOutcome, Outcome

    t = datetime(2030, 1, 1, tzinfo=UTC)
    progress = NightProgress(["a", "b", "c"])

    def changed(label: str, state: str) -> JobChanged:
        return JobChanged("n", "c", label, "cli", 1, label, state, t, None)

    for event in (changed("a", "running"), changed("a", "failed"), changed("a", "failed")):
        progress.on_event(event)
    assert progress.finished() == (1, 3)  # a repeat of a final state counts once
    progress.on_event(JobFinished("n", "c", JobOutcome("a", Outcome.FAILED), t))
    assert progress.finished() == (1, 3)  # its outcome after its final state: still one
    progress.on_event(changed("a", "submitting"))  # a retry: in flight again
    assert progress.finished() == (0, 3)
    progress.on_event(JobFinished("n", "c", JobOutcome("b", Outcome.SUCCEEDED), t))
    progress.on_event(changed("a", "succeeded"))
    assert progress.finished() == (2, 3)
    assert progress.expected_done(t) is None  # nothing learned: no estimate
