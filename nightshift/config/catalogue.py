"""The job catalogue: one YAML file, validated with pydantic, errors located by line."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    model_validator,
)

from nightshift.config.durations import parse_duration
from nightshift.config.graph import graph_problems
from nightshift.config.limits import BackendLimit
from nightshift.config.names import DEFAULT_NAME
from nightshift.config.timers import timer_problems
from nightshift.errors import CatalogueError, CatalogueProblem
from nightshift.notify.config import NotifyConfig

__all__ = [
    "BACKENDS",
    "AnyJob",
    "Catalogue",
    "CliJob",
    "CommandJob",
    "Defaults",
    "DeploymentJob",
    "GeminiBatchJob",
    "Job",
    "load_catalogue",
    "parse_catalogue",
]

BACKENDS = ("command", "cli", "gemini_batch", "deployment")
LABEL_PATTERN = r"^[a-z0-9:_.-]+$"
DEPLOYMENT_PATTERN = r"^[^/\s][^/]*/[^/]*[^/\s]$"  # "flow-name/deployment-name"

Duration = Annotated[float, BeforeValidator(parse_duration)]
# a timer of 0 would fire at once: never what the catalogue means
Timer = Annotated[Duration, Field(gt=0)]


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


class Defaults(_Strict):
    """Night-wide defaults; every key optional."""

    retries: int = Field(2, ge=0, le=10)
    retry_delay: Duration = 2.0
    poll: PollSettings = PollSettings()
    # the gap between two submissions to one backend: its pace unless `limits` gives a `rate`
    stagger: Duration = 0.5
    deadline: Timer = 3600.0
    queued_timeout: Timer = 900.0
    sla: Timer = 86400.0
    sla_fallback_at: float = Field(0.8, gt=0, le=1)


class _JobBase(_Strict):
    label: str = Field(pattern=LABEL_PATTERN)
    depends_on: list[str] = []
    timeout: Timer | None = None
    queued_timeout: Timer | None = None


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


AnyJob = CommandJob | CliJob | GeminiBatchJob | DeploymentJob
Job = Annotated[AnyJob, Field(discriminator="backend")]


class CliSettings(_Strict):
    executable: str | None = None
    # what every call of the job CLI may see beyond our environment minus secrets (its login)
    env: dict[EnvName, Arg] = {}
    pass_env: list[EnvName] = []


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


class DeploymentSettings(_Strict):
    # the Prefect API whose deployments `deployment` jobs run; None: the night's own
    api_url: str | None = Field(None, pattern=r"^https?://")


class Catalogue(_Strict):
    """A validated catalogue."""

    name: str | None = None
    defaults: Defaults = Defaults()
    # `cli: 4` (the concurrency) or `cli: {concurrency: 4, rate: 2/s}` (nightshift.config.limits)
    limits: dict[Literal["command", "cli", "gemini_batch", "deployment"], BackendLimit] = {}
    # shared: one Prefect limit per backend for every catalogue (nightshift-cli); catalogue:
    # this catalogue's own (nightshift-<catalogue>-cli), when two must not share a cap
    limit_scope: Literal["shared", "catalogue"] = "shared"
    cli: CliSettings = CliSettings()
    gemini: GeminiSettings = GeminiSettings()
    deployment: DeploymentSettings = DeploymentSettings()
    notify: NotifyConfig | None = None  # no section: the night tells only its exit code
    jobs: list[Job] = Field(min_length=1)
    path: Path | None = Field(default=None, exclude=True)

    # label -> job, built once: the runner looks a job up on every state change
    _by_label: dict[str, AnyJob] = PrivateAttr(default_factory=dict)

    # (key, index, ...) path -> line in the file, for problems found after validation
    _lines: dict[tuple[Any, ...], int] = PrivateAttr(default_factory=dict)

    def model_post_init(self, _context: Any) -> None:
        self._by_label = {job.label: job for job in self.jobs}

    @property
    def caps(self) -> dict[str, int]:
        """Backend -> the most jobs it may have in flight (capped backends only)."""
        return {str(b): lim.concurrency for b, lim in self.limits.items() if lim.concurrency}

    @property
    def rates(self) -> dict[str, float]:
        """Backend -> submissions a second (backends with a `rate` only)."""
        return {str(b): lim.rate for b, lim in self.limits.items() if lim.rate}

    def line(self, *at: Any) -> int | None:
        """The line of ``at`` (e.g. ``"jobs", 0, "timeout"``) in the file, when known."""
        return self._lines.get(at)

    def job(self, label: str) -> AnyJob:
        """The job called ``label`` (KeyError naming it when there is none)."""
        return self._by_label[label]

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
        return str(self.path.resolve()) if self.path else "nightshift"


def load_catalogue(path: str | Path) -> Catalogue:
    """Read and validate a catalogue file; raise CatalogueError naming file, line, job, field."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        reason = f"cannot read: {exc.strerror}"
        if isinstance(exc, FileNotFoundError):
            reason += " (`nightshift init` writes a starter catalogue)"
        raise CatalogueError(path, [CatalogueProblem(reason)]) from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CatalogueError(path, [not_utf8(data, exc)]) from None
    return parse_catalogue(text, path)


def not_utf8(data: bytes, exc: UnicodeDecodeError) -> CatalogueProblem:
    """Where a file stops being UTF-8 text: its line, and the byte within the line."""
    line = data.count(b"\n", 0, exc.start) + 1
    column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
    byte = data[exc.start]
    return CatalogueProblem(
        f"not UTF-8 text (a binary file?): invalid byte 0x{byte:02x} at column {column}", line
    )


