"""A job that did not succeed, explained: its ERROR record and its one-line reason (pure)."""

from __future__ import annotations

from nightshift.engine.explain import failure_note, failure_reason, tail_end
from nightshift.engine.outcomes import JobOutcome, Outcome

TAIL = "/runs/x/logs/audit+links.tail.log"
# an audit's tail as a job leaves it: its pages first, blank lines, the reason last
AUDIT_TAIL = "\n".join(
    [f"checked page {i:02d}" for i in range(30)]
    + ["", "2 broken links found, failing the audit", "", ""]
)


def audit(detail: str | None = "exit code 3", **kw: object) -> JobOutcome:
    return JobOutcome(
        "audit:links",
        Outcome.FAILED,
        8.0,
        1,
        external_id="c-7",
        log_tail_path=TAIL,
        detail=detail,
        **kw,  # type: ignore[arg-type]
    )


def test_the_record_shows_the_tails_last_ten_lines_then_where_the_whole_tail_is() -> None:
    first, *quoted, last = failure_note(audit(), AUDIT_TAIL).splitlines()
    assert first == "audit:links Failed after 8s: exit code 3 · external id c-7"
    # the reason is at the end of a log: the last non-empty lines, not the first
    assert quoted == [f"    | checked page {i:02d}" for i in range(21, 30)] + [
        "    | 2 broken links found, failing the audit"
    ]
    assert last == f"    whole tail: {TAIL}"


def test_each_line_of_the_tail_is_cut_to_200_characters() -> None:
    assert tail_end("x" * 500 + "\n\n  ok  \n") == ["x" * 200, "  ok"]
    assert tail_end("a\nb\nc", lines=2) == ["b", "c"]
    assert tail_end(None) == tail_end("") == tail_end("\n \n") == []


def test_a_record_without_a_tail_still_says_where_it_would_be_and_a_chain_step_its_chain() -> None:
    assert failure_note(audit()).splitlines() == [
        "audit:links Failed after 8s: exit code 3 · external id c-7",
        f"    whole tail: {TAIL}",
    ]
    no_tail = JobOutcome("fetch", Outcome.FAILED, 2.0, 1, detail="exit code 1")
    note = failure_note(no_tail, "feed down\n", chain="fetch → publish")
    assert note.splitlines() == [
        "fetch Failed after 2s: exit code 1 · no external id · step of chain fetch → publish",
        "    | feed down",
    ]


def test_the_reason_is_one_line_the_detail_then_the_tails_last_line_when_it_adds() -> None:
    assert failure_reason(audit(), AUDIT_TAIL) == (
        "exit code 3: 2 broken links found, failing the audit"
    )
    # a last line the detail already says (the command backend puts stderr's first line there)
    said = audit("exit code 3: disk full on /data")
    assert failure_reason(said, "writing\ndisk full on /data\n") == said.detail
    assert failure_reason(said, "Disk full on /data  ") == said.detail
    assert failure_reason(audit()) == "exit code 3"
    assert failure_reason(audit(None), "boom\n") == "boom"
    assert failure_reason(audit(None)) == "no reason recorded"
    # one line whatever the detail and the tail hold, the tail's line cut to 200 characters
    assert failure_reason(audit("exit code 3:\n  twice"), "y" * 300) == (
        "exit code 3: twice: " + "y" * 200
    )


def test_a_skipped_steps_reason_names_the_step_it_waited_for() -> None:
    skipped = JobOutcome("push", Outcome.SKIPPED, detail="pull failed")
    assert failure_reason(skipped) == "not run: pull failed"
    assert failure_note(skipped) == "push Skipped: pull failed · no external id"
