"""``nightshift init``: a commented starter catalogue, never over an existing file: command jobs
sharing settings through a YAML anchor, http jobs through an ``apis:`` declaration."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

__all__ = ["INIT_EXIT_CODES", "ROUGH", "STARTER", "register", "run_init", "starter_catalogue"]

INIT_EXIT_CODES = """\
exit codes:
  0   the starter catalogue was written
  4   the file exists already (nothing written), or it could not be written
"""
_EXISTS = 4

STARTER = """\
# A starter catalogue from `nightshift init`. `nightshift validate` checks it without running
# anything (`--show rollup:orders` prints a job as it finally is, each field with its line).
# `nightshift run --only hello goodbye` runs the two command jobs as they are; the http jobs
# need a job API: `python -m nightshift.sandbox.jobs_api --memory` serves a local one.
# Every key is described in nightshift.example.yaml and docs/catalogue.md.
name: %(name)s%(name_pad)s# how messages, the ledger and the lease name this catalogue
defaults:                       # every key optional; these are the defaults
  poll: {initial: 2s, factor: 2, max: 30s}   # no watch or alert before 3 x max (90 s)
  deadline: 60m                 # the whole night; unfinished jobs are cancelled -> timeout
  queued_timeout: 15m           # seen queued this long, never running -> stuck_queued
# limits: {cli: 4}              # at most 4 job-CLI jobs in flight, longest expected first
x-nightly: &nightly             # an anchor to merge into jobs (`x-...` keys are not read)
  timeout: 30m                  # the job's own timeout -> timeout
  queued_timeout: 10m
