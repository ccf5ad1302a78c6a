"""How a night and its jobs end in Prefect: states named for what happened.

A state's type drives Prefect (Completed or Failed); its name is what the UI shows. A partial
batch, a stuck queue and a timeout are ``Failed`` runs named ``Partial``, ``Stuck`` and
``TimedOut``; a job kept from an earlier run of the night is ``Completed`` named ``Kept``, a
job that was not run (a chain's step that waited for one that did not succeed, a job a spend cap
or an incident held) ``Cancelled`` named ``Skipped``: grey, not green. A job's
message is why it did not succeed, in one line.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from prefect.states import Cancelled, Completed, Failed, State

from nightshift.engine.explain import failure_reason
from nightshift.engine.outcomes import JobOutcome, NightSummary, Outcome, state_name
from nightshift.engine.stopping import NightStop

__all__ = [
    "CHAIN_FLOW",
    "JOB_TASK",
    "SKIP_TASK",
    "job_state",
    "name_the_night",
    "night_result",
    "night_state",
    "quiet_job_finish",
]

JOB_TASK = "run-job"  # the job task's name: its failures are explained by the task itself
SKIP_TASK = "skip-job"  # a chain's skipped step as a task run: it says why itself too
CHAIN_FLOW = "chain"  # the chain subflow's name: its steps explained themselves


def job_state(job: JobOutcome, *, as_result: bool = False, tail: str | None = None) -> State:
    """The job's task run state: Completed (named Kept when kept), Cancelled named Skipped for a
    job not run, or Failed by its outcome. A job that did not succeed says why
    in one line, its message (``exit code 3: 2 broken links found``: its detail, then the last
    line of its log ``tail`` when that adds something); one that did, how long it took.
    ``as_result``: the outcome is the state's data (what a job task returns)."""
    data = job if as_result else None
    if job.ok:
        return Completed(name=state_name(job), message=job.line(), data=data)
    reason = failure_reason(job, tail)
    if job.state is Outcome.SKIPPED:
        # not run: neither a success (green) nor a failure of its own (its chain's is another
        # job's): Cancelled, grey on the timeline, counted apart on the Task Runs tab
        return Cancelled(name=state_name(job), message=reason, data=data)
    return Failed(name=state_name(job), message=reason, data=data)


def night_state(summary: NightSummary) -> State:
    """The night's state: named by its verdict, the headline and worst jobs its message."""
    if summary.severity.value == "ok":
        return Completed(message=summary.message())
    name = summary.severity.value.capitalize()  # Partial | Failed
    return Failed(name=name, message=summary.message())


def night_result(summary: NightSummary) -> State | list[State]:
    """What the flow returns: the night's state when all went well, else a list of states.

    A list makes the run Failed without the engine raising FailedRun (a worker would log a
    traceback for a returned Failed); its first item is the named night state that
    ``name_the_night`` puts on the run afterwards.
    """
    state = night_state(summary)
    if state.is_completed():
        return state
    # a job not run (Cancelled, grey) must not make Prefect call the whole night cancelled
    jobs = [job_state(job) for job in summary.jobs]
    return [state, *(s for s in jobs if not s.is_cancelled())]


def end_said(flow: Any, flow_run: Any, state: State) -> None:
    """On a failed night (an interrupted one is): Prefect has the run's final state, so a caller
    bounding an interrupted night's end (``nightshift run``'s Ctrl-C) waits no longer for it."""
    from prefect.context import FlowRunContext

    context = FlowRunContext.get()
    stop = None if context is None else (context.parameters or {}).get("stop")
    if isinstance(stop, NightStop):
        stop.said()


def name_the_night(flow: Any, flow_run: Any, state: State) -> None:
    """On a failed night: the run's final state takes the night's name and message.

    Prefect names a run that returned states "n/m states failed."; this hook replaces that
    with the night's own state (same type, Failed), so the UI shows ``Partial`` and the headline.
    """
    from prefect.client.orchestration import get_client

    try:
        returned = state.result(raise_on_failure=False)
    except Exception:
        return  # a night that raised has Prefect's own message: the exception
    if not isinstance(returned, list) or not returned or not isinstance(returned[0], State):
        return
    named = returned[0]
    if not named.is_failed() or named.name not in ("Partial", "Failed"):
        return
    with get_client(sync_client=True) as client:
        current = client.read_flow_run(flow_run.id).state
        if current is None or current.id != state.id:
            return  # moved on already (a retry was asked for): never undo that
        night: State = Failed(name=named.name, message=named.message)
        client.set_flow_run_state(flow_run.id, night, force=True)
    # the engine logs "Finished in state ..." after this hook, from the state it knows: the
    # night's last line would count failed states ("Failed('6/10 states failed.')") under a run
    # named Partial; it names the night's state instead
    _FinishedAs.install(str(flow_run.id), str(night))


class _FinishedAs(logging.Filter):
    """Rewrites the engine's next "Finished in state ..." line of one flow run, once.

    It stays on the logger, spent, until the next night's hook replaces it (a filter that took
    itself off while logging walked the filters would make it skip the next one); a process
    runs its nights one after another, each hook after the last night's line was logged.
    """

    def __init__(self, flow_run_id: str, shown: str) -> None:
        super().__init__()
        self.flow_run_id, self.shown, self.spent = flow_run_id, shown, False

    @classmethod
    def install(cls, flow_run_id: str, shown: str) -> None:
        logger = logging.getLogger("prefect.flow_runs")
        for earlier in [f for f in logger.filters if isinstance(f, cls)]:
            logger.removeFilter(earlier)
        logger.addFilter(cls(flow_run_id, shown))

    def filter(self, record: logging.LogRecord) -> bool:
        if (
            not self.spent
            and str(getattr(record, "flow_run_id", "")) == self.flow_run_id
            and getattr(record, "task_run_id", None) is None
            and str(record.msg).startswith("Finished in state")
        ):
            record.msg, record.args, self.spent = f"Finished in state {self.shown}", (), True
        return True


class _JobFinishFilter(logging.Filter):
    """Drops Prefect's ERROR "Finished in state ..." of job (and skipped step) task runs and
    chain subflow runs,
    and its "Task run failed with state ..." (an empty traceback) of a job task run with no
    retries: each job that did not succeed already said why, once."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = str(record.msg)
        if getattr(record, "task_name", None) == JOB_TASK and text.startswith(
            "Task run failed with state"
        ):
            return False
        if record.levelno < logging.ERROR or not text.startswith("Finished in state"):
            return True
        if getattr(record, "task_name", None) in (JOB_TASK, SKIP_TASK):
            return False
        # a subflow's records carry its flow's name; a task run's carry their flow's too
        return not (
            getattr(record, "flow_name", None) == CHAIN_FLOW
            and getattr(record, "task_name", None) is None
        )


@contextmanager
def quiet_job_finish() -> Iterator[None]:
    """While a night runs, a job that did not succeed is logged once: by its task, at ERROR."""
    loggers = [logging.getLogger("prefect.task_runs"), logging.getLogger("prefect.flow_runs")]
    quiet = _JobFinishFilter()
    for logger in loggers:
        logger.addFilter(quiet)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(quiet)
