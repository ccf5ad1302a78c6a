"""Command jobs whose program or script is not where ``validate`` runs: what fails at 02:00.

A command's ``argv[0]`` is looked up on ``PATH`` (a path with a ``/`` as a file); a script handed
to an interpreter (``python scripts/audit.py``, ``sh ./load.sh``) is looked for from the job's
``cwd``, else the catalogue's folder (where the night starts it). The worker's machine and PATH
may differ, so these are warnings unless ``--strict``; a script of a job that depends on others
may be written by an earlier step, and says so.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from nightshift.config.catalogue import Catalogue, CommandJob
from nightshift.errors import CatalogueProblem

__all__ = ["command_problems"]

_INTERPRETERS = {"python", "python3", "sh", "bash", "zsh", "node", "ruby", "perl", "Rscript"}


def command_problems(catalogue: Catalogue, path_env: str | None = None) -> list[CatalogueProblem]:
    """Each command job whose executable or script is missing here, as a problem line."""
    here = catalogue.home
    search = os.environ.get("PATH", "") if path_env is None else path_env
    found: list[CatalogueProblem] = []
    for index, job in enumerate(catalogue.jobs):
        if not isinstance(job, CommandJob):
            continue
        line = catalogue.line("jobs", index, "argv")
        folder = here / job.cwd if job.cwd else here
        program = job.argv[0]
        if "/" in program:
            if not (folder / program).exists():
                why = f"{program} does not exist (from {folder})"
                found.append(_problem(job, line, why))
                continue
        elif shutil.which(program, path=search) is None:
            why = f"{program} is not a program on PATH here (the worker's PATH may differ)"
            found.append(_problem(job, line, why))
            continue
        script = _script(job.argv)
        if script is not None and not (folder / script).exists():
            why = f"script {script} does not exist (from {folder})"
            if job.depends_on:
                why += "; an earlier step may write it"
            found.append(_problem(job, line, why))
    return found


def _script(argv: list[str]) -> str | None:
    """The script an interpreter is handed (not ``-c ...``, ``-m module`` or an option)."""
    if Path(argv[0]).name.rstrip("0123456789.") not in _INTERPRETERS or len(argv) < 2:
        return None
    first = argv[1]
    return None if first.startswith("-") else first


def _problem(job: CommandJob, line: int | None, why: str) -> CatalogueProblem:
    return CatalogueProblem(why, line, job.label, "argv")