apis:                           # an HTTP job API declared once; a job says `api: jobs-api`
  jobs-api:
    backend: http
    base_url: ${JOBS_API_URL:-http://127.0.0.1:8766}   # the variable, else this
    # auth: {env: JOBS_API_TOKEN}   # the token's variable, never the token
    submit: {url: /jobs, body: {task: "{label}"}}   # {label}, {key} filled in
    id_path: job_id             # where the answer has the job's id
    status_url: "/jobs/{id}"
    state_path: status
    states: {queued: [queued], running: [started], succeeded: [finished], failed: [failed],
             cancelled: [canceled, stopped]}
    cancel: {url: "/jobs/{id}/cancel"}
jobs:
  - label: hello                # lowercase letters, digits and : _ . -
    backend: command            # a local command, detached; its exit code decides
    argv: [echo, "hello from nightshift"]   # a script's path is relative to this file
    <<: *nightly                # timeout and queued_timeout from x-nightly
  - label: goodbye
    backend: command
    argv: [echo, "goodbye"]
    depends_on: [hello]         # runs after it succeeded, in one chain
    <<: *nightly
    timeout: 20m                # a key written in the job wins over the merged one
  - label: rollup:orders
    api: jobs-api               # everything from apis.jobs-api ...
    submit: {body: {task: rollup-orders, seconds: 2}}   # ... but this job's own body
  - label: rollup:refunds
    api: jobs-api
    timeout: 20m
  # - label: generate:article
  #   backend: cli              # the agy-style job CLI (NIGHTSHIFT_AGY or cli.executable)
  #   task: "generate article: ..."
  #   model: gemini-2.5-flash
  # - label: report:daily
  #   backend: gemini_batch     # a Gemini Batch API job; key in GEMINI_API_KEY
  #   model: gemini-2.5-flash
  #   input: data/daily.jsonl   # one {"key": ..., "request": {...}} per line
  #   output: out/daily.jsonl
  #   sla: 24h
# notify:                       # Slack; without it the night tells only its exit code
#   env: production
#   slack: {token: SLACK_BOT_TOKEN}    # the name of an env var, never the token
#   routes:
#     failed: {channel: "#batch-alerts", mention: "<!here>"}
#     partial: {channel: "#batch-digest"}
#     alert: {channel: "#batch-alerts"}
"""


ROUGH = """\
# A rough night from `nightshift init --example rough`: deploy it (README, "Deployments") to see
# what a bad morning looks like in the Prefect UI before your own jobs exist. Every job is a
# shell command, so it runs anywhere:
#   audit:links     fails (exit 3); why is the last line of its log
#   fetch:feeds     fails inside a chain, so publish:feeds after it is skipped
#   report:daily    succeeds, slowly (20 s)
#   rollup:orders   succeeds
# The night ends Partial (exit 2). Then fix the audit (`exit 0`) and retry the run from the UI:
# only what did not succeed runs again.
name: %(name)s%(name_pad)s# how messages, the ledger and the lease name this catalogue
defaults: {poll: {initial: 1s, factor: 2, max: 5s}, retries: 0, deadline: 10m}
x-sh: &sh {backend: command, timeout: 5m}
jobs:
  - label: audit:links
    <<: *sh
    argv: [sh, -c, "echo 'checking 120 links'; echo 'https://example.com/a: 404';
                    echo 'https://example.com/b: 404';
                    echo '2 broken links found, failing the audit' >&2; exit 3"]
  - label: fetch:feeds
    <<: *sh
    argv: [sh, -c, "echo 'fetching 3 feeds';
                    echo 'feeds.example.com answered 503 three times, giving up' >&2; exit 1"]
  - label: publish:feeds
    <<: *sh
    depends_on: [fetch:feeds]
    argv: [sh, -c, "echo 'published 3 feeds'"]
  - label: report:daily
    <<: *sh
    argv: [sh, -c, "sleep 20; echo 'report written'"]
  - label: rollup:orders
    <<: *sh
    argv: [sh, -c, "echo 'rolled up 1204 orders'"]
"""
EXAMPLES = {"starter": STARTER, "rough": ROUGH}


def starter_catalogue(name: str, example: str = "starter") -> str:
    """The starter catalogue's text (or another ``example``), named ``name``."""
    return EXAMPLES[example] % {"name": name, "name_pad": " " * max(1, 26 - len(name))}


def default_name(path: Path) -> str:
    """A name from the catalogue's folder (``/srv/batch/nightshift.yaml``: ``batch``)."""
    folder = path.absolute().parent.name
    slug = re.sub(r"[^a-z0-9_.-]+", "-", folder.lower()).strip("-.")
    return slug or "nightly"


def register(sub: Any) -> None:
    """Add ``init`` to the subcommands."""
    from nightshift.cli.args import add_command, catalogue_flag

    init = add_command(
        sub,
        "init",
        "write a commented starter catalogue (never over an existing file)",
        _command,
        INIT_EXIT_CODES,
    )
    catalogue_flag(init, "where to write it")
    init.add_argument("--name", help="the catalogue's name (default: its folder's name)")
    init.add_argument(
        "--example",
        choices=sorted(EXAMPLES),
        default="starter",
        help="starter: a commented catalogue to edit; rough: a night that fails in the ways "
        "a bad morning does (a failing job, a failed chain with a skipped step), to deploy",
    )


def _command(args: argparse.Namespace) -> int:
    return run_init(args.catalogue, args.name, args.example)


def run_init(path_text: str, name: str | None = None, example: str = "starter") -> int:
    """Write the starter (or another ``example``) to ``path_text``; an existing file is left
    alone (one line, exit 4)."""
    path = Path(path_text)
    text = starter_catalogue(name or default_name(path), example)
    try:
        with path.open("x", encoding="utf-8") as out:  # "x": never over a file, even one racing
            out.write(text)
    except FileExistsError:
        print(f"nightshift init: {path} exists; nothing written", file=sys.stderr)
        return _EXISTS
    except OSError as exc:
        print(f"nightshift init: cannot write {path}: {exc.strerror}", file=sys.stderr)
        return _EXISTS
    print(f"wrote {path}: check it with `nightshift validate --catalogue {path}`")
    return 0
