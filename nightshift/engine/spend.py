"""What tonight's paid jobs are expected to cost, and the spend cap that holds before each submit.

Pure: no I/O, no Prefect. A job is *paid* when it has a price: a Gemini batch (tokens x the price
table), a job whose results ever said what it cost (an ``http`` job's ``cost_path``), or one with a
declared ``cost: {usd: ...}``. Its expected cost is learned from its recent runs (p50 and p95 of
one cost per night), else its declared estimate, else unknown: never guessed.

``SpendCap`` is the night's account: before a paid submit it adds the job's expected cost (p95) to
what tonight already spent (costs of ended tries, this run and earlier runs of the same night) and
committed (expected costs of tries still out there); a submit that would pass the night's cap, or
the job's own, is refused. A try's end settles its commitment at its actual cost (its expected
cost where the service did not say). The account is the night's loop's: a try's start and end
run there (``engine/runner.py``, ``engine/job_end.py``), one at a time: no lock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from nightshift.usual import percentile

if TYPE_CHECKING:
    from nightshift.config.catalogue import AnyJob, Catalogue
    from nightshift.loop import NightLoop

__all__ = [
    "SPEND_REFUSED",
    "JobCost",
    "NightCost",
    "SpendCap",
    "SpendTotals",
    "expected_costs",
    "is_paid",
    "money",
    "night_cost",
]

CostBasis = Literal["learned", "declared"]
# the data of a job a spend cap kept from its submit
SPEND_REFUSED = "spend_refused"


@dataclass(frozen=True)
class JobCost:
    """A paid job's expected cost per run in USD, and where it comes from."""

    p50: float
    p95: float
    basis: CostBasis
    nights: int = 0  # the nights it was learned from (0: declared)


def is_paid(job: AnyJob, learned: bool = False) -> bool:
    """Whether a job costs money: a Gemini batch, a declared cost, a cost_path, or a learned one."""
    return (
        learned
        or job.backend == "gemini_batch"
        or job.cost is not None
        or getattr(job, "cost_path", None) is not None
    )


def expected_costs(
    catalogue: Catalogue,
    learned: Mapping[str, Sequence[float]],
    labels: Iterable[str] | None = None,
) -> dict[str, JobCost | None]:
    """Each paid job's expected cost (None: paid, but unknown); jobs that cost nothing are left
    out. ``learned``: each label's cost per night, from its results."""
    out: dict[str, JobCost | None] = {}
    for label in labels if labels is not None else [j.label for j in catalogue.jobs]:
        job = catalogue.job(label)
        costs = [max(0.0, c) for c in learned.get(label, ())]
        if not is_paid(job, bool(costs)):
            continue
        if costs:
            out[label] = JobCost(
                percentile(costs, 50), percentile(costs, 95), "learned", len(costs)
            )
        elif job.cost is not None:
            out[label] = JobCost(job.cost.usd, job.cost.usd, "declared")
        else:
            out[label] = None
    return out


def money(usd: float) -> str:
    """``$50``, ``$4.10``, ``$0.004`` -> ``<$0.01``."""
    if 0 < usd < 0.005:
        return "<$0.01"
    return f"${usd:,.0f}" if usd == round(usd) else f"${usd:,.2f}"


@dataclass(frozen=True)
class SpendTotals:
    """Tonight's account: the cap (None: none), what ended tries cost, what tries out there may."""

    cap_usd: float | None
    spent_usd: float
    committed_usd: float
    refused: tuple[str, ...] = ()  # labels not submitted because of a cap
    unknown: tuple[str, ...] = ()  # paid labels submitted whose cost nothing has said yet

    @property
    def total_usd(self) -> float:
        return self.spent_usd + self.committed_usd

    def line(self) -> str:
        """``spend: $48.20 of $50 (3 jobs refused)`` for summaries and digests."""
        text = f"spend: {money(self.total_usd)}"
        if self.committed_usd > 0:
            text += f" ({money(self.committed_usd)} of it committed by jobs still out there)"
        if self.cap_usd is not None:
            text += f" of a {money(self.cap_usd)} cap"
        if self.refused:
            text += f"; not submitted by the cap: {', '.join(self.refused)}"
        if self.unknown:
            text += f"; cost unknown: {', '.join(self.unknown)}"
        return text


