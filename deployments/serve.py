"""Serve the nightly flow from this process on its schedule: ``python -m deployments.serve``.

The no-worker alternative to ``prefect deploy``: one long-running process that both schedules
and runs nights. Needs ``PREFECT_API_URL`` pointing at a real server for the schedule to fire.
"""

from __future__ import annotations

import argparse

from flows.nightly import nightly

__all__ = ["DEPLOYMENT", "main"]

DEPLOYMENT = "nightly-batch-daily"


def main(argv: list[str] | None = None) -> None:
    """Parse flags and serve until interrupted."""
    parser = argparse.ArgumentParser(prog="python -m deployments.serve", description=__doc__)
    parser.add_argument("--catalog", default="nightshift.yaml")
    parser.add_argument("--cron", default="0 2 * * *", help="when nights start (UTC)")
    args = parser.parse_args(argv)
    nightly.serve(
        name=DEPLOYMENT,
        cron=args.cron,
        parameters={"catalog": args.catalog},
        global_limit=1,  # serve() takes global_limit, not concurrency_limit
        tags=["nightshift"],
    )


if __name__ == "__main__":
    main()
