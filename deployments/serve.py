"""Serve every deployment of ``prefect.yaml`` from this process: ``python -m deployments.serve``.

The no-worker alternative to ``prefect deploy``: one long-running process that both schedules
and runs the nightly batch, the budgets rebuild, the watchdog and retention. Their schedules,
parameters and one-at-a-time limits are read from ``prefect.yaml``, so the time zone and hours
are changed in one place for both paths. Needs ``PREFECT_API_URL`` pointing at a real server
for schedules to fire.

Each served deployment is registered under its own name plus ``-served``: serving under the
worker deployment's name would take that one over (dropping its pool, pull steps and collision
strategy) and pause it when the process stops. Run one path or the other for a catalogue, not
both: the night's lease keeps two nights of one catalogue apart, the loser exits refused.
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path
from typing import Any

import yaml

__all__ = ["PREFECT_YAML", "SUFFIX", "main", "served_deployments"]

PREFECT_YAML = Path(__file__).resolve().parents[1] / "prefect.yaml"
SUFFIX = "-served"


def _flow(entrypoint: str) -> Any:
    """``flows/nightly.py:nightly`` -> the flow object (imported as ``flows.nightly``)."""
    path, _, name = entrypoint.partition(":")
    module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
    return getattr(module, name)


def _schedule(spec: dict[str, Any]) -> Any:
    from prefect.schedules import Cron, Interval

    active = bool(spec.get("active", True))
    if "cron" in spec:
        return Cron(spec["cron"], timezone=spec.get("timezone"), active=active)
    return Interval(float(spec["interval"]), timezone=spec.get("timezone"), active=active)


def _concurrency(spec: dict[str, Any] | int | None) -> Any:
    if not isinstance(spec, dict):
        return spec
    from prefect.client.schemas.objects import ConcurrencyLimitConfig

    return ConcurrencyLimitConfig(**spec)


def served_deployments(
    path: Path = PREFECT_YAML, catalog: str | None = None, cron: str | None = None
) -> list[Any]:
    """Every deployment of ``path`` as a served one (not yet registered).

    ``catalog`` replaces the catalogue parameter of the flows that take one; ``cron`` the
    nightly's schedule (its time zone stays the file's).
    """
    config = yaml.safe_load(path.read_text())
    out = []
    for spec in config["deployments"]:
        flow = _flow(spec["entrypoint"])
        parameters = dict(spec.get("parameters") or {})
        for name in ("catalogue", "catalog"):  # as prefect.yaml spells it
            if catalog is not None and name in parameters:
                parameters[name] = catalog
        schedules = [dict(s) for s in spec.get("schedules") or []]
        if cron is not None and spec["entrypoint"].endswith(":nightly"):
            schedules = [{**s, "cron": cron} for s in schedules]
        out.append(
            flow.to_deployment(
                name=spec["name"] + SUFFIX,
                description=spec.get("description"),
                parameters=parameters,
                schedules=[_schedule(s) for s in schedules],
                concurrency_limit=_concurrency(spec.get("concurrency_limit")),
                tags=spec.get("tags"),
            )
        )
    return out


def main(argv: list[str] | None = None) -> None:
    """Parse flags and serve until interrupted."""
    from prefect import serve

    parser = argparse.ArgumentParser(prog="python -m deployments.serve", description=__doc__)
    parser.add_argument("--catalogue", default=None, metavar="FILE", help="default: prefect.yaml's")
    # the old spelling still works; --help shows only one
    parser.add_argument(
        "--catalog", dest="catalogue", default=argparse.SUPPRESS, help=argparse.SUPPRESS
    )
    parser.add_argument("--cron", default=None, help="when nights start (prefect.yaml's time zone)")
    args = parser.parse_args(argv)
    serve(*served_deployments(catalog=args.catalogue, cron=args.cron))


if __name__ == "__main__":
    main()
