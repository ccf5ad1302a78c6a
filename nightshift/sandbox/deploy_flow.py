"""A tiny flow to deploy on a work pool, for the ``deployment`` backend's tests and demos.

``sandbox-job(seconds, fail, lines)`` logs ``lines`` numbered lines, sleeps ``seconds`` (so a
test can cancel it mid-run), then fails with ``ValueError`` when ``fail`` is set.
``python -m nightshift.sandbox.deploy_flow POOL`` deploys it from this checkout as
``sandbox-job/ok``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger

__all__ = ["deploy", "sandbox_job"]

ROOT = Path(__file__).resolve().parents[2]


@flow(name="sandbox-job", log_prints=True)
def sandbox_job(seconds: float = 0.0, fail: bool = False, lines: int = 3) -> str:
    """Log a few lines, sleep, then succeed or fail as asked."""
    logger = get_run_logger()
    for i in range(1, lines + 1):
        logger.info("sandbox job line %d of %d", i, lines)
    time.sleep(seconds)
    if fail:
        raise ValueError("sandbox job failed as asked")
    return "done"


def deploy(pool: str, name: str = "ok", **parameters: object) -> str:
    """Register ``sandbox-job/<name>`` on ``pool``, run from this checkout; its id."""
    source: Any = sandbox_job.from_source(  # sync here: a Flow, not a coroutine
        source=str(ROOT), entrypoint="nightshift/sandbox/deploy_flow.py:sandbox_job"
    )
    deployment_id = source.deploy(
        name=name, work_pool_name=pool, parameters=parameters, build=False, push=False
    )
    return str(deployment_id)


if __name__ == "__main__":
    print(deploy(sys.argv[1] if len(sys.argv) > 1 else "nightshift"))
