"""Runtime settings from the environment (prefix ``NIGHTSHIFT_``), built on demand."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from pydantic import SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = [
    "TEMPORARY_PREFECT_API",
    "Settings",
    "child_environment",
    "is_secret_variable",
    "load_settings",
    "temporary_prefect_api",
]

# the API URL of the temporary Prefect server ``nightshift`` started for this process (set
# beside PREFECT_API_URL, which then names it): a server of the night's own, not the jobs'
TEMPORARY_PREFECT_API = "NIGHTSHIFT_TEMPORARY_PREFECT_API"


class Settings(BaseSettings):
    """Everything configurable from the environment; secrets stay SecretStr."""

    model_config = SettingsConfigDict(env_prefix="NIGHTSHIFT_", extra="ignore")

    # where run directories, command-job logs and the default SQLite ledger live
    state_dir: Path = Path(".nightshift")
    # SQLAlchemy URL of the ledger; default: SQLite file in state_dir
    database_url: str | None = None
    # seconds a crashed night keeps others of its catalogue out (renewed every third of it)
    lease_ttl: float = 60.0
    # the agy-style job CLI
    agy: str = "agy"
    # Gemini API (google-genai); the key comes from GEMINI_API_KEY unless set here
    gemini_base_url: str | None = None
    gemini_api_version: str = "v1beta"
    gemini_api_key: SecretStr | None = None
    gemini_api_key_block: str | None = None  # name of a Prefect Secret block holding the key
    # Prometheus: the node-exporter textfile (default: state_dir/metrics/nightshift.prom; "" for
    # none) and a Pushgateway to push to at the end of each night and watchdog run
    metrics_file: Path | None = None
    pushgateway_url: str | None = None
    # the night report's picture (report.png, inline in the artifact): drawn by a second Python
    # with matplotlib at the night's end, about a second of CPU; false: the report without it
    report_plot: bool = True

    @field_validator("state_dir")
    @classmethod
    def _absolute(cls, value: Path) -> Path:
        # jobs run in other working directories; their paths must not depend on ours
        return value.expanduser().resolve()

    def metrics_path(self) -> Path | None:
        """Where the metrics textfile goes; None when it was turned off (an empty setting)."""
        if self.metrics_file is None:
            return self.state_dir / "metrics" / "nightshift.prom"
        return None if str(self.metrics_file) in ("", ".") else self.metrics_file.expanduser()

    def ledger_url(self) -> str:
        """The ledger's database URL, defaulting to SQLite under state_dir."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.state_dir / 'ledger.sqlite3').resolve()}"


def temporary_prefect_api(url: str | None, environ: Mapping[str, str]) -> bool:
    """Whether ``url``, the Prefect API in effect, is a temporary server: Prefect's own (no URL)
    or the one ``nightshift`` started for this process (``TEMPORARY_PREFECT_API``)."""
    return not url or url == environ.get(TEMPORARY_PREFECT_API)


def load_settings(**overrides: object) -> Settings:
    """Settings from the environment, with explicit overrides winning."""
    return Settings(**overrides)  # type: ignore[arg-type]


# names of variables a child process never inherits unless its job asks for them by name
_SECRET_WORDS = ("PASSWORD", "PASSWD", "SECRET", "CREDENTIAL", "APIKEY")  # anywhere in the name
_SECRET_PARTS = frozenset({"TOKEN", "KEY", "PASS", "COOKIE", "DSN"})  # a whole _-separated part
_SECRET_SUFFIXES = ("_AUTH_STRING", "_DATABASE_URL", "_CONNECTION_URL")
_SECRET_PREFIXES = ("SLACK_", "NIGHTSHIFT_GEMINI_", "NIGHTSHIFT_SLACK_")
_SECRET_NAMES = frozenset({"DATABASE_URL", "NIGHTSHIFT_DATABASE_URL"})
# scheme://user:password@host: a URL that carries its own password, whatever its name
_URL_WITH_PASSWORD = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/@\s]*:[^/@\s]+@")


def is_secret_variable(name: str, value: str = "") -> bool:
    """Whether an environment variable looks like a credential (by name, or a URL's password)."""
    upper = name.upper()
    return (
        upper in _SECRET_NAMES
        or any(word in upper for word in _SECRET_WORDS)
        or not _SECRET_PARTS.isdisjoint(re.split(r"[^A-Z0-9]+", upper))
        or upper.endswith(_SECRET_SUFFIXES)
        or upper.startswith(_SECRET_PREFIXES)
        or bool(_URL_WITH_PASSWORD.match(value))
    )


def child_environment(
    parent: Mapping[str, str],
    env: Mapping[str, str] | None = None,
    pass_env: Iterable[str] = (),
) -> dict[str, str]:
    """The environment of a job's process: ``parent`` minus its secrets, plus what the job names.

    ``pass_env`` names parent variables the job may have even if they look secret; ``env``
    gives values outright and wins over both.
    """
    out = {k: v for k, v in parent.items() if not is_secret_variable(k, v)}
    if parent.get(TEMPORARY_PREFECT_API):  # the night's temporary server dies with the night:
        out.pop(TEMPORARY_PREFECT_API, None)  # a job (one left running too) never uses it
        if out.get("PREFECT_API_URL") == parent[TEMPORARY_PREFECT_API]:
            del out["PREFECT_API_URL"]
    out.update({name: parent[name] for name in pass_env if name in parent})
    out.update(env or {})
    return out
