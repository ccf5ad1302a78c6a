"""A catalogue's jobs as a graph: duplicate labels, unknown or cyclic dependencies, outputs."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from nightshift.errors import CatalogueProblem

if TYPE_CHECKING:
    from nightshift.config.catalogue import Catalogue

__all__ = ["find_cycle", "graph_problems"]


def graph_problems(
    catalogue: Catalogue, lines: dict[tuple[Any, ...], int]
) -> list[CatalogueProblem]:
    """Duplicate labels, unknown depends_on targets and cycles."""
    problems: list[CatalogueProblem] = []
    seen: dict[str, int] = {}
    for i, job in enumerate(catalogue.jobs):
        if job.label in seen:
            first = lines.get(("jobs", seen[job.label], "label"))
            problems.append(
                CatalogueProblem(
                    f"duplicate label (first defined on line {first})",
                    lines.get(("jobs", i, "label")),
                    job.label,
                    "label",
                )
            )
        else:
            seen[job.label] = i
        for d, dep in enumerate(job.depends_on):
            if dep not in {j.label for j in catalogue.jobs}:
                problems.append(
                    CatalogueProblem(
                        f"unknown job {dep!r}",
                        lines.get(("jobs", i, "depends_on", d)),
                        job.label,
                        "depends_on",
                    )
                )
            elif dep == job.label:
                problems.append(
                    CatalogueProblem(
                        "a job cannot depend on itself",
                        lines.get(("jobs", i, "depends_on", d)),
                        job.label,
                        "depends_on",
                    )
                )
    outputs: dict[str, str] = {}
    home = catalogue.home
    for i, job in enumerate(catalogue.jobs):
        if job.backend == "gemini_batch":
            # `out/a.jsonl`, `./out/a.jsonl` and `out/../out/a.jsonl` are one file
            output = os.path.normpath(home / job.output)
            if output in outputs:
                problems.append(
                    CatalogueProblem(
                        f"output {job.output!r} is also written by {outputs[output]!r}",
                        lines.get(("jobs", i, "output")),
                        job.label,
                        "output",
                    )
                )
            outputs.setdefault(output, job.label)
    if problems:
        return problems
    cycle = find_cycle({j.label: list(j.depends_on) for j in catalogue.jobs})
    if cycle:
        index = next(i for i, j in enumerate(catalogue.jobs) if j.label == cycle[0])
        problems.append(
            CatalogueProblem(
                "dependency cycle: " + " -> ".join([*cycle, cycle[0]]),
                lines.get(("jobs", index, "depends_on")),
                cycle[0],
                "depends_on",
            )
        )
    return problems


def find_cycle(graph: dict[str, list[str]]) -> list[str] | None:
    """One cycle in ``graph`` (label -> dependencies) as a list of labels, or None."""
    white, grey, black = 0, 1, 2
    colour = dict.fromkeys(graph, white)
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        colour[node] = grey
        stack.append(node)
        for dep in graph[node]:
            if colour[dep] == grey:
                return stack[stack.index(dep) :]
            if colour[dep] == white and (found := visit(dep)):
                return found
        stack.pop()
        colour[node] = black
        return None

    for node in graph:
        if colour[node] == white and (found := visit(node)):
            return found
    return None
