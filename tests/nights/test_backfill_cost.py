"""``plan --nights`` against what the nights then spend: two Gemini batches on the emulator,
one night run to learn their cost, three past nights planned, then backfilled; each night's
spend lies within its forecast's own p50/p95 band, and the total with them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nightshift.cli.main import main
from nightshift.flows.nightly import nightly
from nightshift.sandbox.gemini_emulator import BatchScript, GeminiEmulator
from tests.support import write_rows

pytestmark = pytest.mark.usefixtures("prefect_server")

LABELS = ("report:a", "report:b")
NIGHTS = ["2026-11-20", "2026-11-21", "2026-11-22"]
CATALOGUE = """\
name: paid-backfill
defaults: {poll: {initial: 0.2s, max: 0.5s}, stagger: 0s, deadline: 60s, retries: 0}
jobs:
""" + "".join(
    f"  - {{label: '{x}', backend: gemini_batch, model: gemini-2.5-flash, input: rows.jsonl,"
    f" output: out/{x[-1]}.jsonl}}\n"
    for x in LABELS
)


def test_the_nights_spend_what_plan_nights_said(
    sandbox: Path, emulator: GeminiEmulator, capsys
) -> None:
    write_rows(sandbox / "rows.jsonl", 200, "row {i} " + "lorem ipsum " * 400)
    for label in LABELS:
        emulator.script_batch(label, BatchScript(running_s=0.2))
    path = sandbox / "nightshift.yaml"
    path.write_text(CATALOGUE)
    # one night teaches each batch's cost (its results' tokens)
    nightly(catalog=str(path), night="2026-11-19", run_dir=str(sandbox / "learn"))

    code = main(["plan", "--catalogue", str(path), "--nights", "2026-11-20..2026-11-22", "--json"])
    assert code == 0
    planned = json.loads(capsys.readouterr().out)
    assert [n["night"] for n in planned["nights"]] == NIGHTS
    assert all(n["usd"] > 0 for n in planned["nights"]), planned

    assert (
        main(["backfill", "--catalogue", str(path), "--from", NIGHTS[0], "--to", NIGHTS[-1]]) == 0
    )
    said = capsys.readouterr().out
    assert f"total: ${planned['total_usd']:,.2f}" in said  # the same total, before it ran
    assert emulator.count("batches.create") == 2 + 2 * len(NIGHTS)

    spent = 0.0
    for night, plan in zip(NIGHTS, planned["nights"], strict=True):
        (folder,) = (sandbox / "state" / "runs" / night).iterdir()
        spend = json.loads((folder / "summary.json").read_text())["spend"]
        assert plan["usd"] * 0.999 <= spend["spent_usd"] <= plan["p95_usd"] * 1.001, (night, spend)
        spent += spend["spent_usd"]
    assert planned["total_usd"] * 0.999 <= spent <= planned["total_p95_usd"] * 1.001
