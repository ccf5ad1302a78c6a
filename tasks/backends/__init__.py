"""Backends, and the one place they are built from settings and the catalogue."""

from __future__ import annotations

import os
import shlex
from typing import TYPE_CHECKING

from tasks.backends.base import Backend, ExternalState, JobSpec, JobStatus

if TYPE_CHECKING:
    from tasks.catalogue import Catalogue
    from tasks.settings import Settings

__all__ = ["Backend", "ExternalState", "JobSpec", "JobStatus", "build_backends"]


def build_backends(catalogue: Catalogue, settings: Settings) -> dict[str, Backend]:
    """A backend for every backend name the catalogue uses; tests pass their own instead."""
    used = {job.backend for job in catalogue.jobs}
    out: dict[str, Backend] = {}
    if "command" in used:
        from tasks.backends.command import CommandBackend

        out["command"] = CommandBackend(settings.state_dir)
    if "cli" in used:
        from tasks.backends.cli import CliBackend

        # catalogue wins over NIGHTSHIFT_AGY; either may carry arguments ("python -m sandbox.agy")
        executable = catalogue.cli.executable or settings.agy
        cli = catalogue.cli
        out["cli"] = CliBackend(shlex.split(executable), env=cli.env, pass_env=cli.pass_env)
    if "gemini_batch" in used:
        from tasks.backends.gemini_batch import GeminiBatchBackend, build_gemini_client

        overrides: dict[str, object] = {}
        if catalogue.gemini.base_url and not os.environ.get("NIGHTSHIFT_GEMINI_BASE_URL"):
            overrides["gemini_base_url"] = catalogue.gemini.base_url
        if catalogue.gemini.api_key_block and not settings.gemini_api_key_block:
            overrides["gemini_api_key_block"] = catalogue.gemini.api_key_block
        if catalogue.gemini.api_version:
            overrides["gemini_api_version"] = catalogue.gemini.api_version
        client = build_gemini_client(settings.model_copy(update=overrides))
        out["gemini_batch"] = GeminiBatchBackend(client)
    return out
