"""Several jobs of one backend stalled in the same state at once: one incident, not N alerts (pure).

The ``IncidentDesk`` is told where each job is (``entered``, ``ended``) and each level the
detector raised (``level``), and answers with what to announce:

- ``Alone``: a level as before, one job's own message (no incident in sight);
- ``Opened``: ``jobs`` jobs of one backend passed a level (watch or alert) in one state within
  ``window`` of each other, or at least two and more than half of that backend's jobs in flight
  did: one incident, naming them, with the levels it folds in;
- ``Joined``: a later level of that backend's job in that state while the incident lasts;
- ``Left``: one of its jobs left the state (moved on, or ended: ``final``);
- ``Closed``: every one of its jobs has left the state; how long it lasted, who moved on.

A level of a job whose backend has other jobs in the same state waits ``gather_s`` for them; then
(``tick``) the gathering is weighed: an incident naming every job stalled by then, or each level
alone. So an outage whose jobs pass their levels a second apart opens as one message naming them
all, not a lone alert and then the incident. A job alone in its state on its backend is
announced at once. No I/O, no clock: every moment is handed in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Literal

from nightshift.config.durations import format_duration
from nightshift.config.incident import GATHER_S
from nightshift.config.names import first_few
from nightshift.engine.alerts import Alert, Level

__all__ = [
    "Alone",
    "Closed",
    "Incident",
    "IncidentChange",
    "IncidentDesk",
    "IncidentRule",
    "Joined",
    "Left",
    "Opened",
]

NAMED = 3  # jobs a headline names before "and N more"
Holds = Literal["all", "paid", "none"]


@dataclass(frozen=True)
class IncidentRule:
    """When one backend's stalls are an incident: ``jobs`` within ``window_s`` of each other."""

    jobs: int = 3
    window_s: float = 60.0
    holds: Holds = "none"  # whose submits to its backend wait while it lasts


@dataclass(frozen=True)
class Incident:
    """One backend's jobs stalled in one state together, tonight."""

    backend: str
    state: str
    number: int  # the n-th incident of this backend and state tonight
    opened_at: datetime
    since: datetime  # when the first of its jobs entered the state
    labels: tuple[str, ...]  # its jobs, in the order they stalled
    level: Level = "watch"  # the highest level any of its jobs reached
    ended_at: datetime | None = None
    moved_on: tuple[str, ...] = ()  # its jobs that left the state for a later one
    ended: tuple[tuple[str, str], ...] = ()  # (label, outcome) of its jobs that ended in it
    holds: Holds = "none"  # whose submits to its backend wait while it lasts

    @property
    def key(self) -> str:
        """Once a night: ``cli/queued#1``."""
        return f"{self.backend}/{self.state}#{self.number}"

    @property
    def lasted_s(self) -> float | None:
        """Seconds from its opening to its end (None: it lasts)."""
        return None if self.ended_at is None else (self.ended_at - self.opened_at).total_seconds()

    def names(self, named: int = NAMED) -> str:
        """``a, b, c and 3 more``."""
        return first_few(self.labels, named)

    def headline(self) -> str:
        """``cli: 6 jobs stalled in queued since 02:10:03 UTC (a, b, c and 3 more)``."""
        return (
            f"{self.backend}: {len(self.labels)} jobs stalled in {self.state} since "
            f"{self.since:%H:%M:%S} UTC ({self.names()})"
        )

    def end_line(self) -> str:
        """``over after 4m: 4 moved on, 2 ended (stuck_queued)``."""
        parts = []
        if self.moved_on:
            parts.append(f"{len(self.moved_on)} moved on")
        if self.ended:
            outcomes = sorted({outcome for _, outcome in self.ended})
            parts.append(f"{len(self.ended)} ended ({', '.join(outcomes)})")
        lasted = format_duration(self.lasted_s or 0.0)
        return f"over after {lasted}: " + (", ".join(parts) if parts else "its jobs moved on")

    def hold_line(self) -> str | None:
        """What it holds: ``submits to cli held while it lasts``; once over, what became of
        them (None: it holds nothing)."""
        if self.holds == "none":
            return None
        whose = "submits" if self.holds == "all" else "paid submits"
        if self.ended_at is None:
            return f"{whose} to {self.backend} held while it lasts"
        if self.moved_on:
            return f"held {whose} to {self.backend} released"
        return f"no more {whose} to {self.backend} tonight: none of its jobs moved on"

    def line(self) -> str:
        """One line for a report or a summary: the headline, its end if it is over, what it
        held."""
        parts = [self.headline()]
        if self.ended_at is not None:
            parts.append(self.end_line())
        if (held := self.hold_line()) is not None:
            parts.append(held)
        return "; ".join(parts)


