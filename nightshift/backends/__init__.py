"""Backends, and the one place they are built from settings and the catalogue."""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from nightshift.backends.base import (
    Backend,
    Capabilities,
    ExternalState,
    JobSpec,
    JobStatus,
    capabilities,
)
from nightshift.errors import NightshiftError

if TYPE_CHECKING:
    from nightshift.config.catalogue import Catalogue
    from nightshift.config.settings import Settings

__all__ = [
    "Backend",
    "Capabilities",
    "ExternalState",
    "JobSpec",
    "JobStatus",
    "build_backends",
    "capabilities",
    "close_backends",
]


def build_backends(
    catalogue: Catalogue, settings: Settings, errors: dict[str, str] | None = None
) -> dict[str, Backend]:
    """A backend for every backend name the catalogue uses; tests pass their own instead.

    With ``errors``, a backend that can't be built (no Gemini key, a missing Secret block) is
    left out and the reason recorded there, so the other backends' jobs still run.
    """
    builders: dict[str, Callable[[], Backend]] = {
        "command": lambda: _command(settings),
        "cli": lambda: _cli(catalogue, settings),
        "gemini_batch": lambda: _gemini(catalogue, settings),
        "deployment": lambda: _deployment(catalogue),
        "http": lambda: _http(catalogue),
    }
    used = {job.backend for job in catalogue.jobs}
    out: dict[str, Backend] = {}
    for name, build in builders.items():
        if name not in used:
            continue
        try:
            out[name] = build()
        except Exception as exc:  # whatever a client or Secret block raises: that backend only
            if errors is None:
                raise
            reason = str(exc)
            if not isinstance(exc, NightshiftError):
                reason = f"{type(exc).__name__}: {reason}"
            errors[name] = f"the {name} backend could not be built: {reason}"
    return out


def close_backends(backends: Mapping[str, Backend]) -> None:
    """Close every backend that holds clients; one that fails to close doesn't keep the rest open.

    The first error is raised once all have been tried.
    """
    errors: list[Exception] = []
    for backend in backends.values():
        if (closeable := capabilities(backend).closeable) is None:
            continue  # nothing held open (the command and job CLI backends)
        try:
            closeable.close()
        except Exception as exc:  # raised below, after the other backends are closed
            errors.append(exc)
    if errors:
        raise errors[0]


def _command(settings: Settings) -> Backend:
    from nightshift.backends.command.backend import CommandBackend

    return CommandBackend(settings.state_dir)


def _cli(catalogue: Catalogue, settings: Settings) -> Backend:
    from nightshift.backends.cli import CliBackend

    # catalogue wins over NIGHTSHIFT_AGY; either may carry arguments ("python -m sandbox.agy")
    cli = catalogue.cli
    executable = cli.executable or settings.agy
    from nightshift.backends.patience import Patience

    patience = Patience(catalogue.submit_patience("cli"))
    return CliBackend(
        shlex.split(executable), env=cli.env, pass_env=cli.pass_env, patience=patience
    )


def _gemini(catalogue: Catalogue, settings: Settings) -> Backend:
    from nightshift.backends.gemini.batch import GeminiBatchBackend, build_gemini_client

    overrides: dict[str, object] = {}
    if catalogue.gemini.base_url and not os.environ.get("NIGHTSHIFT_GEMINI_BASE_URL"):
        overrides["gemini_base_url"] = catalogue.gemini.base_url
    if catalogue.gemini.api_key_block and not settings.gemini_api_key_block:
        overrides["gemini_api_key_block"] = catalogue.gemini.api_key_block
    if catalogue.gemini.api_version:
        overrides["gemini_api_version"] = catalogue.gemini.api_version
    from nightshift.backends.patience import Patience

    client = build_gemini_client(settings.model_copy(update=overrides))
    return GeminiBatchBackend(client, patience=Patience(catalogue.submit_patience("gemini_batch")))


def _deployment(catalogue: Catalogue) -> Backend:
    from nightshift.backends.deployment import DeploymentBackend

    # None: the Prefect API the night itself runs against
    return DeploymentBackend(catalogue.deployment.api_url)


def _http(catalogue: Catalogue) -> Backend:
    from nightshift.backends.http import HttpBackend

    return HttpBackend({job.label: job for job in catalogue.jobs if job.backend == "http"})