class SpendCap:
    """Tonight's spend, checked before each paid submit; once bound to the night's loop
    (``on``), changed and read there only (the owner check says so in the suite)."""

    def __init__(
        self,
        cap_usd: float | None,
        expected: Mapping[str, JobCost | None],
        job_caps: Mapping[str, float] | None = None,
        *,
        spent: Mapping[str, float] | None = None,
        committed: Mapping[str, float] | None = None,
    ) -> None:
        self.cap_usd = cap_usd
        self._expected = dict(expected)
        self._job_caps = dict(job_caps or {})
        self._spent = dict(spent or {})  # label -> what its ended tries of tonight cost
        self._committed = dict(committed or {})  # label -> what its try out there may cost
        self._refused: list[str] = []
        self._unknown: list[str] = []
        self._loop: NightLoop | None = None

    def on(self, loop: NightLoop) -> None:
        """From now on the account is ``loop``'s (the night's)."""
        self._loop = loop

    def _owned(self) -> None:
        if self._loop is not None:
            self._loop.owned("the spend account")

    @property
    def priced(self) -> bool:
        """Whether tonight has any paid job."""
        return bool(self._expected)

    def paid(self, label: str) -> bool:
        """Whether the cap counts this job."""
        return label in self._expected

    def expected(self, label: str) -> float | None:
        """What the cap counts for one try of a paid job (its p95); None: unknown."""
        cost = self._expected.get(label)
        return None if cost is None else cost.p95

    def reserve(self, label: str) -> str | None:
        """Commit a try's expected cost before its submit; or why it may not be submitted."""
        if not self.paid(label):
            return None
        self._owned()
        expected = self.expected(label)
        own = self._job_caps.get(label)
        if own is not None and expected is not None and expected > own:
            why = f"spend cap of the job: {money(expected)} expected > {money(own)}"
            return self._refuse(label, why)
        if self.cap_usd is not None:
            so_far = sum(self._spent.values()) + sum(self._committed.values())
            if expected is None and so_far >= self.cap_usd:
                why = (
                    f"spend cap: {money(so_far)} spent or committed, cost unknown, "
                    f">= {money(self.cap_usd)}"
                )
                return self._refuse(label, why)
            if expected is not None and so_far + expected > self.cap_usd:
                why = (
                    f"spend cap: {money(so_far)} spent or committed + {money(expected)} "
                    f"expected > {money(self.cap_usd)}"
                )
                return self._refuse(label, why)
        if expected is None and label not in self._unknown:
            self._unknown.append(label)
        self._committed[label] = expected or 0.0
        return None

    def _refuse(self, label: str, why: str) -> str:
        if label not in self._refused:
            self._refused.append(label)
        return why

    def committed(self, label: str) -> float | None:
        """The expected cost committed for a try out there (None: nothing committed)."""
        self._owned()
        return self._committed.get(label)

    def settle(self, label: str, actual: float | None, *, submitted: bool = True) -> float | None:
        """A try ended: its commitment becomes what it cost (the commitment where the service
        did not say; nothing when it was not ``submitted``). The label's cost tonight, all
        tries; None: nothing was committed."""
        self._owned()
        if label not in self._committed:
            return None
        committed = self._committed.pop(label)
        said = actual is not None and actual >= 0
        cost = actual if said and actual is not None else committed
        cost = cost if submitted else 0.0
        if said and label in self._unknown:  # its results said: no longer unknown
            self._unknown.remove(label)
        self._spent[label] = self._spent.get(label, 0.0) + cost
        return self._spent[label]

    def totals(self) -> SpendTotals:
        """The account as it stands."""
        self._owned()
        return SpendTotals(
            self.cap_usd,
            sum(self._spent.values()),
            sum(self._committed.values()),
            tuple(self._refused),
            tuple(self._unknown),
        )


@dataclass(frozen=True)
class NightCost:
    """Tonight's expected cost: each paid job's, the total (None: some paid job's is unknown),
    and which jobs the cap would refuse in the expected night, with why."""

    jobs: dict[str, JobCost | None]
    total_p50: float | None
    total_p95: float | None
    unknown: tuple[str, ...]
    cap_usd: float | None
    refused: tuple[tuple[str, str], ...] = ()


def night_cost(
    expected: Mapping[str, JobCost | None],
    cap_usd: float | None,
    job_caps: Mapping[str, float],
    runs: Iterable[tuple[str, float, float]],
) -> NightCost:
    """The night's cost, and the cap played over ``runs`` (label, start, end: the expected
    night's seconds): each paid submit reserved at its start, settled at its p50 at its end."""
    unknown = tuple(x for x, c in expected.items() if c is None)
    known = [c for c in expected.values() if c is not None]
    total_p50 = None if unknown else sum(c.p50 for c in known)
    total_p95 = None if unknown else sum(c.p95 for c in known)
    account = SpendCap(cap_usd, expected, job_caps)
    # (time, 0: an end before 1: a start at the same instant, label)
    events = sorted(
        [(end, 0, x) for x, _, end in runs if x in expected]
        + [(start, 1, x) for x, start, _ in runs if x in expected]
    )
    refused: list[tuple[str, str]] = []
    for _, kind, label in events:
        if kind == 1:
            if (why := account.reserve(label)) is not None:
                refused.append((label, why))
        else:
            cost = expected[label]
            account.settle(label, None if cost is None else cost.p50)
    return NightCost(dict(expected), total_p50, total_p95, unknown, cap_usd, tuple(refused))
