"""What the flow and an AlertSink call: route, thread, keep in the outbox, send, never raise.

    notifier = Notifier(catalogue.notify, catalogue=catalogue.key, outbox=Outbox(ledger.engine))
    notifier.night_end(summary, night=night, flow_run_url=url, slow=slow)  # the flow's last task
    SlackAlertSink(notifier)                                       # in-night alerts, threaded
    notifier.notice(night, label, "timed out after 20m")           # any other in-night event
    flush_outbox(outbox)                                           # nightshift notify --flush

Each message is written to the outbox before it is sent and marked sent once Slack accepted it
(see ``nightshift.store.outbox`` for the at-most-once-more window). Alerts of one night share a
thread per channel: the first accepted one starts it, the rest (and "recovered") reply to it.
Nothing here raises for Slack or the database: a failure is one logged line, and the night's exit
code and Prefect state never depend on it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from typing import Any

from nightshift.config.names import shown_name
from nightshift.config.notify import NotifyConfig, Route, SlackSettings
from nightshift.engine.alerts import Alert
from nightshift.engine.outcomes import NightSummary
from nightshift.notify.render import (
    ALERT,
    DIGEST,
    RECOVERED,
    Message,
    flow_run_link,
    render_alert,
    render_missed,
    render_night,
    render_notice,
    render_recovered,
)
from nightshift.notify.send import Delivery, SlackSender
from nightshift.notify.slow import SlowJob
from nightshift.store.outbox import FlushReport, Outbox, OutboxItem

__all__ = ["Notifier", "SlackAlertSink", "flush_outbox"]

Logger = logging.Logger | logging.LoggerAdapter  # type: ignore[type-arg]
_log = logging.getLogger("nightshift.notify")


class Notifier:
    """Sends one catalogue's messages. While a night runs its messages are posted by one sender
    thread, in order (``sending_from``), whichever thread published them; otherwise by the one
    thread that uses it (the flow's end, ``notify --flush``, the watchdog). Its lock guards its
    memory of threads and alerts, never an HTTP post."""

    def __init__(
        self,
        config: NotifyConfig,
        *,
        catalogue: str,
        outbox: Outbox | None = None,
        sender: SlackSender | None = None,
        logger: Logger | None = None,
        claim_s: float = 300.0,
        name: str | None = None,
    ) -> None:
        self.config = config
        self.catalogue = catalogue  # the key: outbox rows and threads
        self.name = name or shown_name(catalogue)  # what messages say: never a local path
        self.outbox = outbox
        self.sender = sender or SlackSender(config.slack)
        self.log: Logger = logger or _log
        self._claim_s = claim_s
        self._threads: dict[tuple[str, str], str] = {}  # (night, channel) -> thread ts
        self._incidents: dict[tuple[str, str], str] = {}  # (night, incident) -> its opening's ts
        self._alerted: set[tuple[str, str]] = set()  # (night, label), when there is no outbox
        self._lock = threading.Lock()
        self.journal: list[str] = []  # one line per message tried: where, how, what Slack said
        # while a night runs, its messages are posted by one sender thread, in order: a status
        # or finish thread that publishes an alert only keeps it in the outbox and goes on
        self._sender: Executor | None = None

    # -- what the flow and the sinks call --------------------------------------------------
    def night_end(
        self,
        summary: NightSummary,
        *,
        night: str,
        flow_run_url: str | None = None,
        flow_run_id: str | None = None,
        slow: Sequence[SlowJob] = (),
    ) -> list[Delivery]:
        """The night's digest (by severity) and "recovered" for each alerted job that succeeded.

        The digest links the flow run: ``flow_run_url``, else ``notify.ui_url`` + ``flow_run_id``;
        it names ``slow`` (tonight's slow jobs, ``notify.slow.slow_jobs``) when it is sent.
        """
        try:
            url = flow_run_url or flow_run_link(self.config.ui_url, flow_run_id)
            first = None
            if summary.rerun and self.outbox is not None:
                first = self.outbox.first_digest(self.catalogue, night)
            messages = render_night(
                summary, self.config, night=night, catalogue=self.name, flow_run_url=url,
                reply_in=None if first is None or not first.ts else (
                    Route(**first.destination), first.ts), slow=slow,
            )  # fmt: skip
            alerted = self._alerted_labels(night)
            for job in summary.jobs:
                if job.ok and job.label in alerted:
                    reply = render_recovered(self.config, night=night, catalogue=self.name, job=job)
                    messages += [reply] if reply else []
        except Exception as exc:  # the night's verdict never depends on its notification
            self.log.error("notify: could not draw the night's messages: %s", _one_line(exc))
            return []
        sent = [self._safe_send(message, night) for message in messages]
        return [result for result in sent if result is not None]

    def sending_from(self, sender: Executor | None, drain_s: float = 30.0) -> None:
        """Post in-night messages from ``sender`` (one thread: in order), None: from the
        caller again, once what was handed to the sender is posted (``drain_s`` at most: what
        is left waits in the outbox for the next flush)."""
        before, self._sender = self._sender, sender
        if before is not None and sender is None:
            with contextlib.suppress(Exception):
                before.submit(lambda: None).result(timeout=drain_s)

    def alert(self, alert: Alert) -> Delivery | None:
        """An in-night dwell alert into the night's thread (None: not routed, or a watch, or
        handed to the night's sender)."""
        message = render_alert(alert, self.config)
        return self._safe_send(message, alert.night, later=True)

    def notice(
        self, night: str, label: str, line: str, *, backend: str | None = None, kind: str = "alert"
    ) -> Delivery | None:
        """Any other in-night event (SLA fallback, stuck queue, timeout) into the night's thread."""
        message = render_notice(
            self.config, night=night, catalogue=self.name, label=label, line=line,
            backend=backend, kind=kind,
        )  # fmt: skip
        return self._safe_send(message, night, later=True)

    def post(self, message: Message | None, night: str) -> Delivery | None:
        """Send a message drawn elsewhere (an incident's); never raises."""
        return self._safe_send(message, night, later=True)

    def missed(self, night: str, headline: str, lines: list[str]) -> Delivery | None:
        """The one alert naming missed nights (``night``: the run's own, for the outbox)."""
        message = render_missed(
            self.config, night=night, catalogue=self.name, headline=headline, lines=lines
        )
        return self._safe_send(message, night)

    def flush(self) -> FlushReport:
        """Deliver this catalogue's waiting messages with today's ``notify.slack`` setting."""
        if self.outbox is None:
            return FlushReport()
        return flush_outbox(self.outbox, catalogue=self.catalogue, slack=self.config.slack,
                            sender=self.sender)  # fmt: skip

    # -- sending -------------------------------------------------------------------------
    def send(self, message: Message, night: str) -> Delivery:
        """Keep ``message`` in the outbox, post it (a reply: in the night's thread), mark it."""
        return self._post(self._keep(message, night), message, night)

    def _post(self, item_id: int | None, message: Message, night: str) -> Delivery:
        """Post a kept message and mark it (sent, or released for the next flush)."""
        if message.incident is not None:  # an incident's opening, or a reply in its thread
            thread = self._incident_thread(night, message.incident) if message.thread else None
            result = self.sender.post(
                message.route, message.destination, message.text, message.blocks, thread
            )
            if result.ok and not message.thread and result.ts:
                with self._lock:
                    self._incidents[(night, message.incident)] = result.ts
            self._note(message, thread, result)
            self._settle(item_id, result, message)
            return result
        # posted one after another (the night's sender): the first alert starts the thread
        thread = self._thread_of(night, message.destination) if message.thread else None
        thread = message.reply_to or thread
        result = self.sender.post(
            message.route, message.destination, message.text, message.blocks, thread
        )
        if result.ok and message.thread and thread is None:
            self._start_thread(night, message.destination, result.ts)
        self._note(message, thread, result)
        if message.kind == ALERT and message.label:
            with self._lock:
                self._alerted.add((night, message.label))
        self._settle(item_id, result, message)
        return result

    def _note(self, message: Message, thread: str | None, result: Delivery) -> None:
        where = message.destination.channel or "webhook"
        how = f"reply in {thread}" if thread else "top-level"
        said = f"accepted, ts {result.ts}" if result.ok else f"not sent: {result.error}"
        first = next((ln for ln in message.text.splitlines() if ln.strip()), "")
        with self._lock:
            self.journal.append(f"{message.kind} to {where} ({how}, {said}): {first[:200]}")

    def _safe_send(
        self, message: Message | None, night: str, *, later: bool = False
    ) -> Delivery | None:
        """``send``, never raising; ``later``: an in-night message, handed to the night's
        sender when there is one (kept in the outbox first, here)."""
        if message is None:
            return None
        try:
            sender = self._sender if later else None
            if sender is None:
                return self.send(message, night)
            item_id = self._keep(message, night)
            sender.submit(self._post_safely, item_id, message, night)
            return None
        except Exception as exc:
            self.log.error("notify: could not send a %s: %s", message.kind, _one_line(exc))
            return None

    def _post_safely(self, item_id: int | None, message: Message, night: str) -> None:
        try:
            self._post(item_id, message, night)
        except Exception as exc:  # kept in the outbox: the next flush sends it
            self.log.error("notify: could not send a %s: %s", message.kind, _one_line(exc))

    def _keep(self, message: Message, night: str) -> int | None:
        if self.outbox is None:
            return None
        try:
            return self.outbox.add(
                catalogue=self.catalogue, night=night, route=message.route,
                destination=_names(message.destination), slack=_names(self.config.slack),
                kind=message.kind, label=message.label, thread=message.thread,
                text=message.text, blocks=message.blocks, claim_s=self._claim_s,
                incident=message.incident,
            )  # fmt: skip
        except Exception as exc:  # no ledger: still try Slack
            self.log.warning("notify: outbox unavailable, sending anyway: %s", _one_line(exc))
            return None

    def _settle(self, item_id: int | None, result: Delivery, message: Message) -> None:
        where = f"{message.kind} to {message.destination.target}"
        try:
            if item_id is not None and result.ok:
                self.outbox.mark_sent(item_id, result.ts)  # type: ignore[union-attr]
            elif item_id is not None:
                self.outbox.release(item_id, result.error or "not accepted")  # type: ignore[union-attr]
        except Exception as exc:
            self.log.warning("notify: could not update the outbox: %s", _one_line(exc))
        if not result.ok:
            kept = "kept in the outbox for `nightshift notify --flush`" if item_id else "lost"
            self.log.error("notify: %s not sent (%s): %s", where, kept, result.error)

    def _thread_of(self, night: str, route: Route) -> str | None:
        if not route.channel:
            return None  # webhooks give no ts: no threads
        with self._lock:
            known = self._threads.get((night, route.channel))
        if known is None and self.outbox is not None:
            known = self.outbox.thread_ts(self.catalogue, night, route.channel)
        return known

    def _incident_thread(self, night: str, incident: str) -> str | None:
        with self._lock:
            known = self._incidents.get((night, incident))
        if known is None and self.outbox is not None:
            known = self.outbox.incident_ts(self.catalogue, night, incident)
        return known

    def _start_thread(self, night: str, route: Route, ts: str | None) -> None:
        if not route.channel or not ts:
            return
        if self.outbox is not None:
            ts = self.outbox.start_thread(self.catalogue, night, route.channel, ts)
        with self._lock:
            self._threads.setdefault((night, route.channel), ts)

    def _alerted_labels(self, night: str) -> set[str]:
        with self._lock:
            labels = {label for n, label in self._alerted if n == night}
        if self.outbox is not None:
            labels |= self.outbox.labels(self.catalogue, night, ALERT)
            labels -= self.outbox.labels(self.catalogue, night, RECOVERED)
        return labels


class SlackAlertSink:
    """An ``AlertSink`` (nightshift.engine.alerts) that posts alerts into the night's thread."""

    def __init__(self, notifier: Notifier) -> None:
        self.notifier = notifier

    def send(self, alert: Alert) -> None:
        """Post the alert (a ``watch`` only if ``notify.alert_levels`` lists it); never raises."""
        self.notifier.alert(alert)


def flush_outbox(
    outbox: Outbox,
    *,
    catalogue: str | None = None,
    slack: SlackSettings | None = None,
    sender: SlackSender | None = None,
    env: Mapping[str, str] | None = None,
    on_item: Callable[[OutboxItem, Delivery], None] | None = None,
) -> FlushReport:
    """Deliver what waits, oldest first, each once; replies go into their night's thread.

    ``slack`` (with ``sender``) replaces the settings each message was kept with (its catalogue's
    current ones); else each is sent with its own. ``on_item`` sees every attempt.
    """
    senders: dict[str, SlackSender] = {}

    def deliver(item: OutboxItem) -> Delivery:
        settings = slack or SlackSettings(**item.slack)
        key = settings.model_dump_json()
        if key not in senders:
            senders[key] = sender if sender and slack else SlackSender(settings, env=env)
        route = Route(**item.destination)
        thread = None
        if item.incident is not None and item.thread:  # a reply in its incident's thread
            thread = outbox.incident_ts(item.catalogue, item.night, item.incident)
        elif item.incident is not None:
            thread = None  # an incident's opening message: top-level
        elif item.thread and route.channel:
            thread = outbox.thread_ts(item.catalogue, item.night, route.channel)
        elif item.kind == DIGEST and route.channel:
            # a later digest of the night (a retry's) replies in the first one's thread
            first = outbox.first_digest(item.catalogue, item.night, before=item.id)
            if first is not None and first.destination.get("channel") == route.channel:
                thread = first.ts
        result = senders[key].post(item.route, route, item.text, item.blocks, thread)
        if (
            result.ok
            and item.thread
            and route.channel
            and thread is None
            and result.ts
            and (item.incident is None)
        ):
            outbox.start_thread(item.catalogue, item.night, route.channel, result.ts)
        if on_item is not None:
            on_item(item, result)
        return result

    return outbox.flush(deliver, catalogue)


def _names(model: Any) -> dict[str, Any]:
    """A setting as the outbox keeps it: the names it gives (never a token: it holds none)."""
    return dict(model.model_dump(exclude_unset=True, exclude_none=True))


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"