def parse_catalogue(text: str, path: str | Path = "<catalogue>") -> Catalogue:
    """Validate catalogue YAML text; ``path`` is only used in error messages."""
    path = Path(path)
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise CatalogueError(path, [CatalogueProblem(f"not valid YAML: {problem}", line)]) from exc
    if node is None:
        raise CatalogueError(path, [CatalogueProblem("empty catalogue: no jobs", 1)])
    lines: dict[tuple[Any, ...], int] = {}
    try:
        data = _to_python(node, (), lines)
    except _DuplicateKey as dup:
        raise CatalogueError(path, [dup.problem(lines)]) from None
    if not isinstance(data, dict):
        raise CatalogueError(path, [CatalogueProblem("the top level must be a mapping", 1)])
    try:
        catalogue = Catalogue.model_validate({**data, "path": path})
    except ValidationError as exc:
        problems = [_locate(err, data, lines) for err in exc.errors()]
        raise CatalogueError(path, problems) from None
    catalogue._lines = lines
    problems = graph_problems(catalogue, lines) + timer_problems(catalogue, lines)
    if problems:
        raise CatalogueError(path, problems)
    return catalogue


class _DuplicateKey(Exception):
    """A mapping names the same key twice (YAML would silently keep the last)."""

    def __init__(
        self, key: Any, line: int, first: int, at: tuple[Any, ...], label: Any = None
    ) -> None:
        self.key, self.line, self.first, self.at, self.label = key, line, first, at, label

    def problem(self, lines: dict[tuple[Any, ...], int]) -> CatalogueProblem:
        job = None
        if len(self.at) >= 2 and self.at[0] == "jobs":
            job = str(self.label) if self.label else f"#{self.at[1] + 1}"
        where = ".".join(str(p) for p in self.at[2:] if job) if job else ".".join(map(str, self.at))
        name = f"{where}.{self.key}" if where else str(self.key)
        message = f"duplicate key (first on line {self.first})"
        return CatalogueProblem(message, self.line, job, name)


def _to_python(node: yaml.Node, at: tuple[Any, ...], lines: dict[tuple[Any, ...], int]) -> Any:
    """Build plain data from a YAML node, remembering the line of every key and item."""
    lines[at] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = yaml.SafeLoader(key_node.value).construct_object(key_node)
            if key in out:
                first = lines[(*at, key)]
                label = out.get("label") if len(at) == 2 and at[0] == "jobs" else None
                raise _DuplicateKey(key, key_node.start_mark.line + 1, first, at, label)
            lines[(*at, key)] = key_node.start_mark.line + 1
            value = _to_python(value_node, (*at, key), lines)
            lines[(*at, key)] = key_node.start_mark.line + 1
            out[key] = value
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_to_python(item, (*at, i), lines) for i, item in enumerate(node.value)]
    loader = yaml.SafeLoader("")
    return loader.construct_object(node)


def _locate(err: Any, data: dict[str, Any], lines: dict[tuple[Any, ...], int]) -> CatalogueProblem:
    """Turn one pydantic error into a problem with line, job label and field."""
    loc = list(err["loc"])
    if len(loc) >= 3 and loc[0] == "jobs" and loc[2] in BACKENDS:
        del loc[2]  # the union's tag, not a key of the file (a job may have a `deployment:`)
    elif loc[:1] == ["limits"] and loc[-1:] == ["[key]"]:  # a limit for no known backend
        loc = loc[:-1]
        err = {**err, "type": "union_tag_invalid"}
    job = None
    if len(loc) >= 2 and loc[0] == "jobs" and isinstance(loc[1], int):
        raw = data.get("jobs") or []
        item = raw[loc[1]] if loc[1] < len(raw) else None
        label = item.get("label") if isinstance(item, dict) else None
        job = str(label) if label else f"#{loc[1] + 1}"
        field_parts = loc[2:]
    else:
        field_parts = loc
    line = None
    for cut in range(len(loc), 0, -1):
        if tuple(loc[:cut]) in lines:
            line = lines[tuple(loc[:cut])]
            break
    message = err["msg"]
    if err["type"] == "extra_forbidden":
        message = "unknown key"
    elif err["type"] == "missing":
        message = "required field is missing"
    elif err["type"] == "union_tag_invalid":
        message = f"unknown backend; use one of: {', '.join(BACKENDS)}"
        field_parts = ["backend"] if job else field_parts
    elif err["type"] == "union_tag_not_found":
        message = f"missing 'backend'; use one of: {', '.join(BACKENDS)}"
        field_parts = ["backend"]
    elif err["type"] == "string_pattern_mismatch" and field_parts[-1:] == ["label"]:
        message = "labels use only a-z, 0-9 and : _ . -"
    elif err["type"] == "string_pattern_mismatch" and field_parts[-1:] == ["deployment"]:
        message = 'name the deployment as "flow-name/deployment-name"'
    elif err["type"] == "string_pattern_mismatch" and field_parts[-1:] == ["api_url"]:
        message = "must be an http(s):// URL of a Prefect API"
    elif err["type"] == "greater_than":
        message = f"must be more than {err['ctx']['gt']}"
    elif message.startswith("Value error, "):
        message = message.removeprefix("Value error, ")
    field_name = ".".join(str(p) for p in field_parts) or None
    return CatalogueProblem(message, line, job, field_name)
