"""Split a night's jobs into independent ones (mapped) and dependent groups (one subflow each)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING

from nightshift.config.catalogue import Catalogue

if TYPE_CHECKING:
    from nightshift.store.ledger import Ledger

__all__ = [
    "HISTORY_DAYS",
    "Plan",
    "check_only",
    "expected_durations",
    "parse_night",
    "plan_night",
    "tonight",
    "which_night",
]

HISTORY_DAYS = 30  # the past nights whose durations order tonight's jobs (and cost it)


@dataclass(frozen=True)
class Plan:
    """Independent labels, longest expected first, and chains in an order that keeps deps."""

    independent: list[str]
    chains: list[list[str]]

    @property
    def labels(self) -> list[str]:
        return [*self.independent, *(label for chain in self.chains for label in chain)]

    def describe(self) -> str:
        """``4 jobs: 2 independent, 1 chain``: the night's first line."""
        jobs, chains = len(self.labels), len(self.chains)
        text = f"{jobs} job{'' if jobs == 1 else 's'}: {len(self.independent)} independent"
        return f"{text}, {chains} chain{'' if chains == 1 else 's'}"


def plan_night(
    catalogue: Catalogue,
    only: list[str] | None = None,
    expected_s: dict[str, float] | None = None,
) -> Plan:
    """Plan the night; ``only`` narrows it (dependencies outside the selection are not run)."""
    check_only(catalogue, only)
    selected = [j.label for j in catalogue.jobs if not only or j.label in set(only)]
    chosen = set(selected)
    deps = {
        label: [d for d in catalogue.job(label).depends_on if d in chosen] for label in selected
    }
    # connected components of the dependency graph (undirected), in catalogue order
    neighbours: dict[str, set[str]] = {label: set(deps[label]) for label in selected}
    for label, ds in deps.items():
        for d in ds:
            neighbours[d].add(label)
    seen: set[str] = set()
    independent: list[str] = []
    chains: list[list[str]] = []
    for label in selected:
        if label in seen:
            continue
        component, stack = set(), [label]
        while stack:
            node = stack.pop()
            if node not in component:
                component.add(node)
                stack.extend(neighbours[node] - component)
        seen |= component
        if len(component) == 1:
            independent.append(label)
        else:
            chains.append(_topological([x for x in selected if x in component], deps))
    expected = expected_s or {}
    independent.sort(key=lambda label: -expected.get(label, 0.0))
    return Plan(independent, chains)


def check_only(catalogue: Catalogue, only: list[str] | None) -> None:
    """ValueError when ``only`` names a job the catalogue does not have."""
    unknown = sorted(set(only or ()) - {j.label for j in catalogue.jobs})
    if unknown:
        raise ValueError(f"unknown job label(s): {', '.join(unknown)}")


def _topological(labels: list[str], deps: dict[str, list[str]]) -> list[str]:
    """Labels ordered so every job comes after its dependencies; ties keep catalogue order."""
    done: list[str] = []
    placed: set[str] = set()
    while len(done) < len(labels):
        for label in labels:
            if label not in placed and all(d in placed for d in deps[label]):
                done.append(label)
                placed.add(label)
                break
    return done


def tonight(scheduled: datetime | None = None) -> str:
    """The night a run belongs to: the UTC date of its scheduled start (stable across retries)."""
    moment = scheduled or datetime.now(UTC)
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.date().isoformat()


def which_night(given: str | None, scheduled: datetime | None = None) -> str:
    """The night a run is of: the one given by hand (``parse_night``: ``ValueError`` for no
    date), else the night of its scheduled start (``tonight``)."""
    return parse_night(given) if given else tonight(scheduled)


def parse_night(value: str) -> str:
    """A night given by hand: ``YYYY-MM-DD`` (it names ledger rows and a folder)."""
    try:
        return date.fromisoformat(value).isoformat()
    except ValueError:
        raise ValueError(f"--night must be a date like 2026-11-29, not {value!r}") from None


def expected_durations(
    catalogue: Catalogue, ledger: Ledger, now: datetime | None = None
) -> dict[str, float]:
    """Each job's usual duration in the ledger's recent nights: long ones start first."""
    since = (now or datetime.now(UTC)) - timedelta(days=HISTORY_DAYS)
    return ledger.expected_durations([j.label for j in catalogue.jobs], since)
