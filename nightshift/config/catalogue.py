"""The job catalogue's schema: the pydantic models a catalogue file validates against.

Reading the file (YAML, every key's line kept for errors) is ``nightshift.config.loader``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
)

from nightshift.config.durations import parse_duration
from nightshift.config.http_api import HttpApiFields
from nightshift.config.incident import IncidentSettings
from nightshift.config.limits import BackendLimit
from nightshift.config.missed import Missed
from nightshift.config.names import DEFAULT_NAME
from nightshift.config.notify import NotifyConfig
from nightshift.config.spend import Cost, FinishBy, JobSpend, NightSpend

__all__ = [
    "BACKENDS",
    "MIN_SAMPLES",
    "MIN_SAMPLES_MAX",
    "AnyJob",
    "Catalogue",
    "CliJob",
    "CommandJob",
    "Defaults",
    "DeploymentJob",
    "GeminiBatchJob",
    "HttpJob",
    "Job",
    "LearnedTimeout",
]

BACKENDS = ("command", "cli", "gemini_batch", "deployment", "http")
LABEL_PATTERN = r"^[a-z0-9:_.-]+$"
DEPLOYMENT_PATTERN = r"^[^/\s][^/]*/[^/]*[^/\s]$"  # "flow-name/deployment-name"

Duration = Annotated[float, BeforeValidator(parse_duration)]
# a timer of 0 would fire at once: never what the catalogue means
Timer = Annotated[Duration, Field(gt=0)]
# fewer samples than this and a budget falls back (job -> backend -> learning): the one
# `defaults.min_samples` the budgets, the dwell watch, the watchdog and a learned timeout honour
MIN_SAMPLES = 7
# a whole-job budget has one sample a night and reads 30 days: more could never be reached
MIN_SAMPLES_MAX = 30


def _no_bool(value: Any) -> Any:
    # `min_samples: yes` is a slip, not "1"
    if isinstance(value, bool):
        raise ValueError(f"a whole number from 1 to {MIN_SAMPLES_MAX}, not {str(value).lower()}")
    return value


MinSamples = Annotated[int, BeforeValidator(_no_bool), Field(ge=1, le=MIN_SAMPLES_MAX)]
# how long a submit refused for now (429, 503, a timeout) keeps trying; 0: one try
Patience = Annotated[Duration, Field(ge=0, le=86400)]


def _number_to_str(value: Any) -> Any:
    # `argv: [sleep, 5]` should mean "5", but a YAML `true` is more likely a mistake
    return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


Arg = Annotated[str, BeforeValidator(_number_to_str)]
EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PollSettings(_Strict):
    """Exponential backoff between status checks."""

    initial: Annotated[Duration, Field(gt=0)] = 2.0
    factor: float = Field(2.0, ge=1.0)
    max: Duration = 30.0

    @model_validator(mode="after")
    def _max_not_below_initial(self) -> PollSettings:
        if self.max < self.initial:
            if "max" not in self.model_fields_set:
                # `poll: {initial: 60s}` alone means "start slow", not "contradict the cap"
                return self.model_copy(update={"max": self.initial})
            raise ValueError(f"max ({self.max:g}s) is below initial ({self.initial:g}s)")
        return self


class LearnedTimeout(_Strict):
    """How a job with a learned timeout (``timeout: learned``, ``over_expected``) is cut."""

    # the old place of `defaults.min_samples`: still read, as that same one setting
    min_samples: MinSamples | None = None
    floor: Timer = 600.0  # never cancelled before it has run this long
    over_expected: Timer = 1800.0  # the margin when a job says only `timeout: learned`


class Defaults(_Strict):
    """Night-wide defaults; every key optional."""

    retries: int = Field(2, ge=0, le=10)
    retry_delay: Duration = 2.0
    poll: PollSettings = PollSettings()
    # the gap between two submissions to one backend: its pace unless `limits` gives a `rate`
    stagger: Duration = 0.5
    deadline: Timer = 3600.0
    queued_timeout: Timer = 900.0
    # how long a job the service does not know yet (a 404 for a fresh id) may take to show up
    visible_within: Timer = 600.0
    sla: Timer = 86400.0
    sla_fallback_at: float = Field(0.8, gt=0, le=1)
    submit_patience: Patience = 300.0  # every backend's, unless its own section says
    # samples a budget needs (nights, for a whole job's) before anything acts on it
    min_samples: MinSamples = MIN_SAMPLES
    learned_timeout: LearnedTimeout = LearnedTimeout()
    # when the night should be done, in its schedule's timezone (`nightshift plan` reads it)
    finish_by: FinishBy | None = None
    # what one night may spend or commit on paid jobs (None: no cap)
    spend: NightSpend | None = None
    # the earlier nights of the schedule that never ran (a worker down): run or named
    missed: Missed = Missed()
    # several jobs of one backend stalled together: one incident (nightshift.config.incident)
    incident: IncidentSettings = IncidentSettings()

    @model_validator(mode="after")
    def _one_min_samples(self) -> Defaults:
        old = self.learned_timeout.min_samples
        if old is None or old == self.min_samples:
            return self
        if "min_samples" in self.model_fields_set:
            raise ValueError(
                f"min_samples ({self.min_samples}) and learned_timeout.min_samples ({old}) "
                "are one setting: keep only min_samples"
            )
        return self.model_copy(update={"min_samples": old})


class _JobBase(_Strict):
    label: str = Field(pattern=LABEL_PATTERN)
    depends_on: list[str] = []
    timeout: Timer | None = None
    queued_timeout: Timer | None = None
    visible_within: Timer | None = None
    # cancel past the p95 of its whole duration plus this (`timeout: learned` says "the default")
    over_expected: Timer | None = None
    learned: bool = Field(False, exclude=True)  # set by `timeout: learned` or `over_expected`
    cost: Cost | None = None  # its estimate per run until its results teach one
    # how long it usually takes, until its own nights teach it (plan, forecast, its first watch)
    expect: Timer | None = None
    spend: JobSpend | None = None  # its own cap

    @model_validator(mode="before")
    @classmethod
    def _learned_timeout(cls, data: Any) -> Any:
        # `learned: true` in the file says the same as `timeout: learned`
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if data.get("timeout") == "learned":
            del data["timeout"]
            data["learned"] = True
        elif data.get("over_expected") is not None:
            data.setdefault("learned", True)
        return data


class CommandJob(_JobBase):
    """A local detached process."""

    backend: Literal["command"]
    argv: list[Arg] = Field(min_length=1)
    cwd: str | None = None
    # jobs inherit our environment minus secrets; they name what else they need
    env: dict[EnvName, Arg] = {}
    pass_env: list[EnvName] = []


class CliJob(_JobBase):
    """A job of the agy-style job CLI."""

    backend: Literal["cli"]
    task: str = Field(min_length=1)
    model: str = "gemini-3.5-flash"
    env: dict[EnvName, Arg] = {}
    pass_env: list[EnvName] = []


class GeminiBatchJob(_JobBase):
    """A Gemini Batch API job."""

    backend: Literal["gemini_batch"]
    model: str
    input: str
    output: str
    sla: Timer | None = None
    fallback: Literal["on_demand", "none"] = "on_demand"
    # inputs up to both thresholds go inline; larger ones as an uploaded JSONL file
    inline_threshold_rows: int = Field(1000, ge=0)
    inline_threshold_bytes: int = Field(10 * 1024 * 1024, ge=0)


class DeploymentJob(_JobBase):
    """A flow run of an existing Prefect deployment, on whatever work pool it names."""

    backend: Literal["deployment"]
    deployment: str = Field(pattern=DEPLOYMENT_PATTERN)
    parameters: dict[str, Any] = {}
    work_queue: str | None = Field(None, min_length=1)
    job_variables: dict[str, Any] = {}


class HttpJob(_JobBase, HttpApiFields):
    """A job of an HTTP job API (``nightshift.config.http_api``)."""

    backend: Literal["http"]


AnyJob = CommandJob | CliJob | GeminiBatchJob | DeploymentJob | HttpJob
Job = Annotated[AnyJob, Field(discriminator="backend")]


def job_model(backend: str) -> type[_JobBase]:
    """The model of a job of ``backend`` (its fields are what a job of it may say)."""
    models: dict[str, type[_JobBase]] = {
        "command": CommandJob, "cli": CliJob, "gemini_batch": GeminiBatchJob,
        "deployment": DeploymentJob, "http": HttpJob,
    }  # fmt: skip
    return models.get(backend, _JobBase)


class CliSettings(_Strict):
    executable: str | None = None
    # what every call of the job CLI may see beyond our environment minus secrets (its login)
    env: dict[EnvName, Arg] = {}
    pass_env: list[EnvName] = []
    submit_patience: Patience | None = None  # None: the defaults'


class ModelPrice(_Strict):
    """USD per 1M tokens, on demand (the batch is billed half); output includes thinking."""

    input: Annotated[float, Field(ge=0)]
    output: Annotated[float, Field(ge=0)]


class GeminiSettings(_Strict):
    # model -> its price, over the built-in table (nightshift.backends.gemini.pricing)
    prices: dict[Annotated[str, Field(min_length=1)], ModelPrice] = {}
    base_url: str | None = None
    api_version: str | None = None
    api_key_block: str | None = None  # name of a Prefect Secret block holding the key
    submit_patience: Patience | None = None  # None: the defaults'


class DeploymentSettings(_Strict):
    # the Prefect API whose deployments `deployment` jobs run; None: the night's own
    api_url: str | None = Field(None, pattern=r"^https?://")


class TelemetrySettings(_Strict):
    """What the OTEL_* variables cannot say about a night's trace (docs/tracing.md)."""

    # where a person opens a trace: a template with {trace_id}, e.g. a Grafana Tempo URL
    trace_url: str | None = None

    @field_validator("trace_url")
    @classmethod
    def _a_template(cls, value: str | None) -> str | None:
        if value is not None and (
            not value.startswith(("http://", "https://")) or "{trace_id}" not in value
        ):
            raise ValueError(
                "must be an http(s) URL with {trace_id} where the trace id goes, e.g. "
                '"https://tempo.internal/trace/{trace_id}"'
            )
        return value

    def url_of(self, trace_id: str) -> str | None:
        """The trace's link, when a template is set."""
        return None if self.trace_url is None else self.trace_url.replace("{trace_id}", trace_id)


