"""Jobs run as flow runs of existing Prefect deployments (any work pool: process, Docker, k8s).

``submit`` creates a run of ``options.deployment`` (``"flow/deployment"``) with the job's
``parameters``, optional ``work_queue`` and ``job_variables``, and the attempt's submission key
as Prefect's idempotency key: a submit retried after a lost answer, or by a night that crashed
mid-submit, gets the same flow run back, never a second one. The flow run id is the external id,
so a rerun re-attaches to it. States map as ``deployment_states`` says; ``status_many`` reads
every asked run in one filtered call; ``cancel`` moves the run to Cancelling (a run no worker
has taken yet straight to Cancelled); ``logs`` are the run's last log lines.

The API is the night's own (PREFECT_API_URL, or the temporary server), unless the catalogue's
``deployment: {api_url: ...}`` names another server (a night on the temporary server can drive a
team's real server's pools).
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections.abc import Iterable
from typing import Any

import httpx

from nightshift.backends.base import JobSpec, JobStatus
from nightshift.backends.deployment_client import open_client, translate
from nightshift.backends.deployment_states import flow_run_status
from nightshift.backends.submission import submission_key
from nightshift.config.settings import temporary_prefect_api
from nightshift.errors import (
    BackendError,
    PermanentBackendError,
    TransientBackendError,
    UnknownJobError,
)

__all__ = ["DeploymentBackend"]

_BATCH = 200  # ids per filtered read: the server's default page size
# the flow-run label Prefect keeps a run's W3C traceparent in (prefect.telemetry.run_telemetry)
TRACEPARENT_LABEL = "__OTEL_TRACEPARENT"


def _run_id(external_id: str) -> uuid.UUID:
    try:
        return uuid.UUID(external_id)
    except (TypeError, ValueError):
        raise PermanentBackendError(f"not a Prefect flow run id: {external_id!r}") from None


class DeploymentBackend:
    """Runs jobs as flow runs of Prefect deployments, over one Prefect client."""

    name = "deployment"

    def __init__(
        self, api_url: str | None = None, *, httpx_settings: dict[str, Any] | None = None
    ) -> None:
        self.api_url = api_url  # None: the night's own API
        self._httpx = dict(httpx_settings or {})
        self._client: Any = None
        self._lock = threading.Lock()
        self._closed = False
        self._deployments: dict[str, uuid.UUID] = {}  # name -> id, read once a night

    @property
    def client(self) -> Any:
        """The Prefect client, opened at first use (a night without such jobs opens none)."""
        with self._lock:
            if self._closed:
                raise PermanentBackendError("the deployment backend is closed")
            if self._client is None:
                self._client = open_client(self.api_url, self._httpx)
            return self._client

    @property
    def where(self) -> str:
        """The API spoken to, for messages."""
        if self.api_url:
            return self.api_url
        from prefect.settings import PREFECT_API_URL

        url = PREFECT_API_URL.value()
        return "Prefect's temporary server" if temporary_prefect_api(url, os.environ) else str(url)

    def _deployment_id(self, name: str) -> uuid.UUID:
        if (found := self._deployments.get(name)) is not None:
            return found
        from prefect.exceptions import ObjectNotFound

        try:
            deployment = self.client.read_deployment_by_name(name)
        except ObjectNotFound:
            raise PermanentBackendError(
                f"deployment {name!r} not found on the Prefect API at {self.where}: "
                'check `prefect deployment ls` (the name is "flow-name/deployment-name")'
            ) from None
        except Exception as exc:  # the client's HTTP and network errors
            raise translate(exc, f"reading deployment {name!r}") from exc
        self._deployments[name] = deployment.id
        return deployment.id

    def submit(self, spec: JobSpec) -> str:
        """Create the flow run, at most once per submission key (Prefect's idempotency key)."""
        name = spec.options.get("deployment")
        if not isinstance(name, str) or name.count("/") != 1:
            raise PermanentBackendError(
                f"job {spec.label!r}: deployment backend needs options.deployment "
                f'as "flow-name/deployment-name", got {name!r}'
            )
        deployment_id = self._deployment_id(name)
        key = submission_key(spec)
        try:
            run = self.client.create_flow_run_from_deployment(
                deployment_id,
                parameters=dict(spec.options.get("parameters") or {}),
                idempotency_key=key,
                work_queue_name=spec.options.get("work_queue") or None,
                job_variables=dict(spec.options.get("job_variables") or {}) or None,
                name=spec.label,  # the job's label in the UI, not a random slug
                tags=["nightshift"],
                # its flow run continues the night's trace, as Prefect carries it across runs
                labels={TRACEPARENT_LABEL: spec.trace} if spec.trace is not None else None,
            )
        except Exception as exc:  # the client's HTTP and network errors
            lost = translate(exc, f"creating a run of {name!r}")
            gone = isinstance(exc, httpx.HTTPStatusError) and exc.response.status_code == 404
            if gone:  # deleted (or redeployed) since it was looked up
                self._deployments.pop(name, None)
                lost = TransientBackendError(f"{lost}; the retry looks the deployment up again")
            if isinstance(lost, TransientBackendError) and key:
                raise TransientBackendError(
                    f"{lost}; the retry asks again with the same idempotency key, so at most "
                    "one run exists"
                ) from exc
            raise lost from exc
        return str(run.id)

    def status(self, external_id: str) -> JobStatus:
        """The flow run's state."""
        from prefect.exceptions import ObjectNotFound

        run_id = _run_id(external_id)
        try:
            run = self.client.read_flow_run(run_id)
        except ObjectNotFound:
            raise self._missing(external_id) from None
        except Exception as exc:
            raise translate(exc, f"reading flow run {external_id}") from exc
        return self._status(run)

    def status_many(self, external_ids: Iterable[str]) -> dict[str, JobStatus | BackendError]:
        """Many flow runs in one filtered read per 200 ids; raises only when a read fails."""
        from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

        out: dict[str, JobStatus | BackendError] = {}
        ids: dict[uuid.UUID, str] = {}
        for external_id in dict.fromkeys(external_ids):
            try:
                ids[_run_id(external_id)] = external_id
            except PermanentBackendError as exc:
                out[external_id] = exc
        wanted = list(ids)
        for start in range(0, len(wanted), _BATCH):
            chunk = wanted[start : start + _BATCH]
            try:
                runs = self.client.read_flow_runs(
                    flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=chunk)),
                    limit=len(chunk),
                )
            except Exception as exc:
                raise translate(exc, f"reading {len(chunk)} flow run(s)") from exc
            for run in runs:
                if run.id in ids:
                    out[ids[run.id]] = self._status_or_error(run)
        for external_id in ids.values():
            out.setdefault(external_id, self._missing(external_id))
        return out

    def _missing(self, external_id: str) -> UnknownJobError:
        return UnknownJobError(f"no flow run {external_id} on the Prefect API at {self.where}")

    def _status_or_error(self, run: Any) -> JobStatus | BackendError:
        try:
            return self._status(run)
        except PermanentBackendError as exc:
            return exc

    @staticmethod
    def _status(run: Any) -> JobStatus:
        try:
            return flow_run_status(run)
        except ValueError as exc:
            raise PermanentBackendError(f"flow run {run.id}: {exc}") from None

    def cancel(self, external_id: str) -> None:
        """Cancelling (the worker stops its process); a run no worker took yet: Cancelled."""
        from prefect.client.schemas.objects import StateType
        from prefect.states import Cancelled, Cancelling

        run_id = _run_id(external_id)
        why = "cancelled by Nightshift"
        try:
            run = self.client.read_flow_run(run_id)
            state = run.state
            if state is not None and (state.is_final() or state.type is StateType.CANCELLING):
                return
            waiting = state is None or state.type is StateType.SCHEDULED
            new: Any = Cancelled(message=why) if waiting else Cancelling(message=why)
            result = self.client.set_flow_run_state(run_id, new)
        except Exception as exc:
            raise translate(exc, f"cancelling flow run {external_id}") from exc
        if str(getattr(result.status, "value", result.status)).upper() != "ACCEPT":
            # refused: the run moved on meanwhile (it may have ended); the next read tells
            reason = getattr(result.details, "reason", None) or result.status
            now = self.status(external_id)
            if not now.state.final:
                raise TransientBackendError(f"Prefect refused to cancel {external_id}: {reason}")

    def logs(self, external_id: str, tail: int = 40) -> str:
        """The run's last ``tail`` log lines: ``HH:MM:SS LEVEL message``."""
        from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
        from prefect.client.schemas.sorting import LogSort

        run_id = _run_id(external_id)
        try:
            found = self.client.read_logs(
                LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run_id])),
                limit=max(1, int(tail)),
                sort=LogSort.TIMESTAMP_DESC,
            )
        except Exception as exc:
            raise translate(exc, f"reading the logs of flow run {external_id}") from exc
        lines: list[str] = []
        for log in reversed(found):  # a traceback's lines follow its first, unprefixed
            first, *rest = log.message.splitlines() or [""]
            lines += [f"{log.timestamp:%H:%M:%S} {logging.getLevelName(log.level)} {first}", *rest]
        return "\n".join(lines[-max(1, int(tail)) :])

    def close(self) -> None:
        """Close the client; later calls fail with a PermanentBackendError."""
        with self._lock:
            self._closed = True
            client, self._client = self._client, None
        if client is not None:
            client.__exit__(None, None, None)
