"""Night summaries and in-night alerts as Slack messages (pure: no I/O, no clock).

``render_night`` routes by severity (``failed``, ``partial``, ``ok``: ok is silent unless an ok
route is set) and draws one digest: a header with severity, environment and night; start,
duration and counts; one line per job that was not ok (``audit:internal-links (12m, failed)``,
its row reconciliation, its first error line); tonight's slow jobs in one line, when it is sent
anyway (``slow: extract:orders 14s, usual 3s (4.4× p95)``, handed in: ``notify/slow.py``); a link
to the flow run when the UI is known.
``render_alert`` and ``render_recovered`` draw the messages of the night's alert thread.
Every text a job or a backend wrote is escaped; every message has a plain ``text`` fallback.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from nightshift.config.durations import format_duration
from nightshift.config.notify import NotifyConfig, Route
from nightshift.engine.alerts import Alert
from nightshift.engine.incidents import Incident
from nightshift.engine.outcomes import JobOutcome, NightSummary, Outcome, Severity, retry_line
from nightshift.notify.blocks import MAX_BLOCKS, Block, context, cut, escape, header, pack_lines
from nightshift.notify.blocks import section as section_block
from nightshift.notify.slow import SlowJob, slow_line

__all__ = [
    "COUNTED",
    "Message",
    "flow_run_link",
    "job_line",
    "render_alert",
    "render_incident",
    "render_incident_reply",
    "render_missed",
    "render_night",
    "render_notice",
    "render_recovered",
]

ALERT, DIGEST, RECOVERED, INCIDENT = "alert", "digest", "recovered", "incident"
# the counts every digest shows, in this order (cancelled only when there is one)
COUNTED = (Outcome.SUCCEEDED, Outcome.PARTIAL, Outcome.FAILED, Outcome.TIMEOUT,
           Outcome.STUCK_QUEUED, Outcome.SKIPPED, Outcome.CANCELLED)  # fmt: skip
_SHOWN: dict[str, str] = {Outcome.SUCCEEDED: "ok", Outcome.STUCK_QUEUED: "stuck"}
_ICON = {Severity.OK: ":large_green_circle:", Severity.PARTIAL: ":large_orange_circle:",
         Severity.FAILED: ":red_circle:"}  # fmt: skip
# the worst first: what a reader must act on leads the list
_ORDER = [Outcome.FAILED, Outcome.TIMEOUT, Outcome.STUCK_QUEUED, Outcome.CANCELLED,
          Outcome.PARTIAL, Outcome.SKIPPED]  # fmt: skip
_ERROR_CHARS = 300
_TEXT_CHARS = 3000  # the plain fallback: notifications and old clients show the start only


@dataclass(frozen=True)
class Message:
    """One Slack message and where it goes; ``thread``: a reply in the night's alert thread."""

    route: str  # "failed" | "partial" | "ok" | "alert"
    destination: Route
    text: str
    blocks: list[Block]
    kind: str = DIGEST  # DIGEST | ALERT | RECOVERED
    label: str | None = None
    thread: bool = False
    reply_to: str | None = None  # the ts of a message it replies to (a retry's digest)
    # the incident's key (``cli/queued#1``): its opening message (``thread`` False), or a reply
    # in its thread (``thread`` True)
    incident: str | None = None


def render_night(
    summary: NightSummary,
    config: NotifyConfig,
    *,
    night: str,
    catalogue: str,
    flow_run_url: str | None = None,
    reply_in: tuple[Route, str] | None = None,
    slow: Sequence[SlowJob] = (),
) -> list[Message]:
    """The night's digest for its severity's route: [] when that route is not set.

    ``reply_in`` (the night's first digest: its route and ts) makes a retry's digest a reply in
    that digest's thread, also when tonight's severity routes nowhere ("now ok"). ``slow``:
    tonight's slow jobs, worst first (``slow_jobs``), named in one line of a digest that is sent;
    they never make one be sent.
    """
    route = config.route(summary.severity.value)
    if reply_in is not None:
        mention_of = route.mention if route is not None else None
        route = reply_in[0].model_copy(update={"mention": mention_of})
    if route is None:
        return []
    head = f"{_ICON[summary.severity]} {summary.severity.value.upper()}: {catalogue}"
    head = f"{head} · {config.env} · night {night}"
    retry = retry_line(summary)
    if retry is not None:
        head = f"{head} · {retry.split(':', 1)[0]}"
    lines = [job_line(job) for job in _not_ok(summary)]
    facts = _facts(summary)
    mention = f"{route.mention} " if route.mention else ""
    url = flow_run_url
    if retry is not None:
        facts = f"*{escape(retry)}*\n{facts}"
    blocks: list[Block] = [header(head), section_block(f"{mention}{facts}")]
    slowest = [escape(said)] if (said := slow_line(slow)) else []
    # what tonight spent, where it has a cap or its paid jobs cost anything
    if (spend := summary.spend) is not None and (spend.cap_usd is not None or spend.total_usd):
        slowest.append(escape(spend.line()))
    if summary.late:  # it ran late: its slot, its start, the nights missed before it
        slowest.append(escape(summary.late))
    # one backend's jobs stalled together: each incident in one line
    slowest += [f"incident: {escape(line)}" for line in summary.incidents]
    tail = [context(f"<{escape(url)}|Flow run in the Prefect UI>")] if url else []
    if (trace := trace_line(summary)) is not None:  # the night's trace in the team's tracing
        tail.append(context(trace))
    blocks += pack_lines(lines, MAX_BLOCKS - len(blocks) - len(slowest) - len(tail))
    blocks += [section_block(line) for line in slowest] + tail
    first = f"{mention}{escape(summary.headline())} ({config.env}, night {night})"
    retried = [escape(retry)] if retry else []
    traced = [f"trace {summary.trace}"] if summary.trace else []
    text = "\n".join([first, *retried, *lines, *slowest, *([url] if url else []), *traced])
    reply_to = reply_in[1] if reply_in is not None else None
    return [
        Message(summary.severity.value, route, cut(text, _TEXT_CHARS), blocks, reply_to=reply_to)
    ]


