"""Loading a big catalogue: one API declared once (``apis:``) against the same API written out in
every job, and today's loader against the committed one (issue 30: declared no slower).

Builds one catalogue of ``--jobs`` http jobs (3,000) twice: written out, each job repeating the
~15 lines of its API; declared, the API once under ``apis:`` and each job 4 lines (label,
``api:``, its own submit URL, a timeout). Both load to the same jobs (checked). Prints:

- ``load_catalogue`` in this process, ``--runs`` times each (interleaved), the median seconds
  and the ratio declared / written out;
- ``nightshift validate`` as a subprocess (Python start-up and imports included), the median of
  ``--cli-runs`` and the same ratio;
- with ``--main`` (the default), the written-out file loaded by the committed ``HEAD``'s loader
  (a ``git worktree`` of HEAD in a temporary folder, removed after, its ``nightshift`` imported
  from its own folder) against this tree's, each in a process of its own timed the same way,
  and the ratio this tree / HEAD.

    python bench/catalogue_load.py [--jobs N] [--runs N] [--cli-runs N] [--no-main]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from nightshift.config.loader import load_catalogue  # noqa: E402

# the API every job uses, as a job's fields (indented under a list item), 15 lines
API = """\
backend: http
base_url: "http://jobs.internal:8000"
auth: {env: JOBS_API_TOKEN}
id_path: job_id
status_url: "/jobs/{id}"
state_path: status
states:
  queued: [queued, deferred]
  running: [started]
  succeeded: [finished]
  failed: [failed]
result_path: result
error_path: error
cancel: {url: "/jobs/{id}/cancel"}
list: {url: "/jobs?ids={ids}", items_path: jobs}
"""
HEAD = "defaults: {deadline: 8h}\nlimits: {http: 50}\n"


def _own(i: int) -> list[str]:
    """What each job says itself, whichever way the API is written."""
    return [
        f"  - label: etl-{i:05d}",
        f'    submit: {{url: /jobs, body: {{task: "etl-{i:05d}", key: "{{key}}"}}}}',
        f"    timeout: {30 + i % 90}m",
    ]


def written_out(jobs: int) -> str:
    api = textwrap.indent(API, "    ")
    parts = [HEAD, "jobs:\n"]
    for i in range(jobs):
        parts.append("\n".join(_own(i)) + "\n" + api)
    return "".join(parts)


def declared(jobs: int) -> str:
    parts = [HEAD, "apis:\n  jobs-api:\n", textwrap.indent(API, "    "), "jobs:\n"]
    for i in range(jobs):
        own = _own(i)
        parts.append("\n".join([own[0], "    api: jobs-api", *own[1:]]) + "\n")
    return "".join(parts)


def load_times(path: Path, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        gc.collect()
        t0 = time.perf_counter()
        load_catalogue(path)
        out.append(time.perf_counter() - t0)
    return out


# run in another process, in the folder whose `nightshift` it must import
TIMER = """\
import gc, json, sys, time
import nightshift
from nightshift.config.loader import load_catalogue
times = []
for _ in range({runs}):
    gc.collect()
    t0 = time.perf_counter()
    load_catalogue({path!r})
    times.append(time.perf_counter() - t0)
print(json.dumps({{"package": nightshift.__file__, "times": times}}))
"""


def load_times_in(tree: Path, path: Path, runs: int) -> list[float]:
    """load_catalogue timed in a process of its own, importing ``tree``'s nightshift."""
    code = TIMER.format(runs=runs, path=str(path))
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tree, capture_output=True, text=True, check=True
    )
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    package = Path(answer["package"]).resolve()
    assert package.is_relative_to(tree.resolve()), f"{package} is not {tree}'s own"
    return list(answer["times"])


