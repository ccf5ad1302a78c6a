"""A catalogue job as its backend sees it."""

from __future__ import annotations

from nightshift.backends.base import JobSpec
from nightshift.config.catalogue import Catalogue, CommandJob, GeminiBatchJob

__all__ = ["job_spec"]


def job_spec(catalogue: Catalogue, label: str, submission_key: str | None = None) -> JobSpec:
    """The backend's view of a catalogue job."""
    job = catalogue.job(label)
    options = job.model_dump(exclude={"label", "backend", "depends_on", "timeout"})
    # relative paths in a catalogue mean "next to the catalogue", not "wherever we run from"
    home = catalogue.home
    if isinstance(job, GeminiBatchJob):
        options["sla"] = job.sla if job.sla is not None else catalogue.defaults.sla
        options["input"] = str(home / job.input)
        options["output"] = str(home / job.output)
        options["prices"] = {m: p.model_dump() for m, p in catalogue.gemini.prices.items()}
    if isinstance(job, CommandJob):
        options["cwd"] = str(home / job.cwd) if job.cwd else str(home)
    if submission_key is not None:
        # backends that can use it make a repeated submit with the same key a no-op
        options["submission_key"] = submission_key
    return JobSpec(label=label, backend=job.backend, options=options)