class Catalogue(_Strict):
    """A validated catalogue."""

    name: str | None = None
    defaults: Defaults = Defaults()
    # `cli: 4` (the concurrency) or `cli: {concurrency: 4, rate: 2/s}` (nightshift.config.limits)
    limits: dict[Literal["command", "cli", "gemini_batch", "deployment", "http"], BackendLimit] = {}
    # shared: one Prefect limit per backend for every catalogue (nightshift-cli); catalogue:
    # this catalogue's own (nightshift-<catalogue>-cli), when two must not share a cap
    limit_scope: Literal["shared", "catalogue"] = "shared"
    cli: CliSettings = CliSettings()
    gemini: GeminiSettings = GeminiSettings()
    deployment: DeploymentSettings = DeploymentSettings()
    notify: NotifyConfig | None = None  # no section: the night tells only its exit code
    telemetry: TelemetrySettings = TelemetrySettings()  # tracing: the OTEL_* variables turn it on
    jobs: list[Job] = Field(min_length=1)
    path: Path | None = Field(default=None, exclude=True)

    # label -> job, built once: the runner looks a job up on every state change
    _by_label: dict[str, AnyJob] = PrivateAttr(default_factory=dict)

    # (key, index, ...) path -> line in the file, for problems found after validation
    _lines: dict[tuple[Any, ...], int] = PrivateAttr(default_factory=dict)
    # path -> where a value not written there came from ("from apis.reports, line 4")
    _sources: dict[tuple[Any, ...], str] = PrivateAttr(default_factory=dict)

    # the file, resolved once when loaded: a later change of working directory (a deployment's
    # pull step, a library) moves neither the catalogue's key nor where its relative paths start
    _file: Path | None = PrivateAttr(default=None)

    def model_post_init(self, _context: Any) -> None:
        self._by_label = {job.label: job for job in self.jobs}
        self._file = self.path.resolve() if self.path is not None else None

    @property
    def caps(self) -> dict[str, int]:
        """Backend -> the most jobs it may have in flight (capped backends only)."""
        return {str(b): lim.concurrency for b, lim in self.limits.items() if lim.concurrency}

    @property
    def rates(self) -> dict[str, float]:
        """Backend -> submissions a second (backends with a `rate` only)."""
        return {str(b): lim.rate for b, lim in self.limits.items() if lim.rate}

    def submit_patience(self, backend: str) -> float:
        """Seconds a refused submit to ``backend`` keeps trying: its section's, else the
        defaults'."""
        own = {"cli": self.cli.submit_patience, "gemini_batch": self.gemini.submit_patience}
        value = own.get(backend)
        return self.defaults.submit_patience if value is None else value

    def incident(self, backend: str) -> IncidentSettings:
        """``backend``'s incident settings: ``limits.<backend>.incident`` over the defaults'."""
        limit = self.limits.get(backend)  # type: ignore[call-overload]
        own = None if limit is None else limit.incident
        if own is None:
            return self.defaults.incident
        return self.defaults.incident.model_copy(update=own.model_dump(exclude_unset=True))

    def line(self, *at: Any) -> int | None:
        """The line of ``at`` (e.g. ``"jobs", 0, "timeout"``) in the file, when known."""
        return self._lines.get(at)

    def source(self, *at: Any) -> str | None:
        """Where the value at ``at`` came from when it is not written there (``"from
        apis.reports, line 4"``, ``"merged from line 3"``); None for a value written in place."""
        return self._sources.get(at)

    def job(self, label: str) -> AnyJob:
        """The job called ``label`` (KeyError naming it when there is none)."""
        return self._by_label[label]

    @property
    def home(self) -> Path:
        """Where the catalogue's relative paths start: its folder (not the working directory)."""
        return self._file.parent if self._file is not None else Path.cwd()

    @property
    def shown(self) -> str:
        """The catalogue as messages name it: its ``name``, else its file's stem, never a path."""
        if self.name:
            return self.name
        return self.path.stem if self.path else DEFAULT_NAME

    @property
    def key(self) -> str:
        """What identifies "the same catalogue" for the one-night-at-a-time lease."""
        if self.name:
            return self.name
        return str(self._file) if self._file is not None else "nightshift"