def validate_times(tree: Path, path: Path, runs: int) -> list[float]:
    """``python -m nightshift validate`` from ``tree``, start-up included; it must say ok."""
    out = []
    env = {**os.environ, "PYTHONPATH": str(tree)}
    for _ in range(runs):
        t0 = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "nightshift", "validate", "--catalogue", str(path)],
            cwd=tree,
            env=env,
            capture_output=True,
            text=True,
        )
        out.append(time.perf_counter() - t0)
        assert done.returncode == 0, done.stderr[-2000:]
    return out


def worktree_of_head(folder: Path) -> Path:
    tree = folder / "bench-main"
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), "HEAD"],
        check=True,
        capture_output=True,
    )
    return tree


def remove_worktree(tree: Path) -> None:
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)],
        check=False,
        capture_output=True,
    )
    subprocess.run(["git", "-C", str(REPO), "worktree", "prune"], check=False)


def median(times: list[float]) -> float:
    return statistics.median(times)


def row(what: str, times: list[float]) -> str:
    ms = median(times) * 1000
    return f"  {what:<44} {ms:8.0f} ms  (min {min(times) * 1000:.0f}, n={len(times)})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=5, help="load_catalogue runs per file")
    parser.add_argument("--cli-runs", type=int, default=3, help="validate runs per file")
    parser.add_argument("--no-main", dest="main", action="store_false", help="skip HEAD")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="nightshift-bench-") as tmp:
        folder = Path(tmp)
        files = {"written out": folder / "written.yaml", "declared": folder / "declared.yaml"}
        files["written out"].write_text(written_out(args.jobs), encoding="utf-8")
        files["declared"].write_text(declared(args.jobs), encoding="utf-8")
        a, b = (load_catalogue(p) for p in files.values())
        assert [j.model_dump() for j in a.jobs] == [j.model_dump() for j in b.jobs]
        del a, b  # a catalogue kept alive slows every later load's garbage collections
        for name, path in files.items():
            text = path.read_text(encoding="utf-8")
            print(f"{name}: {args.jobs:,} jobs, {text.count(chr(10)):,} lines, {len(text):,} bytes")

        load: dict[str, list[float]] = {name: [] for name in files}
        for _ in range(args.runs):  # interleaved: a slow moment of the machine hits both
            for name, path in files.items():
                load[name] += load_times(path, 1)
        cli: dict[str, list[float]] = {name: [] for name in files}
        for _ in range(args.cli_runs):
            for name, path in files.items():
                cli[name] += validate_times(REPO, path, 1)

        print("load_catalogue, in process (median):")
        for name in files:
            print(row(name, load[name]))
        ratio = median(load["declared"]) / median(load["written out"])
        print(f"  ratio declared / written out                 {ratio:8.2f}")
        print("nightshift validate, a subprocess (start-up included, median):")
        for name in files:
            print(row(name, cli[name]))
        ratio_cli = median(cli["declared"]) / median(cli["written out"])
        print(f"  ratio declared / written out                 {ratio_cli:8.2f}")
        verdict = "no slower" if max(ratio, ratio_cli) <= 1.0 else "SLOWER"
        print(f"declared is {verdict} than written out (issue 30)")

        if args.main:
            tree = worktree_of_head(folder)
            try:
                written = files["written out"]
                old, new = [], []
                old_cli, new_cli = [], []
                old += load_times_in(tree, written, args.runs)
                new += load_times_in(REPO, written, args.runs)
                for _ in range(args.cli_runs):
                    old_cli += validate_times(tree, written, 1)
                    new_cli += validate_times(REPO, written, 1)
            finally:
                remove_worktree(tree)
            print("the written-out file, committed HEAD's loader against this tree's (median):")
            print(row("load_catalogue, HEAD", old))
            print(row("load_catalogue, this tree", new))
            print(
                f"  ratio this tree / HEAD                       {median(new) / median(old):8.2f}"
            )
            print(row("nightshift validate, HEAD", old_cli))
            print(row("nightshift validate, this tree", new_cli))
            print(
                f"  ratio this tree / HEAD                       "
                f"{median(new_cli) / median(old_cli):8.2f}"
            )
    load = os.getloadavg()
    print(f"load average: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
