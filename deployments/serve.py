"""Serve the nightly flow from this process on its schedule: ``python -m deployments.serve``.

The no-worker alternative to ``prefect deploy``: one long-running process that both schedules
and runs nights. Needs ``PREFECT_API_URL`` pointing at a real server for the schedule to fire.
It registers its own deployment, ``nightly-batch-daily-served``: serving under the worker
deployment's name would take that one over (dropping its pool, pull steps and collision
strategy) and pause it when the process stops. Run one or the other for a catalogue, not both:
the night's lease keeps two nights of one catalogue apart, the loser exits refused.
"""

from __future__ import annotations

import argparse
from typing import Any

from flows.nightly import nightly

__all__ = ["DEPLOYMENT", "main", "served_deployment"]

DEPLOYMENT = "nightly-batch-daily-served"


def served_deployment(catalog: str = "nightshift.yaml", cron: str = "0 2 * * *") -> Any:
    """The deployment this process serves (not yet registered)."""
    return nightly.to_deployment(
        name=DEPLOYMENT,
        cron=cron,
        parameters={"catalog": catalog},
        concurrency_limit=1,  # one night at a time, as the worker deployment
        tags=["nightshift"],
    )


def main(argv: list[str] | None = None) -> None:
    """Parse flags and serve until interrupted."""
    from prefect import serve

    parser = argparse.ArgumentParser(prog="python -m deployments.serve", description=__doc__)
    parser.add_argument("--catalogue", default="nightshift.yaml", metavar="FILE")
    # the old spelling still works; --help shows only one
    parser.add_argument(
        "--catalog", dest="catalogue", default=argparse.SUPPRESS, help=argparse.SUPPRESS
    )
    parser.add_argument("--cron", default="0 2 * * *", help="when nights start (UTC)")
    args = parser.parse_args(argv)
    serve(served_deployment(args.catalogue, args.cron))


if __name__ == "__main__":
    main()
