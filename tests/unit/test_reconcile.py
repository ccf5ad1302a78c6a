"""Reconciliation of batch results against submitted keys (pure)."""

from __future__ import annotations

import json

import pytest

from nightshift.backends.gemini.reconcile import (
    Reconciliation,
    parse_results_jsonl,
    reconcile,
    render_results,
    summary_line,
)

OK = {"response": {"candidates": []}}
ERR = {"error": {"code": 500, "message": "boom"}}


def test_counts_and_retry_keys_in_input_order() -> None:
    keys = ["a", "b", "c", "d", "e"]
    rec = reconcile(keys, {"a": OK, "b": ERR, "d": OK, "zz": OK})
    assert rec == Reconciliation(
        submitted=5, succeeded=2, failed=1, missing=2, fallback=0,
        retry_keys=("b", "c", "e"), unexpected=1,
    )  # fmt: skip
    assert rec.coverage == pytest.approx(3 / 5)
    assert rec.as_dict() == {
        "submitted": 5, "succeeded": 2, "failed": 1, "missing": 2, "coverage": 0.6, "fallback": 0
    }  # fmt: skip


def test_zero_submitted_has_full_coverage() -> None:
    rec = reconcile([], {})
    assert rec.coverage == 1.0 and rec.complete and rec.retry_keys == ()


def test_fallback_counts_only_answered_submitted_keys() -> None:
    rec = reconcile(["a", "b", "c"], {"a": OK, "b": OK, "c": ERR}, fallback_keys={"b", "c", "x"})
    assert rec.fallback == 1 and rec.failed == 1


def test_summary_line() -> None:
    rec = reconcile([f"k{i}" for i in range(15)], {f"k{i}": OK for i in range(12)})
    assert summary_line(rec) == "rows 12/15 ok, 0 failed, 3 missing"
    assert summary_line(rec, 0.0123) == "rows 12/15 ok, 0 failed, 3 missing ~$0.01"
    assert summary_line(rec, 0.0001).endswith(" <$0.01")
    assert summary_line(rec, unpriced="gemini-9").endswith(
        ", cost unknown (no price for gemini-9: set gemini.prices)"
    )
    fb = reconcile(["a"], {"a": OK}, ["a"])
    assert summary_line(fb) == "rows 1/1 ok, 0 failed, 0 missing, 1 via fallback"


def test_parse_results_jsonl_skips_unusable_lines() -> None:
    text = "\n".join(
        [
            json.dumps({"key": "a", "response": {"x": 1}}),
            json.dumps({"key": "b", "error": {"code": 3}}),
            "not json",
            json.dumps({"key": "c"}),
            "",
        ]
    )
    results, bad = parse_results_jsonl(text)
    assert results == {"a": {"response": {"x": 1}}, "b": {"error": {"code": 3}}}
    assert bad == 2


def test_render_results_in_key_order_skipping_absent() -> None:
    text = render_results(["b", "a", "c"], {"a": OK, "b": ERR, "c": {}})
    assert [json.loads(x) for x in text.splitlines()] == [
        {"key": "b", "source": "batch", **ERR},
        {"key": "a", "source": "batch", **OK},
    ]


def test_render_results_marks_the_source_of_each_row() -> None:
    results = {"a": OK, "b": OK, "c": ERR}
    text = render_results(["a", "b", "c"], results, fallback_keys={"b", "c", "zz"})
    assert [json.loads(x)["source"] for x in text.splitlines()] == ["batch", "fallback", "fallback"]
