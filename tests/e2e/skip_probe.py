"""Run only by tests/e2e/test_no_skips.py (its name is not a test file's): one test that skips
as a test does when a service it needs is missing."""

import pytest


def test_needs_redis() -> None:
    pytest.skip("needs Redis at redis://127.0.0.1:6379/0 (RQ's queue): ConnectionError: refused")