def trace_line(summary: NightSummary) -> str | None:
    """``Trace 4bf9...`` linked to the team's tracing when the catalogue says where (mrkdwn)."""
    if summary.trace is None:
        return None
    if summary.trace_url:
        return f"<{escape(summary.trace_url)}|Trace {summary.trace}>"
    return f"Trace {summary.trace}"


def job_line(job: JobOutcome) -> str:
    """``• `audit:internal-links` (12m, failed): rows 3/5 ok, ... - first error line`` (mrkdwn)."""
    line = f"• `{escape(job.label)}` ({job.took()}, {_state(job.state)})"
    extra = [part for part in (_reconciliation(job), _first_error(job)) if part]
    return f"{line}: {' - '.join(extra)}" if extra else line


def render_alert(alert: Alert, config: NotifyConfig) -> Message | None:
    """An in-night dwell alert for the ``alert`` route (None: no route, or a level not sent)."""
    if alert.level not in config.alert_levels:
        return None
    line = f"{alert.state} for {alert.measure()}, {alert.level}"
    return render_notice(
        config, night=alert.night, catalogue=alert.shown, label=alert.label, line=line,
        backend=alert.backend, kind=f"dwell {alert.level}",
    )  # fmt: skip


def render_notice(
    config: NotifyConfig,
    *,
    night: str,
    catalogue: str,
    label: str,
    line: str,
    backend: str | None = None,
    kind: str = "alert",
) -> Message | None:
    """Any in-night event (an SLA fallback firing, a stuck queue, a timeout) for the alert thread.

    ``line`` is what happened, e.g. ``timed out after 20m``; it is escaped.
    """
    route = config.route(ALERT)
    if route is None:
        return None
    who = f"`{escape(label)}`" + (f" ({escape(backend)})" if backend else "")
    body = f":warning: {who} {escape(cut(line, _ERROR_CHARS))}"
    where = f"{escape(catalogue)} · {escape(config.env)} · night {escape(night)} · {escape(kind)}"
    mention = f"{route.mention} " if route.mention else ""
    blocks = [section_block(f"{mention}{body}"), context(where)]
    text = f"{kind}: {label} {line} ({catalogue}, {config.env}, night {night})"
    text = mention + escape(cut(text, _TEXT_CHARS))
    return Message(ALERT, route, text, blocks, ALERT, label, thread=True)


def render_incident(
    incident: Incident, alerts: Sequence[Alert], config: NotifyConfig, *, night: str,
    catalogue: str,
) -> Message | None:  # fmt: skip
    """An incident's opening message, top-level in the alert route (None: no route): its
    backend, state, jobs and since when; the levels it folds in, one line each."""
    route = config.route(ALERT)
    if route is None:
        return None
    mention = f"{route.mention} " if route.mention else ""
    head = f":rotating_light: *incident, {incident.level}:* {escape(incident.headline())}"
    lines = [
        f"• `{escape(a.label)}` {escape(a.state)} for {escape(a.measure())}, {a.level}"
        for a in alerts
    ]
    if (held := incident.hold_line()) is not None:
        lines.append(f"_{escape(held)}_")  # said where the on-call reads it first
    where = (
        f"{escape(catalogue)} · {escape(config.env)} · night {escape(night)} · "
        f"incident {escape(incident.key)}"
    )
    body = cut("\n".join([f"{mention}{head}", *lines]), _TEXT_CHARS)
    blocks = [section_block(body), context(where)]
    text = f"incident, {incident.level}: {incident.headline()} ({catalogue}, {config.env}, "
    text += f"night {night})" + (f"; {held}" if held else "")
    text = mention + escape(cut(text, _TEXT_CHARS))
    return Message(ALERT, route, text, blocks, INCIDENT, incident.key, incident=incident.key)


