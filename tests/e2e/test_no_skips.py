"""CI's one switch: under ``NIGHTSHIFT_TEST_NO_SKIPS=1`` a test that skips (a service it needs is
missing) fails, naming what it needed; without it the skip stays a skip (a developer's laptop)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROBE = REPO / "tests" / "e2e" / "skip_probe.py"  # not collected on its own


def _pytest(probe: Path, switch: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "NIGHTSHIFT_TEST_NO_SKIPS"}
    if switch is not None:
        env["NIGHTSHIFT_TEST_NO_SKIPS"] = switch
    argv = [sys.executable, "-m", "pytest", "-n", "0", "-q", "-p", "no:cacheprovider"]
    return subprocess.run(
        [*argv, str(probe)], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )


def test_a_skip_is_a_failure_under_ci_and_a_skip_elsewhere() -> None:
    under_ci = _pytest(PROBE, "1")
    assert under_ci.returncode == 1, under_ci.stdout
    assert "1 failed" in under_ci.stdout and "needs Redis at redis://127.0.0.1:6379" in (
        under_ci.stdout
    )
    laptop = _pytest(PROBE, None)
    assert laptop.returncode == 0 and "1 skipped" in laptop.stdout, laptop.stdout
