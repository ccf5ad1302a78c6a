"""One label-to-filename rule: readable, and no two labels share a file."""

from __future__ import annotations

from pathlib import Path

import pytest

from nightshift.backends.base import ExternalState
from nightshift.engine.outcomes import Outcome
from nightshift.files import label_filename
from tests.night_kit import run_job
from tests.support import ScriptedBackend, night_context


@pytest.mark.parametrize(
    ("label", "name"),
    [
        ("gen:a", "gen+a"),
        ("gen_a", "gen_a"),
        ("gen-a", "gen-a"),
        ("generate:article-a", "generate+article-a"),
        ("a::b", "a++b"),
        ("v1.2:x_y-z", "v1.2+x_y-z"),
        ("bad job/with spaces", "bad-job-with-spaces"),  # not a label: a backend driven directly
    ],
)
def test_a_label_keeps_its_readable_name(label: str, name: str) -> None:
    assert label_filename(label) == name


def test_no_two_labels_share_a_name() -> None:
    labels = ["gen:a", "gen_a", "gen-a", "gen.a", "gen:a:", "gen::a", "gen:_a", "gen_:a", "gen"]
    names = [label_filename(label) for label in labels]
    assert len(set(names)) == len(labels)
    assert all("/" not in name and ":" not in name for name in names)


CATALOGUE = """\
defaults: {poll: {initial: 0.01s, max: 0.02s}, stagger: 0s}
jobs:
  - {label: "gen:a", backend: command, argv: [x]}
  - {label: "gen_a", backend: command, argv: [x]}
"""


def test_gen_colon_a_and_gen_underscore_a_keep_their_own_log_tails(tmp_path: Path) -> None:
    failed = [ExternalState.FAILED]
    backend = ScriptedBackend(name="command", scripts={"gen:a": failed, "gen_a": failed})
    with night_context(tmp_path, CATALOGUE, {"command": backend}) as ctx:
        colon, underscore = run_job(ctx, "gen:a"), run_job(ctx, "gen_a")
    assert colon.state is underscore.state is Outcome.FAILED
    assert colon.log_tail_path != underscore.log_tail_path
    assert Path(colon.log_tail_path).read_text() == "log of gen:a\n"
    assert Path(underscore.log_tail_path).read_text() == "log of gen_a\n"
    assert Path(colon.log_tail_path).name == "gen+a.tail.log"