@dataclass(frozen=True)
class Alone:
    """A level with no incident: announced as a job's own."""

    alert: Alert


@dataclass(frozen=True)
class Opened:
    """An incident began; ``alerts``: the levels it announces in one message."""

    incident: Incident
    alerts: tuple[Alert, ...]


@dataclass(frozen=True)
class Joined:
    """A level of a job of the incident's backend in its state, while it lasts."""

    incident: Incident
    alert: Alert


@dataclass(frozen=True)
class Left:
    """One of the incident's jobs left its state: into ``state`` (``final``: its outcome)."""

    incident: Incident
    label: str
    state: str
    final: bool
    at: datetime


@dataclass(frozen=True)
class Closed:
    """Every job of the incident left its state."""

    incident: Incident


IncidentChange = Opened | Joined | Left | Closed
Action = Alone | IncidentChange


@dataclass
class _Job:
    backend: str
    state: str
    first_level_at: datetime | None = None  # its first level in this state


@dataclass
class _Held:
    alert: Alert
    until: datetime


@dataclass
class IncidentDesk:
    """Tonight's incidents, decided from job moves and levels. Not thread-safe: its owner (the
    dwell watch) tells it everything on the night's loop, in the order its deliverer takes it
    (a level once kept); ``grouped`` alone may be asked from anywhere."""

    rule: Callable[[str], IncidentRule] = lambda _backend: IncidentRule()
    gather_s: float = GATHER_S
    # (backend, state) -> incidents of it a run of the night already opened (a rerun counts on)
    numbered: dict[tuple[str, str], int] = field(default_factory=dict)
    _jobs: dict[str, _Job] = field(default_factory=dict)
    _open: dict[tuple[str, str], Incident] = field(default_factory=dict)
    _closed: list[Incident] = field(default_factory=list)
    _held: dict[tuple[str, str], list[_Held]] = field(default_factory=dict)
    _of: dict[str, str] = field(default_factory=dict)  # label -> key of its last incident

    # -- what it is told ----------------------------------------------------------------
    def entered(self, label: str, backend: str, state: str, at: datetime) -> list[Action]:
        """The job is in ``state`` since ``at`` (not final); leaving an incident's state is said."""
        job = self._jobs.get(label)
        if job is not None and job.state == state:
            return []
        self._jobs[label] = _Job(backend, state)
        if job is None:
            return []
        key = (job.backend, job.state)
        return self._no_company(key) + self._left(key, label, state, final=False, at=at)

    def ended(self, label: str, outcome: str, at: datetime) -> list[Action]:
        """The job has its outcome: it leaves its state, and the desk forgets it."""
        job = self._jobs.pop(label, None)
        if job is None:
            return []
        key = (job.backend, job.state)
        return self._no_company(key) + self._left(key, label, outcome, final=True, at=at)

    def level(self, alert: Alert, now: datetime) -> list[Action]:
        """The detector raised ``alert``: what to announce now (maybe nothing yet)."""
        key = (alert.backend, alert.state)
        job = self._jobs.get(alert.label)
        if job is None or job.state != alert.state:
            job = self._jobs[alert.label] = _Job(alert.backend, alert.state)
        if job.first_level_at is None:
            job.first_level_at = alert.at
        incident = self._open.get(key)
        if incident is not None:
            incident = self._join(incident, alert)
            return [Joined(incident, alert)]
        others = any(
            label != alert.label and (j.backend, j.state) == key for label, j in self._jobs.items()
        )
        if not others and key not in self._held:
            return [Alone(alert)]  # alone in its state on its backend: nothing to wait for
        # others may stall with it: their levels gather, and are weighed when the first's wait
        # is over (at once, with no wait)
        self._held.setdefault(key, []).append(_Held(alert, now + timedelta(seconds=self.gather_s)))
        return self.tick(now)

    def tick(self, now: datetime) -> list[Action]:
        """Weigh each gathering whose first wait is over: an incident, or each level alone."""
        out: list[Action] = []
        for key, held in list(self._held.items()):
            if min(h.until for h in held) > now:
                continue
            rule = self.rule(key[0])
            stalled = self._stalled(key, now - timedelta(seconds=rule.window_s + self.gather_s))
            in_flight = sum(j.backend == key[0] for j in self._jobs.values())
            if len(stalled) >= rule.jobs or (len(stalled) >= 2 and 2 * len(stalled) > in_flight):
                out.append(self._open_incident(key, stalled, now))
                continue
            out += [Alone(h.alert) for h in held if h.until <= now]
            keep = [h for h in held if h.until > now]
            if keep:
                self._held[key] = keep
            else:
                del self._held[key]
        return out

    def _no_company(self, key: tuple[str, str]) -> list[Action]:
        """The levels held in ``key`` once at most one job of theirs is left in that state: no
        incident can gather there (one job is none), so they go alone now, not at the end of
        their wait. A job that left the state meanwhile is announced, not lost: a night that
        ended before the wait did sent it nowhere (the rough demo on a loaded machine: its
        stuck job's alert held for the jobs queued beside it, the night over first)."""
        held = self._held.get(key)
        if held is None or sum((j.backend, j.state) == key for j in self._jobs.values()) > 1:
            return []
        del self._held[key]
        return [Alone(h.alert) for h in held]

    # -- what it answers ----------------------------------------------------------------
    def next_wake(self) -> datetime | None:
        """When a held level's wait ends (None: nothing held)."""
        return min((h.until for held in self._held.values() for h in held), default=None)

    def open_for(self, backend: str) -> Incident | None:
        """The backend's incident that lasts now, if any (the first, if several states)."""
        return next((i for (b, _), i in self._open.items() if b == backend), None)

    def grouped(self, label: str) -> bool:
        """Whether the job was part of an incident tonight (its end is the incident's news).

        Safe to ask from any thread: one look-up in a dict that only grows."""
        return label in self._of

    @property
    def incidents(self) -> list[Incident]:
        """Tonight's incidents, over ones first, in the order they opened."""
        return sorted([*self._closed, *self._open.values()], key=lambda i: i.opened_at)

    # -- inside ---------------------------------------------------------------------------
    def _stalled(self, key: tuple[str, str], since: datetime) -> list[str]:
        """The backend's jobs in the state whose first level there came at ``since`` or later."""
        found = [
            (j.first_level_at, label)
            for label, j in self._jobs.items()
            if (j.backend, j.state) == key
            and j.first_level_at is not None
            and j.first_level_at >= since
        ]
        return [label for _, label in sorted(found)]

    def _open_incident(self, key: tuple[str, str], labels: Iterable[str], now: datetime) -> Opened:
        alerts = tuple(h.alert for h in self._held.pop(key, []))
        number = self.numbered.get(key, 0) + 1
        self.numbered[key] = number
        labels = tuple(labels)
        since = min(a.at - timedelta(seconds=a.dwell_s) for a in alerts)
        level: Level = "alert" if any(a.level == "alert" for a in alerts) else "watch"
        holds = self.rule(key[0]).holds
        incident = Incident(key[0], key[1], number, now, since, labels, level, holds=holds)
        self._open[key] = incident
        for label in labels:
            self._of[label] = incident.key
        return Opened(incident, alerts)

    def _join(self, incident: Incident, alert: Alert) -> Incident:
        labels = incident.labels
        if alert.label not in labels:
            labels = (*labels, alert.label)
        level: Level = "alert" if "alert" in (incident.level, alert.level) else "watch"
        incident = replace(incident, labels=labels, level=level)
        self._open[(incident.backend, incident.state)] = incident
        self._of[alert.label] = incident.key
        return incident

    def _left(
        self,
        key: tuple[str, str],
        label: str,
        state: str,
        *,
        final: bool,
        at: datetime,
    ) -> list[Action]:
        incident = self._open.get(key)
        if incident is None or label not in incident.labels:
            return []
        if final:
            incident = replace(incident, ended=(*incident.ended, (label, state)))
        else:
            incident = replace(incident, moved_on=(*incident.moved_on, label))
        self._open[key] = incident
        out: list[Action] = [Left(incident, label, state, final, at)]
        still = [lbl for lbl in incident.labels if (j := self._jobs.get(lbl)) and j.state == key[1]]
        if not still:
            incident = replace(incident, ended_at=max(at, incident.opened_at))
            del self._open[key]
            self._closed.append(incident)
            out.append(Closed(incident))
        return out