def render_incident_reply(
    incident: Incident, line: str, config: NotifyConfig, *, label: str | None = None
) -> Message | None:
    """A reply in the incident's thread: a later level, a job's end, the incident's end."""
    route = config.route(ALERT)
    if route is None:
        return None
    who = f"`{escape(label)}` " if label else ""
    body = f"{who}{escape(cut(line, _ERROR_CHARS))}"
    text = escape(cut(f"{incident.key}: {label + ' ' if label else ''}{line}", _TEXT_CHARS))
    return Message(
        ALERT, route, text, [section_block(body)], INCIDENT, label or incident.key,
        thread=True, incident=incident.key,
    )  # fmt: skip


def render_missed(
    config: NotifyConfig, *, night: str, catalogue: str, headline: str, lines: list[str]
) -> Message | None:
    """The one alert naming missed nights, top-level in the alert route (None: no route)."""
    route = config.route(ALERT)
    if route is None:
        return None
    mention = f"{route.mention} " if route.mention else ""
    body = "\n".join([f":calendar: *{escape(headline)}*", *(escape(ln) for ln in lines)])
    where = f"{escape(catalogue)} · {escape(config.env)} · missed nights"
    blocks = [section_block(f"{mention}{cut(body, _TEXT_CHARS)}"), context(where)]
    text = mention + escape(
        cut(f"missed nights: {headline} ({catalogue}, {config.env})", _TEXT_CHARS)
    )
    return Message(ALERT, route, text, blocks, ALERT, None)


def render_recovered(
    config: NotifyConfig, *, night: str, catalogue: str, job: JobOutcome
) -> Message | None:
    """The thread reply for a job that was alerted tonight and then succeeded."""
    route = config.route(ALERT)
    if route is None:
        return None
    body = f":white_check_mark: `{escape(job.label)}` recovered: {_state(job.state)} after "
    body += job.took()
    text = f"recovered: {job.label} {job.state.value} ({catalogue}, {config.env}, night {night})"
    return Message(
        ALERT, route, escape(text), [section_block(body)], RECOVERED, job.label, thread=True
    )


def _facts(summary: NightSummary) -> str:
    counts = summary.counts
    shown = [
        f"{counts.get(state, 0)} {_SHOWN.get(state, state)}"
        for state in COUNTED
        if state != "cancelled" or counts.get(state)
    ]
    lines = [f"*Jobs* {len(summary.jobs)}: " + ", ".join(shown)]
    start = _parse(summary.started_at)
    end = _parse(summary.finished_at)
    if start is not None:
        when = f"*Started* {start.strftime('%Y-%m-%d %H:%M %Z').strip()}"
        if end is not None:
            when += f" · *Duration* {format_duration((end - start).total_seconds())}"
        lines.insert(0, when)
    return "\n".join(lines)


def _not_ok(summary: NightSummary) -> list[JobOutcome]:
    rank = {state: i for i, state in enumerate(_ORDER)}
    return sorted(summary.not_ok, key=lambda job: rank.get(job.state, len(rank)))


def _state(state: Outcome) -> str:
    return _SHOWN.get(state.value, state.value)


def _reconciliation(job: JobOutcome) -> str | None:
    rec = job.data.get("reconciliation") if isinstance(job.data, dict) else None
    if not isinstance(rec, dict) or "submitted" not in rec:
        return None
    text = f"rows {rec.get('succeeded', 0)}/{rec['submitted']} ok, {rec.get('failed', 0)} failed"
    return f"{text}, {rec.get('missing', 0)} missing"


def _first_error(job: JobOutcome) -> str | None:
    """The detail's first non-empty line, without the parts that repeat the reconciliation."""
    first = next((ln.strip() for ln in (job.detail or "").splitlines() if ln.strip()), None)
    if first is None:
        return None
    if _reconciliation(job):  # "batch succeeded; rows 9/12 ok, ..." -> "batch succeeded"
        first = "; ".join(p for p in first.split("; ") if not p.startswith("rows "))
    return escape(cut(first, _ERROR_CHARS)) if first else None


def _parse(stamp: str | None) -> datetime | None:
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp)
    except ValueError:
        return None


def flow_run_link(ui_url: str | None, flow_run_id: str | None) -> str | None:
    """The flow run's page in the Prefect UI (``{ui}/runs/flow-run/{id}``), when both are known."""
    if not ui_url or not flow_run_id:
        return None
    return f"{ui_url.rstrip('/')}/runs/flow-run/{flow_run_id}"
