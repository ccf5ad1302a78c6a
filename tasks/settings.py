"""Runtime settings from the environment (prefix ``NIGHTSHIFT_``), built on demand."""

from __future__ import annotations

from pathlib import Path

from pydantic import SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["Settings", "load_settings"]


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

    @field_validator("state_dir")
    @classmethod
    def _absolute(cls, value: Path) -> Path:
        # jobs run in other working directories; their paths must not depend on ours
        return value.expanduser().resolve()

    def ledger_url(self) -> str:
        """The ledger's database URL, defaulting to SQLite under state_dir."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.state_dir / 'ledger.sqlite3').resolve()}"


def load_settings(**overrides: object) -> Settings:
    """Settings from the environment, with explicit overrides winning."""
    return Settings(**overrides)  # type: ignore[arg-type]
